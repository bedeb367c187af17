/* Redis stopped, restarted or hung: open runs unthrottled, closed refuses, nobody hangs longer
 * than DBTHROTTLE_REDIS_TIMEOUT, and throttling resumes by itself when Redis is back. */
#include "sem_helpers.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#define HOLDERS "dbthrottle:{outage}:q:holders"

static void outage_cycle(const char *mode, dbt_acq_result expected)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    char kv[64];
    snprintf(kv, sizeof kv, "DBTHROTTLE_ON_REDIS_ERROR=%s", mode);
    dbt_config cfg;
    test_config(&cfg, &r, kv, "DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_LEASE=1s", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *a, *b = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    dbt_release(a);

    test_redis_kill(&r);
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
    cr_assert(test_redis_restart(&r, NULL));
    int64_t deadline = test_now_ms() + 5000;
    dbt_acq_result res;
    while ((res = dbt_acquire(p, DBT_KIND_QUERY, &o, &a)) != DBT_ACQ_GRANTED &&
           test_now_ms() < deadline)
        usleep(50000);
    cr_assert_eq(res, DBT_ACQ_GRANTED, "throttling did not resume after Redis came back");
    cr_expect_eq(test_redis_int(&r, "ZCARD %s", HOLDERS), 1);
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &b), DBT_ACQ_TIMEOUT,
                 "the limit does not hold again after the restart");
    dbt_release(a);
    zcard_is h0 = {&r, HOLDERS, 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    cr_expect_geq(st.redis_errors, 1);
    cr_expect_geq(st.refusals, 101);
    dbt_client_free(c);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
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
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    test_config(&cfg, &r, "DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_LEASE=3s", NULL);
    dbt_client *hc = dbt_client_new(&cfg), *wc = dbt_client_new(&cfg);
    dbt_pool *hp = dbt_client_pool(hc, "outage"), *wp = dbt_client_pool(wc, "outage");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = wp};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    zcard_is q = {&r, "dbthrottle:{outage}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000));
    test_redis_kill(&r);
    int64_t killed = test_now_ms();
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_UNTHROTTLED);
    cr_expect_lt(w.returned_at - killed, 1000, "the waiter hung %lld ms",
                 (long long)(w.returned_at - killed));
    dbt_release(held);
    dbt_client_free(hc);
    dbt_client_free(wc);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}

/* A Redis that accepts connections but never answers (SIGSTOP) costs one timeout. */
Test(outage, hung_redis_costs_one_timeout, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    test_config(&cfg, &r, "DBTHROTTLE_REDIS_TIMEOUT=300ms", "DBTHROTTLE_ON_REDIS_ERROR=closed",
                NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "outage");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000};
    dbt_permit *a = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    dbt_release(a);
    kill(r.pid, SIGSTOP);
    int64_t t0 = test_now_ms();
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_REFUSED);
    int64_t took = test_now_ms() - t0;
    cr_expect_geq(took, 250, "refused before the timeout: %lld ms", (long long)took);
    cr_expect_lt(took, 1000, "a hung Redis held the caller %lld ms", (long long)took);
    kill(r.pid, SIGCONT);
    dbt_client_free(c);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}
