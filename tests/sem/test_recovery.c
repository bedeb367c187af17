/* No stall after a fault ends: once Redis answers again, a newcomer is granted within a second,
 * as Redis' own state shows (a holder of the newcomer's client in the holders set), timed by the
 * test's clock. Each fault here once left places or permits in Redis that nobody would use or
 * give back before their lease ran out. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{recovery}:q:holders"
#define QUEUE   "dbthrottle:{recovery}:q:queue"

TestSuite(recovery, .init = fx_redis_start, .fini = fx_stop);

/* Holders in Redis whose id begins with this client id. */
static long long holders_of(const char *cid)
{
    return test_redis_int(&fx_redis, "EVAL %s 1 %s %s",
                          "local n = 0 for _, m in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do "
                          "if string.sub(m, 1, #ARGV[1]) == ARGV[1] then n = n + 1 end end "
                          "return n",
                          HOLDERS, cid);
}

typedef struct {
    const char *cid;
} held_by;

static bool holds_one(void *arg)
{
    return holders_of(((held_by *)arg)->cid) >= 1;
}

/* A thread that acquires on its pool, and gives the permit back at once (release_at_once) or when
 * told (`go`). */
typedef struct {
    dbt_pool *pool;
    int64_t wait_ms;
    bool release_at_once;
    atomic_bool go;
    dbt_acq_result res;
    dbt_permit *permit;
} worker_arg;

static void *worker(void *arg)
{
    worker_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = w->wait_ms};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    if (!w->release_at_once)
        while (!atomic_load(&w->go))
            usleep(10000);
    dbt_release(w->permit);
    return NULL;
}

/* Polls until the newcomer's client holds, and returns how long after `since` that was seen. */
static int64_t granted_after(const char *cid, int64_t since)
{
    held_by h = {cid};
    cr_assert(test_wait_until(holds_one, &h, 20000), "the newcomer was never granted");
    return test_now_ms() - since;
}

/* Redis stopped longer than DBTHROTTLE_REDIS_TIMEOUT but well within a lease: renewals fail
 * meanwhile. The waiters' places stay valid in Redis, so they keep waiting (not run unthrottled
 * all at once), and once Redis answers the permit moves on without a stall: before, they gave up
 * and left their places queued, granted to nobody for a lease. */
Test(recovery, redis_blip_stalls_nobody, .timeout = 90)
{
    const char *lease = "DBTHROTTLE_LEASE=6s", *timeout = "DBTHROTTLE_REDIS_TIMEOUT=1s";
    dbt_client *hc = fx_client(lease, timeout, NULL), *wc = fx_client(lease, timeout, NULL),
               *nc = fx_client(lease, timeout, NULL);
    dbt_pool *hp = dbt_client_pool(hc, "recovery"), *wp = dbt_client_pool(wc, "recovery"),
             *np = dbt_client_pool(nc, "recovery");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    worker_arg w[2] = {{.pool = wp, .wait_ms = 30000, .release_at_once = true},
                       {.pool = wp, .wait_ms = 30000, .release_at_once = true}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&t[i], NULL, worker, &w[i]);
    zcard_is q2 = {&fx_redis, QUEUE, 2};
    cr_assert(test_wait_until(test_zcard_is, &q2, 10000));

    /* 3.5 s: a renewal (every 2 s) is sure to be sent and to time out (1 s) meanwhile. */
    kill(fx_redis.pid, SIGSTOP);
    usleep(3500000);
    kill(fx_redis.pid, SIGCONT);
    int64_t t_end = test_now_ms();
    dbt_release(held);

    worker_arg n = {.pool = np, .wait_ms = 30000};
    pthread_t tn;
    pthread_create(&tn, NULL, worker, &n);
    int64_t ms = granted_after(dbt_client_id(nc), t_end);
    atomic_store(&n.go, true);
    pthread_join(tn, NULL);
    for (int i = 0; i < 2; i++)
        pthread_join(t[i], NULL);
    dbt_pool_stats st;
    dbt_pool_get_stats(wp, &st);
    cr_assert_geq(st.redis_errors, 1, "no renewal failed: the fault did not happen");
    cr_expect_eq(w[0].res, DBT_ACQ_GRANTED, "a waiter with a valid place gave up (%d)", w[0].res);
    cr_expect_eq(w[1].res, DBT_ACQ_GRANTED, "a waiter with a valid place gave up (%d)", w[1].res);
    cr_expect_leq(ms, 1000, "the newcomer was granted %lld ms after Redis answered again",
                  (long long)ms);
}
