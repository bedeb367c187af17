/* Shadow mode (DBTHROTTLE_MODE=shadow; docs/design.md, "Shadow mode"): nothing waits or is
 * refused, every command is still a holder in Redis (the fleet's true concurrency, above the
 * limit), and Redis counts what enforcing would have done. Judged in Redis: its holders, its
 * queue and its counters. */
#include "pool.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{shadow}:q:holders"
#define QUEUE   "dbthrottle:{shadow}:q:queue"
#define STATS   "dbthrottle:{shadow}:q:stats"
#define LIVE    "dbthrottle:{shadow}:settings"

TestSuite(shadow, .init = fx_redis_start, .fini = fx_stop);

Test(shadow, nothing_waits_and_redis_counts_what_would_have, .timeout = 60)
{
    /* Kept permits on, kept long: none is kept once the pool went over its limit (as none is
     * while an enforced pool has waiters), so all four go back at their release. */
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_CACHE_IDLE=30s", NULL);
    dbt_pool *p = dbt_client_pool(c, "shadow");
    dbt_acquire_opts waits = {.limit = 1, .wait_ms = 10000}, not_waiting = {.limit = 1};
    dbt_permit *held[4];
    int64_t t0 = test_now_ms();
    for (int i = 0; i < 3; i++)
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &waits, &held[i]), DBT_ACQ_GRANTED,
                     "acquire %d at a limit of 1", i + 1);
    /* A caller that does not wait: enforcing would refuse it now. */
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &not_waiting, &held[3]), DBT_ACQ_GRANTED);
    int64_t took = test_now_ms() - t0;
    cr_expect_lt(took, 2000, "4 shadow acquires took %lld ms", (long long)took);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 4, "the true concurrency");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 0, "nobody queued");
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s would_wait", STATS), 2);
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s would_refuse", STATS), 1);
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s grants", STATS), 4);
    for (int i = 0; i < 4; i++)
        dbt_release(held[i]);
    zcard_is none = {&fx_redis, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000),
              "none kept over the limit (%lld holders, kept for 30 s)",
              test_redis_int(&fx_redis, "ZCARD %s", HOLDERS));
}

/* Shadow permits are holders like any: an enforcing process of the pool waits behind them (its
 * limit is the pool's), and is granted once they go. */
Test(shadow, an_enforcing_process_counts_shadow_holders, .timeout = 60)
{
    dbt_client *shadow = fx_client("DBTHROTTLE_MODE=shadow", NULL);
    dbt_client *enforce = fx_client(NULL);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000}, now = {.limit = 1};
    dbt_permit *s1, *s2, *e;
    cr_assert_eq(dbt_acquire(dbt_client_pool(shadow, "shadow"), DBT_KIND_QUERY, &o, &s1),
                 DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(dbt_client_pool(shadow, "shadow"), DBT_KIND_QUERY, &o, &s2),
                 DBT_ACQ_GRANTED);
    dbt_pool *ep = dbt_client_pool(enforce, "shadow");
    cr_expect_eq(dbt_acquire(ep, DBT_KIND_QUERY, &now, &e), DBT_ACQ_TIMEOUT,
                 "an enforcing caller that does not wait is refused at 2 held of 1");
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s refused", STATS), 1);
    dbt_release(s1);
    dbt_release(s2);
    cr_expect_eq(dbt_acquire(ep, DBT_KIND_QUERY, &o, &e), DBT_ACQ_GRANTED);
    dbt_release(e);
}

/* Redis unreachable, DBTHROTTLE_ON_REDIS_ERROR=closed: shadow mode refuses nothing, so the
 * command runs (as open mode's do), where enforcing refuses it. */
Test(shadow, an_outage_refuses_nothing, .timeout = 60)
{
    dbt_client *shadow = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_ON_REDIS_ERROR=closed",
                                   "DBTHROTTLE_REDIS_TIMEOUT=200ms", NULL);
    dbt_client *enforce =
        fx_client("DBTHROTTLE_ON_REDIS_ERROR=closed", "DBTHROTTLE_REDIS_TIMEOUT=200ms", NULL);
    test_redis_kill(&fx_redis);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    dbt_permit *permit = NULL;
    cr_expect_eq(dbt_acquire(dbt_client_pool(shadow, "shadow"), DBT_KIND_QUERY, &o, &permit),
                 DBT_ACQ_UNTHROTTLED);
    cr_expect_eq(dbt_acquire(dbt_client_pool(enforce, "shadow"), DBT_KIND_QUERY, &o, &permit),
                 DBT_ACQ_REFUSED);
}

/* A permit granted in shadow mode over the limit goes back to Redis at its release, never to a
 * waiter: once the pool enforces (live here; or an enforcing process of the host, attached), the
 * waiter it were passed to would run past the limit beside the permit granted within it. */
typedef struct {
    dbt_pool *p;
    dbt_acq_result r;
    dbt_permit *permit;
} waiter_run;

static void *waiter(void *arg)
{
    waiter_run *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000};
    w->r = dbt_acquire(w->p, DBT_KIND_QUERY, &o, &w->permit);
    return NULL;
}

Test(shadow, an_over_limit_permit_goes_back_to_redis, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_LEASE=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, "shadow");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    dbt_permit *within, *over;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &within), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &over), DBT_ACQ_GRANTED);
    cr_assert_eq(test_redis_int(&fx_redis, "HGET %s would_wait", STATS), 1);
    /* The operator turns the pool to enforce; the process applies it at a renewal. */
    /* (SET answers OK, a status: test_redis_int reads it as -1000) */
    cr_assert_eq(test_redis_int(&fx_redis, "SET %s %s", LIVE, "v7\nmode=enforce\n"), -1000);
    for (int i = 0; i < 250 && atomic_load(&p->mode[DBT_KIND_QUERY]) != DBT_MODE_ENFORCE; i++) {
        dbt_pool_renew_now(p);
        usleep(20000);
    }
    cr_assert_eq(atomic_load(&p->mode[DBT_KIND_QUERY]), DBT_MODE_ENFORCE,
                 "the live mode was not applied");
    waiter_run w = {.p = p};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, waiter, &w), 0);
    zcard_is queued = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 5000), "the enforcing waiter queued");
    dbt_release(over);
    zcard_is one = {&fx_redis, HOLDERS, 1};
    cr_expect(test_wait_until(test_zcard_is, &one, 5000),
              "the over-limit permit went back to Redis (%lld holders)",
              test_redis_int(&fx_redis, "ZCARD %s", HOLDERS));
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", QUEUE), 1, "its waiter still waits");
    dbt_release(within);
    pthread_join(t, NULL);
    cr_assert_eq(w.r, DBT_ACQ_GRANTED);
    dbt_release(w.permit);
}

/* Turned to shadow live, a thread already waiting in the queue runs at once (sent again, in shadow
 * mode) rather than waiting for the holder, and its place leaves Redis' queue. */
Test(shadow, a_live_switch_to_shadow_runs_the_waiters, .timeout = 60)
{
    dbt_client *holder = fx_client(NULL);
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1s", NULL);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(dbt_client_pool(holder, "shadow"), DBT_KIND_QUERY, &o, &held),
                 DBT_ACQ_GRANTED);
    dbt_pool *p = dbt_client_pool(c, "shadow");
    waiter_run w = {.p = p};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, waiter, &w), 0);
    zcard_is queued = {&fx_redis, QUEUE, 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 5000), "the waiter queued");
    /* (SET answers OK, a status: test_redis_int reads it as -1000) */
    cr_assert_eq(test_redis_int(&fx_redis, "SET %s %s", LIVE, "v9\nmode=shadow\n"), -1000);
    for (int i = 0; i < 250 && atomic_load(&p->mode[DBT_KIND_QUERY]) != DBT_MODE_SHADOW; i++) {
        dbt_pool_renew_now(p);
        usleep(20000);
    }
    cr_assert_eq(atomic_load(&p->mode[DBT_KIND_QUERY]), DBT_MODE_SHADOW,
                 "the live mode was not applied");
    zcard_is two = {&fx_redis, HOLDERS, 2};
    cr_expect(test_wait_until(test_zcard_is, &two, 5000),
              "the waiter runs beside the holder (%lld holders)",
              test_redis_int(&fx_redis, "ZCARD %s", HOLDERS));
    pthread_join(t, NULL);
    cr_expect_eq(w.r, DBT_ACQ_GRANTED);
    zcard_is none = {&fx_redis, QUEUE, 0};
    cr_expect(test_wait_until(test_zcard_is, &none, 5000), "its place left the queue");
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s would_wait", STATS), 1);
    dbt_release(w.permit);
    dbt_release(held);
}

/* DBTHROTTLE_MODE per kind: the process' own value shadows its connection permits and enforces
 * its queries; a live mode that names one kind changes that kind only, the other keeps the
 * process' own. Judged by Redis: the holders of each kind, over a limit of 1. */
#define CONN_HOLDERS "dbthrottle:{shadow}:c:holders"

/* Applies live settings text (the operator's SET), and waits for the process to apply it. */
static void apply_live(dbt_pool *p, const char *text, long long version)
{
    cr_assert_eq(test_redis_int(&fx_redis, "SET %s %s", LIVE, text), -1000);
    for (int i = 0; i < 250 && dbt_pool_live_applied(p) != version; i++) {
        dbt_pool_renew_now(p);
        usleep(20000);
    }
    cr_assert_eq(dbt_pool_live_applied(p), version, "live settings v%lld not applied", version);
}

/* Two acquires of kind at a limit of 1 that wait for nothing: whether the second ran. */
static bool second_runs(dbt_pool *p, dbt_kind kind, const char *holders)
{
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 0};
    dbt_permit *a = NULL, *b = NULL;
    cr_assert_eq(dbt_acquire(p, kind, &o, &a), DBT_ACQ_GRANTED);
    dbt_acq_result r = dbt_acquire(p, kind, &o, &b);
    long long n = test_redis_int(&fx_redis, "ZCARD %s", holders);
    cr_expect_eq(n, r == DBT_ACQ_GRANTED ? 2 : 1, "Redis holds %lld of %s", n, holders);
    dbt_release(b);
    dbt_release(a);
    zcard_is none = {&fx_redis, holders, 0};
    cr_assert(test_wait_until(test_zcard_is, &none, 5000), "%s released", holders);
    return r == DBT_ACQ_GRANTED;
}

Test(shadow, a_mode_per_kind_own_and_live, .timeout = 60)
{
    dbt_client *c =
        fx_client("DBTHROTTLE_MODE=connections=shadow", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *p = dbt_client_pool(c, "shadow");
    cr_expect_not(second_runs(p, DBT_KIND_QUERY, HOLDERS), "queries enforced");
    cr_expect(second_runs(p, DBT_KIND_CONN, CONN_HOLDERS), "connections in shadow mode");
    apply_live(p, "v3\nmode=queries=shadow\n", 3);
    cr_expect(second_runs(p, DBT_KIND_QUERY, HOLDERS), "queries in shadow mode, live");
    cr_expect(second_runs(p, DBT_KIND_CONN, CONN_HOLDERS), "connections: still the process' own");
    apply_live(p, "v4\nmode=connections=enforce\n", 4);
    cr_expect_not(second_runs(p, DBT_KIND_QUERY, HOLDERS), "queries: the process' own again");
    cr_expect_not(second_runs(p, DBT_KIND_CONN, CONN_HOLDERS), "connections enforced, live");
    apply_live(p, "v5\nmode=shadow\n", 5);
    cr_expect(second_runs(p, DBT_KIND_QUERY, HOLDERS), "both kinds in shadow mode");
    cr_expect(second_runs(p, DBT_KIND_CONN, CONN_HOLDERS));
    cr_expect_eq(test_redis_int(&fx_redis, "HGET %s would_refuse", STATS), 2,
                 "each shadow query run over the limit counted as refused by enforcing");
    fx_client_free(c);
}
