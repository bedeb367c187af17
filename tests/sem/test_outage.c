/* Redis stopped, restarted or hung: open runs unthrottled, closed refuses, nobody hangs longer
 * than DBTHROTTLE_REDIS_TIMEOUT, throttling resumes by itself when Redis is back, and writes into
 * the sockets of a Redis that restarted do not kill the program with SIGPIPE. */
#include "clock.h"
#include "lapse.h"
#include "pool.h"
#include "script_protocol.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <hiredis.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{outage}:q:holders"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(outage, .init = fx_redis_start, .fini = fx_stop);

static void outage_cycle(const char *mode, dbt_acq_result expected)
{
    char kv[64];
    snprintf(kv, sizeof kv, "DBTHROTTLE_ON_REDIS_ERROR=%s", mode);
    dbt_client *c = fx_client(kv, "DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_LEASE=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *a, *b = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    dbt_release(a);

    test_redis_kill(&fx_redis);
    int64_t t0 = test_now_ms();
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &b), expected);
    cr_expect_null(b);
    cr_expect_lt(test_now_ms() - t0, 1000, "a dead Redis held the caller %lld ms",
                 (long long)(test_now_ms() - t0));
    /* During the outage, callers do not even try (no timeout per query). */
    t0 = test_now_ms();
    for (int i = 0; i < 100; i++)
        cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &b), expected);
    cr_expect_lt(test_now_ms() - t0, 500);

    /* Restarted empty: throttling resumes by itself after the backoff. */
    cr_assert(test_redis_restart(&fx_redis, NULL));
    int64_t deadline = test_now_ms() + 5000;
    dbt_acq_result res;
    while ((res = dbt_acquire(p, DBT_KIND_QUERY, &o, &a)) != DBT_ACQ_GRANTED &&
           test_now_ms() < deadline)
        usleep(50000);
    cr_assert_eq(res, DBT_ACQ_GRANTED, "throttling did not resume after Redis came back");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 1);
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &b), DBT_ACQ_TIMEOUT,
                 "the limit does not hold again after the restart");
    dbt_release(a);
    zcard_is h0 = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    cr_expect_geq(st.redis_errors, 1);
    /* Counted apart: what ran unthrottled is not what was refused. */
    bool open = expected == DBT_ACQ_UNTHROTTLED;
    cr_expect_geq(open ? st.unthrottled : st.refusals, 101);
    cr_expect_eq(open ? st.refusals : st.unthrottled, 0);
}

Test(outage, open_runs_unthrottled_and_recovers, .timeout = 60)
{
    outage_cycle("open", DBT_ACQ_UNTHROTTLED);
}

Test(outage, closed_refuses_and_recovers, .timeout = 60)
{
    outage_cycle("closed", DBT_ACQ_REFUSED);
}

typedef struct {
    dbt_pool *pool;
    dbt_acq_result res;
    int64_t returned_at;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 60000};
    dbt_permit *permit = NULL;
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &permit);
    w->returned_at = test_now_ms();
    dbt_release(permit);
    return NULL;
}

/* A waiter blocked while Redis dies is not left hanging until its wait timeout. */
Test(outage, waiter_returns_when_redis_dies, .timeout = 60)
{
    dbt_client *hc = fx_client("DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_LEASE=3s", NULL),
               *wc = fx_client("DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_LEASE=3s", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "outage"), *wp = dbt_client_pool(wc, "outage");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = wp};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    zcard_is q = {&fx_redis, "dbthrottle:{outage}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    test_redis_kill(&fx_redis);
    int64_t killed = test_now_ms();
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_UNTHROTTLED);
    cr_expect_lt(w.returned_at - killed, 1000, "the waiter hung %lld ms",
                 (long long)(w.returned_at - killed));
    dbt_release(held);
}

/* A Redis that accepts connections but never answers (SIGSTOP) costs one timeout. */
Test(outage, hung_redis_costs_one_timeout, .timeout = 60)
{
    dbt_client *c =
        fx_client("DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_ON_REDIS_ERROR=closed", NULL);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *a = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    dbt_release(a);
    /* Nothing of the process' in flight when Redis stops (its release, the renewer's first
     * report): one sent before and unanswered would time out first, and the acquire be refused
     * sooner than its own timeout (as test_tls.c's stalled Redis was in CI). */
    zcard_is reported = {&fx_redis, "dbthrottle:{outage}:procs", 1},
             released = {&fx_redis, HOLDERS, 0};
    cr_assert(test_wait_until(test_zcard_is, &reported, 10000), "the process never reported");
    cr_assert(test_wait_until(test_zcard_is, &released, 10000), "the release never landed");
    kill(fx_redis.pid, SIGSTOP);
    int64_t t0 = test_now_ms();
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_REFUSED);
    int64_t took = test_now_ms() - t0;
    cr_expect_geq(took, 250, "refused before the timeout: %lld ms", (long long)took);
    cr_expect_lt(took, 1000, "a hung Redis held the caller %lld ms", (long long)took);
    kill(fx_redis.pid, SIGCONT);
}

/* A program with SIGPIPE's default action (death) releases its permits after Redis restarted:
 * writes into the dead sockets must not kill it. */
Test(outage, no_sigpipe_after_a_redis_restart, .timeout = 60)
{
    int up[2], down[2];
    cr_assert(pipe(up) == 0 && pipe(down) == 0);
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        dbt_config cfg;
        test_config(&cfg, &fx_redis, "DBTHROTTLE_ON_REDIS_ERROR=open", NULL);
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
    test_redis_kill(&fx_redis);
    cr_assert(test_redis_restart(&fx_redis, NULL));
    cr_assert_eq(write(down[1], "r", 1), 1);
    int st;
    waitpid(pid, &st, 0);
    cr_expect(!WIFSIGNALED(st), "the program was killed by signal %d", WTERMSIG(st));
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

/* A holder whose release comes just after a stall, while the outage backoff that the stall's
 * timeout started still runs, and which then exits (or frees its client): the release (and the
 * cancel of the acquire that timed out) was owed to a renewer the exit does not wait for, and
 * the exit sent nothing during the backoff, so the permit stayed in Redis for its whole lease
 * though Redis was back, and the place in its queue (issue 29). The exit reads
 * the replies of what it sends: once it returns, Redis has applied the release. The lease is
 * long enough that no renewal runs meanwhile (one that succeeded would end the backoff). */
static void release_after_a_stall_then_exit(bool free_client)
{
    dbt_client *c = fx_client("DBTHROTTLE_REDIS_TIMEOUT=1s", "DBTHROTTLE_LEASE=60s", NULL);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *held, *other = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &held), DBT_ACQ_GRANTED);
    kill(fx_redis.pid, SIGSTOP);
    /* Times out: the backoff starts (a second in which acquires and releases skip Redis). Its
     * command waits in Redis' socket and queues a place once Redis runs again: a cancel of it
     * is owed too. */
    dbt_acq_result res = dbt_acquire(p, DBT_KIND_QUERY, &o, &other);
    kill(fx_redis.pid, SIGCONT);
    cr_expect_eq(res, DBT_ACQ_UNTHROTTLED);
    dbt_release(held);
    if (free_client)
        fx_client_free(c);
    else
        dbt_client_exit(c);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 0,
                 "the release made after the stall was not applied by the %s",
                 free_client ? "client's free" : "exit");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD dbthrottle:{outage}:q:queue"), 0,
                 "the place of the acquire that timed out was not withdrawn by the %s",
                 free_client ? "client's free" : "exit");
}

Test(outage, release_after_a_stall_lands_at_exit, .timeout = 60)
{
    release_after_a_stall_then_exit(false);
}

Test(outage, release_after_a_stall_lands_when_the_client_is_freed, .timeout = 60)
{
    release_after_a_stall_then_exit(true);
}

/* Closed mode, a permit held across commands (kept, or a transaction between statements) while
 * Redis is stopped: the renewer cancels a running command at lease - margin (lapse.c), but plans
 * only for the commands running when it looks. A command that starts under the permit after that
 * point would run past it, and past the lease. So from that point on the permit counts as lost
 * before a command (the command acquires again, and closed mode refuses while Redis is away). On
 * the code before, it counted as held until the lease's very end. */
Test(outage, closed_permit_lost_once_its_cancel_point_passed, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_ON_REDIS_ERROR=closed", "DBTHROTTLE_REDIS_TIMEOUT=300ms",
                              "DBTHROTTLE_LEASE=2s", NULL);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *a;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    kill(fx_redis.pid, SIGSTOP);
    pthread_mutex_lock(&p->mu);
    int64_t renewed = a->t_renewed_us, margin = dbt_lapse_margin_us(p, a->lease_us);
    pthread_mutex_unlock(&p->mu);
    int64_t lease = 2000000, cancel_at = renewed + lease - margin;
    /* Halfway between the cancel's time and the lease's end. */
    int64_t target = cancel_at + margin / 2, now = dbt_now_us();
    if (target > now)
        usleep((useconds_t)(target - now));
    bool lost = dbt_permit_lost(a);
    int64_t asked = dbt_now_us();
    kill(fx_redis.pid, SIGCONT);
    if (asked >= renewed + lease)
        cr_skip_test(
            "asked %lld ms after the lease's end, not inside the window (a loaded machine)",
            (long long)((asked - renewed - lease) / 1000));
    cr_expect(lost,
              "a permit %lld ms past its cancel's time (%lld ms before its lease ends) still "
              "counted as held",
              (long long)((asked - cancel_at) / 1000),
              (long long)((renewed + lease - asked) / 1000));
    dbt_release(a);
}

/* ---- what the process reports of an outage (dbthrottle status' last_outage) ---- */

typedef struct {
    const char *cid;
    unsigned long long unthrottled;
    dbt_proc_record rec;
} outage_reported;

/* Redis' record of the client shows an outage over, with that many commands unthrottled. */
static bool outage_over(void *arg)
{
    outage_reported *o = arg;
    redisContext *ctx = test_redis_connect(&fx_redis);
    if (!ctx)
        return false;
    redisReply *r = redisCommand(ctx, "HGET dbthrottle:{outage}:procinfo %s", o->cid);
    bool ok = r && r->type == REDIS_REPLY_STRING && dbt_parse_record(r->str, &o->rec) &&
              o->rec.outage_until_ms != 0 && o->rec.outage_unthrottled == o->unthrottled;
    if (r)
        freeReplyObject(r);
    redisFree(ctx);
    return ok;
}

static int64_t wall_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Redis killed, back until a command reaches it, killed again at once, back: it answered for
 * less than the outage backoff between two failures, a flap. The process reports one outage,
 * counted from the first failure with every command it ran unthrottled in either piece (the
 * report showed the second piece only: a cut whose connections died one by one looked to the
 * operator like a few milliseconds at the end). */
Test(outage, a_flap_is_one_outage_in_the_report, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_ON_REDIS_ERROR=open", "DBTHROTTLE_REDIS_TIMEOUT=300ms",
                              "DBTHROTTLE_LEASE=1500ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 2, .wait_ms = 5000}, now = {.limit = 2, .wait_ms = 0};
    dbt_permit *a = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    dbt_release(a);
    outage_reported rep = {.cid = dbt_client_id(c)};
    int64_t first_fail = 0;
    for (int piece = 0; piece < 2; piece++) {
        test_redis_kill(&fx_redis);
        if (!first_fail)
            first_fail = wall_ms();
        dbt_acq_result res = dbt_acquire(p, DBT_KIND_QUERY, &o, &a);
        cr_assert_eq(res, DBT_ACQ_UNTHROTTLED);
        rep.unthrottled++;
        cr_assert(test_redis_restart(&fx_redis, NULL));
        /* Until a command reaches Redis again (granted, or not in the restarted Redis'
         * quarantine): the outage is over, and the next piece begins at once. */
        int64_t deadline = test_now_ms() + 5000;
        while ((res = dbt_acquire(p, DBT_KIND_QUERY, &now, &a)) == DBT_ACQ_UNTHROTTLED &&
               test_now_ms() < deadline) {
            rep.unthrottled++;
            usleep(20000);
        }
        cr_assert(res == DBT_ACQ_GRANTED || res == DBT_ACQ_TIMEOUT, "Redis was not reached again");
        if (res == DBT_ACQ_GRANTED)
            dbt_release(a);
    }
    cr_assert(test_wait_until(outage_over, &rep, 5000),
              "the record does not show one outage over with %llu commands unthrottled "
              "(it shows %llu, since %lld ms after the first failure)",
              rep.unthrottled, rep.rec.outage_unthrottled,
              (long long)(rep.rec.outage_since_ms - first_fail));
    cr_expect_leq(rep.rec.outage_since_ms - first_fail, 500,
                  "the outage reported began %lld ms after the first failure",
                  (long long)(rep.rec.outage_since_ms - first_fail));
}
