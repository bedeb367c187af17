/* Faults found in review, each reproduced here: a lost listener role, limit changes that stopped
 * key refresh, and SIGPIPE after a Redis restart. */
#include "sem_helpers.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#define K "dbthrottle:{lead}:q:"

static atomic_int t_may_leave;

/* T is about to give up (it sits at the top of its wait loop) until the test lets it go. */
static bool t_interrupted(void *arg)
{
    (void)arg;
    while (!atomic_load(&t_may_leave))
        usleep(1000);
    return true;
}

typedef struct {
    dbt_pool *p;
    int64_t wait_ms;
    bool is_t;
    dbt_acq_result res;
    dbt_permit *pm;
} arg_t;

static void *run(void *v)
{
    arg_t *a = v;
    dbt_acquire_opts o = {
        .limit = 1, .wait_ms = a->wait_ms, .interrupted = a->is_t ? t_interrupted : NULL};
    a->res = dbt_acquire(a->p, DBT_KIND_QUERY, &o, &a->pm);
    return NULL;
}

/* The leader (A) is granted and hands its role to T just as T gives up; W, still waiting, must
 * still get its grant. */
Test(regressions, listener_role_survives_a_waiter_that_leaves, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    test_config(&cfg, &r, "DBTHROTTLE_LEASE=30s", NULL);
    dbt_client *hc = dbt_client_new(&cfg), *wc = dbt_client_new(&cfg);
    dbt_pool *hp = dbt_client_pool(hc, "lead"), *wp = dbt_client_pool(wc, "lead");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    arg_t A = {.p = wp, .wait_ms = 20000}, W = {.p = wp, .wait_ms = 8000},
          T = {.p = wp, .wait_ms = 20000, .is_t = true};
    pthread_t ta, tw, tt;
    zcard_is q = {&r, K "queue", 1};
    pthread_create(&ta, NULL, run, &A);
    cr_assert(test_wait_until(test_zcard_is, &q, 5000));
    pthread_create(&tw, NULL, run, &W);
    q.n = 2;
    cr_assert(test_wait_until(test_zcard_is, &q, 5000));
    pthread_create(&tt, NULL, run, &T);
    q.n = 3;
    cr_assert(test_wait_until(test_zcard_is, &q, 5000));
    dbt_release(held); /* A is granted and leaves, passing the role on */
    pthread_join(ta, NULL);
    cr_assert_eq(A.res, DBT_ACQ_GRANTED);
    atomic_store(&t_may_leave, 1);
    pthread_join(tt, NULL);
    cr_expect_eq(T.res, DBT_ACQ_INTERRUPTED);
    int64_t t0 = test_now_ms();
    dbt_release(A.pm); /* W is the head now */
    pthread_join(tw, NULL);
    cr_expect_eq(W.res, DBT_ACQ_GRANTED, "the remaining waiter never got its grant");
    /* With a 30 s lease no renewal comes to the rescue: the grant came through a listener. */
    cr_expect_lt(test_now_ms() - t0, 5000);
    dbt_release(W.pm);
    dbt_client_free(hc);
    dbt_client_free(wc);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}

/* Callers configured with different limits alternate for seven leases while two permits are held:
 * the pool's keys must keep their TTL, and the held permits must stay valid. */
Test(regressions, alternating_limits_keep_the_keys_alive, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    test_config(&cfg, &r, "DBTHROTTLE_LEASE=600ms", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "ttl");
    dbt_acquire_opts two = {.limit = 2, .wait_ms = 0}, three = {.limit = 3, .wait_ms = 0};
    dbt_permit *h1, *h2, *x;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &h1), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &two, &h2), DBT_ACQ_GRANTED);
    long long min_ttl = 1 << 30;
    for (int i = 0; i < 80; i++) { /* 4 s, about 7 leases */
        if (dbt_acquire(p, DBT_KIND_QUERY, (i % 2) ? &three : &two, &x) == DBT_ACQ_GRANTED)
            dbt_release(x);
        long long t = test_redis_int(&r, "PTTL dbthrottle:{ttl}:q:holders");
        if (t < min_ttl)
            min_ttl = t;
        usleep(50000);
    }
    cr_expect_gt(min_ttl, 0, "the holders key lost its TTL or vanished (PTTL %lld)", min_ttl);
    cr_expect(!dbt_permit_lost(h1) && !dbt_permit_lost(h2), "a held permit was lost");
    cr_expect_eq(test_redis_int(&r, "ZCARD dbthrottle:{ttl}:q:holders"), 2);
    dbt_release(h1);
    dbt_release(h2);
    dbt_client_free(c);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}

/* A program with SIGPIPE's default action (death) releases its permits after Redis restarted:
 * writes into the dead sockets must not kill it. */
Test(regressions, no_sigpipe_after_a_redis_restart, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    int up[2], down[2];
    cr_assert(pipe(up) == 0 && pipe(down) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        dbt_config cfg;
        test_config(&cfg, &r, "DBTHROTTLE_ON_REDIS_ERROR=open", NULL);
        dbt_client *c = dbt_client_new(&cfg);
        dbt_pool *p = dbt_client_pool(c, "pipe");
        dbt_acquire_opts o = {.limit = 5, .wait_ms = 0};
        dbt_permit *a = NULL, *b = NULL, *x = NULL;
        dbt_acquire(p, DBT_KIND_QUERY, &o, &a);
        dbt_acquire(p, DBT_KIND_CONN, &o, &b);
        char ch = 'h';
        if (write(up[1], &ch, 1) != 1 || read(down[0], &ch, 1) != 1)
            _exit(3);
        dbt_release(a);
        usleep(50000);
        dbt_release(b);
        dbt_acquire(p, DBT_KIND_QUERY, &o, &x);
        dbt_release(x);
        _exit(0);
    }
    char ch;
    cr_assert_eq(read(up[0], &ch, 1), 1); /* the child holds two permits */
    test_redis_kill(&r);
    cr_assert(test_redis_restart(&r, NULL));
    cr_assert_eq(write(down[1], "r", 1), 1);
    int st;
    waitpid(pid, &st, 0);
    cr_expect(!WIFSIGNALED(st), "the program was killed by signal %d", WTERMSIG(st));
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    test_redis_stop(&r);
}
