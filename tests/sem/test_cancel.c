/* Wait timeouts and cancel: the waiter withdraws atomically; a grant that races with the
 * withdrawal is passed on, never lost; afterwards the pool drains and its keys expire. */
#include "sem_helpers.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

#define P "dbthrottle:{cancel}"

Test(cancel, timeout_withdraws_and_keys_expire, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    test_config(&cfg, &r, "DBTHROTTLE_LEASE=500ms", NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "cancel");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held, *never = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    dbt_acquire_opts brief = {.limit = 1, .wait_ms = 200};
    int64_t t0 = test_now_ms();
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &brief, &never), DBT_ACQ_TIMEOUT);
    cr_expect_geq(test_now_ms() - t0, 200);
    cr_expect_null(never);
    cr_expect_eq(test_redis_int(&r, "ZCARD " P ":q:queue"), 0, "the waiter stayed queued");
    cr_expect_eq(test_redis_int(&r, "ZCARD " P ":q:wexp"), 0);
    dbt_release(held);
    zcard_is h0 = {&r, P ":q:holders", 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    cr_expect_eq(st.timeouts, 1);
    cr_expect_eq(st.grants, 1);
    /* An idle pool leaves nothing behind: every key has a TTL of three leases. */
    dbt_client_free(c);
    dbt_config_free(&cfg);
    key_gone seq = {&r, P ":q:seq"};
    cr_expect(test_wait_until(test_key_gone, &seq, 5000));
    redisContext *rc = test_redis_connect(&r);
    redisReply *keys = redisCommand(rc, "KEYS *");
    for (size_t i = 0; i < keys->elements; i++)
        cr_log_error("left behind: %s", keys->element[i]->str);
    cr_expect_eq(keys->elements, 0, "keys left behind by an idle pool");
    freeReplyObject(keys);
    redisFree(rc);
    test_redis_stop(&r);
}

typedef struct {
    dbt_pool *pool;
    int64_t wait_ms;
    dbt_acq_result res;
    dbt_permit *permit;
    atomic_bool done;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = w->wait_ms};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    return NULL;
}

/* The release and the waiter's timeout land at nearly the same moment, again and again. In
 * every case the permit ends with exactly one owner: the waiter (granted) or nobody. */
Test(cancel, grant_racing_a_timeout_is_never_lost, .timeout = 120)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    dbt_config cfg;
    test_config(&cfg, &r, "DBTHROTTLE_LEASE=30s", NULL);
    dbt_client *holder_c = dbt_client_new(&cfg), *waiter_c = dbt_client_new(&cfg);
    dbt_pool *hp = dbt_client_pool(holder_c, "cancel"), *wp = dbt_client_pool(waiter_c, "cancel");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    int granted = 0, timed_out = 0;
    for (int i = 0; i < 200; i++) {
        dbt_permit *held;
        cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED,
                     "round %d: the permit was lost", i);
        waiter_arg w = {.pool = wp, .wait_ms = 5 + i % 5};
        pthread_t t;
        pthread_create(&t, NULL, waiter, &w);
        usleep((useconds_t)(4000 + (i % 7) * 500)); /* land the release near the timeout */
        dbt_release(held);
        pthread_join(t, NULL);
        cr_assert(w.res == DBT_ACQ_GRANTED || w.res == DBT_ACQ_TIMEOUT);
        if (w.res == DBT_ACQ_GRANTED) {
            granted++;
            dbt_release(w.permit);
        } else {
            timed_out++;
        }
        /* Whoever ended up with it gave it back: it must be free again. */
        zcard_is h0 = {&r, "dbthrottle:{cancel}:q:holders", 0};
        cr_assert(test_wait_until(test_zcard_is, &h0, 5000), "round %d: a permit stayed held", i);
        cr_assert_eq(test_redis_int(&r, "ZCARD dbthrottle:{cancel}:q:queue"), 0);
    }
    cr_log_info("race rounds: %d granted, %d timed out", granted, timed_out);
    cr_expect_gt(timed_out, 0, "no round timed out: the race was not exercised");
    dbt_client_free(holder_c);
    dbt_client_free(waiter_c);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}

static volatile sig_atomic_t got_signal;

static void on_sigusr1(int sig)
{
    (void)sig;
    got_signal = 1;
}

static bool signalled(void *arg)
{
    (void)arg;
    return got_signal != 0;
}

static void *interruptible_waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000, .interrupted = signalled};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    atomic_store(&w->done, true);
    return NULL;
}

Test(cancel, signal_interrupts_a_wait_and_withdraws, .timeout = 60)
{
    test_redis r;
    cr_assert(test_redis_start(&r, NULL));
    struct sigaction sa = {.sa_handler = on_sigusr1}; /* no SA_RESTART, like psql's SIGINT */
    sigaction(SIGUSR1, &sa, NULL);
    dbt_config cfg;
    test_config(&cfg, &r, NULL);
    dbt_client *c = dbt_client_new(&cfg);
    dbt_pool *p = dbt_client_pool(c, "cancel");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = p};
    pthread_t t;
    pthread_create(&t, NULL, interruptible_waiter, &w);
    zcard_is q1 = {&r, "dbthrottle:{cancel}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &q1, 10000));
    /* Signalled as psql's Ctrl-C would: the handler sets a flag, the wait sees it. Sent again
     * until the waiter returns, in case the first one landed before it began to sleep. */
    for (int i = 0; i < 250 && !w.done; i++) {
        pthread_kill(t, SIGUSR1);
        usleep(20000);
    }
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_INTERRUPTED);
    cr_expect_eq(test_redis_int(&r, "ZCARD dbthrottle:{cancel}:q:queue"), 0);
    dbt_release(held);
    zcard_is h0 = {&r, "dbthrottle:{cancel}:q:holders", 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
    dbt_client_free(c);
    dbt_config_free(&cfg);
    test_redis_stop(&r);
}
