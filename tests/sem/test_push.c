/* Push, not poll: a waiting process sends Redis nothing until its grant is pushed to it, and the
 * listener role that receives the pushes survives the waiter that had it leaving. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(push, .init = fx_redis_start, .fini = fx_stop);

typedef struct {
    dbt_pool *pool;
    dbt_acq_result res;
    dbt_permit *permit;
    int64_t granted_at;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    w->granted_at = test_now_ms();
    dbt_release(w->permit); /* hand it to the next waiter */
    return NULL;
}

/* Both clients' records are in Redis: each process reports itself with its first renewal, sent
 * at once by its renewer thread, which a loaded machine may run after the listener's BLPOP
 * (make test beside a busy loop: "1 commands reached Redis while 4 threads waited"). */
static bool both_reported(void *arg)
{
    return test_redis_int(arg, "HLEN dbthrottle:{push}:procinfo") == 2;
}

static bool blpop_blocked(void *arg)
{
    redisContext *rc = test_redis_connect(arg);
    redisReply *rep = rc ? redisCommand(rc, "INFO clients") : NULL;
    bool yes = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "blocked_clients:1");
    if (rep)
        freeReplyObject(rep);
    if (rc)
        redisFree(rc);
    return yes;
}

Test(push, idle_waiters_send_nothing_and_a_release_wakes_them, .timeout = 60)
{
    /* A 30 s lease renews every 10 s: no renewal falls inside the observed second. */
    /* Kept permits off: a holder that keeps permits listens for a waiter's arrival (one BLPOP
     * more), which is not what this counts. */
    dbt_client *hc = fx_client("DBTHROTTLE_LEASE=30s", "DBTHROTTLE_CACHE_PERMITS=off", NULL),
               *wc = fx_client("DBTHROTTLE_LEASE=30s", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "push"), *wp = dbt_client_pool(wc, "push");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    enum { N = 4 };
    waiter_arg w[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++) {
        w[i] = (waiter_arg){.pool = wp};
        pthread_create(&t[i], NULL, waiter, &w[i]);
    }
    zcard_is q = {&fx_redis, "dbthrottle:{push}:q:queue", N};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    /* The listener's BLPOP is issued right after the first waiter queues: wait until Redis has
     * it blocked, so what is counted next is only what idle waiting costs. */
    cr_assert(test_wait_until(blpop_blocked, &fx_redis, 10000));
    cr_assert(test_wait_until(both_reported, &fx_redis, 10000));
    long long before = test_redis_commands(&fx_redis);
    long long scripts = test_redis_calls(&fx_redis, "evalsha");
    long long blpops = test_redis_calls(&fx_redis, "blpop");
    usleep(1000000);
    long long after = test_redis_commands(&fx_redis);
    cr_expect_eq(after - before, 0,
                 "%lld commands reached Redis while %d threads waited (%lld EVALSHA, %lld BLPOP)",
                 after - before, N, test_redis_calls(&fx_redis, "evalsha") - scripts,
                 test_redis_calls(&fx_redis, "blpop") - blpops);
    /* Four waiting threads of one process share one listener connection. */
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = redisCommand(rc, "CLIENT LIST");
    int blocked = 0;
    for (char *s = rep->str; (s = strstr(s, "cmd=blpop")); s++)
        blocked++;
    freeReplyObject(rep);
    redisFree(rc);
    cr_expect_eq(blocked, 1, "%d connections blocked in BLPOP for one waiting process", blocked);

    int64_t released = test_now_ms();
    dbt_release(held);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        cr_expect_eq(w[i].res, DBT_ACQ_GRANTED);
    }
    int64_t first = w[0].granted_at;
    for (int i = 1; i < N; i++)
        if (w[i].granted_at < first)
            first = w[i].granted_at;
    cr_log_info("first grant %lld ms after the release", (long long)(first - released));
    zcard_is h0 = {&fx_redis, "dbthrottle:{push}:q:holders", 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
}

#define LEAD_QUEUE "dbthrottle:{lead}:q:queue"

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
} leaver_arg;

static void *acquire_thread(void *v)
{
    leaver_arg *a = v;
    dbt_acquire_opts o = {
        .limit = 1, .wait_ms = a->wait_ms, .interrupted = a->is_t ? t_interrupted : NULL};
    a->res = dbt_acquire(a->p, DBT_KIND_QUERY, &o, &a->pm);
    return NULL;
}

/* The leader (A) is granted and hands its role to T just as T gives up; W, still waiting, must
 * still get its grant. */
Test(push, listener_role_survives_a_waiter_that_leaves, .timeout = 60)
{
    /* Kept permits off: a holder that keeps permits listens for a waiter's arrival (one BLPOP
     * more), which is not what this counts. */
    dbt_client *hc = fx_client("DBTHROTTLE_LEASE=30s", "DBTHROTTLE_CACHE_PERMITS=off", NULL),
               *wc = fx_client("DBTHROTTLE_LEASE=30s", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "lead"), *wp = dbt_client_pool(wc, "lead");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    leaver_arg A = {.p = wp, .wait_ms = 20000}, W = {.p = wp, .wait_ms = 8000},
               T = {.p = wp, .wait_ms = 20000, .is_t = true};
    pthread_t ta, tw, tt;
    zcard_is q = {&fx_redis, LEAD_QUEUE, 1};
    pthread_create(&ta, NULL, acquire_thread, &A);
    cr_assert(test_wait_until(test_zcard_is, &q, 5000));
    pthread_create(&tw, NULL, acquire_thread, &W);
    q.n = 2;
    cr_assert(test_wait_until(test_zcard_is, &q, 5000));
    pthread_create(&tt, NULL, acquire_thread, &T);
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
}
