/* Wait timeouts and cancel: the waiter withdraws atomically; a grant that races with the
 * withdrawal is passed on, never lost; afterwards the pool drains and its keys expire. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define P       "dbthrottle:{cancel}"
#define P_MIXED "dbthrottle:{mixed}"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(cancel, .init = fx_redis_start, .fini = fx_stop);

Test(cancel, timeout_withdraws_and_keys_expire, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=500ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "cancel");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held, *never = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    dbt_acquire_opts brief = {.limit = 1, .wait_ms = 200};
    int64_t t0 = test_now_ms();
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &brief, &never), DBT_ACQ_TIMEOUT);
    cr_expect_geq(test_now_ms() - t0, 200);
    cr_expect_null(never);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P ":q:queue"), 0, "the waiter stayed queued");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P ":q:wexp"), 0);
    dbt_release(held);
    zcard_is h0 = {&fx_redis, P ":q:holders", 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    cr_expect_eq(st.timeouts, 1);
    cr_expect_eq(st.grants, 1);
    /* An idle pool leaves nothing behind but its era, counters and histograms: every key has a TTL
     * of three leases (the ids that left lately, two leases and a quarantine); the era's is 7 days
     * (docs/design.md, "Failover and data loss"). */
    fx_client_free(c);
    key_gone seq = {&fx_redis, P ":q:seq"}, gone = {&fx_redis, P ":q:gone"};
    cr_expect(test_wait_until(test_key_gone, &seq, 5000));
    cr_expect(test_wait_until(test_key_gone, &gone, 10000));
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " P ":q:era"), 6LL * 24 * 3600 * 1000);
    cr_expect_eq(test_redis_int(&fx_redis, "DEL " P ":q:era"), 1);
    /* and its counters and histograms, which outlive idle periods: 7 days too */
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " P ":q:stats"), 6LL * 24 * 3600 * 1000);
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " P ":q:hist"), 6LL * 24 * 3600 * 1000);
    cr_expect_eq(test_redis_int(&fx_redis, "DEL " P ":q:stats " P ":q:hist"), 2);
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *keys = redisCommand(rc, "KEYS *");
    for (size_t i = 0; i < keys->elements; i++)
        cr_log_error("left behind: %s", keys->element[i]->str);
    cr_expect_eq(keys->elements, 0, "keys left behind by an idle pool");
    freeReplyObject(keys);
    redisFree(rc);
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
    dbt_client *holder_c = fx_client("DBTHROTTLE_LEASE=30s", NULL),
               *waiter_c = fx_client("DBTHROTTLE_LEASE=30s", NULL);
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
        zcard_is h0 = {&fx_redis, "dbthrottle:{cancel}:q:holders", 0};
        cr_assert(test_wait_until(test_zcard_is, &h0, 5000), "round %d: a permit stayed held", i);
        cr_assert_eq(test_redis_int(&fx_redis, "ZCARD dbthrottle:{cancel}:q:queue"), 0);
    }
    cr_log_info("race rounds: %d granted, %d timed out", granted, timed_out);
    cr_expect_gt(timed_out, 0, "no round timed out: the race was not exercised");
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
    struct sigaction sa = {.sa_handler = on_sigusr1}; /* no SA_RESTART, like psql's SIGINT */
    sigaction(SIGUSR1, &sa, NULL);
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "cancel");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = p};
    pthread_t t;
    pthread_create(&t, NULL, interruptible_waiter, &w);
    zcard_is q1 = {&fx_redis, "dbthrottle:{cancel}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &q1, 10000));
    /* Signalled as psql's Ctrl-C would: the handler sets a flag, the wait sees it. Sent again
     * until the waiter returns, in case the first one landed before it began to sleep. */
    for (int i = 0; i < 250 && !w.done; i++) {
        pthread_kill(t, SIGUSR1);
        usleep(20000);
    }
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_INTERRUPTED);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD dbthrottle:{cancel}:q:queue"), 0);
    dbt_release(held);
    zcard_is h0 = {&fx_redis, "dbthrottle:{cancel}:q:holders", 0};
    cr_expect(test_wait_until(test_zcard_is, &h0, 5000));
}

static char *queue_head(const test_redis *r)
{
    redisContext *c = test_redis_connect(r);
    redisReply *rep = redisCommand(c, "ZRANGE %s 0 0 WITHSCORES", P_MIXED ":q:queue");
    char *out = NULL;
    if (rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 2 &&
        asprintf(&out, "%s@%s", rep->element[0]->str, rep->element[1]->str) < 0)
        out = NULL;
    if (rep)
        freeReplyObject(rep);
    redisFree(c);
    return out;
}

/* Clients with different leases share a pool: a waiter of a short-lease client keeps its place
 * (its ticket) for longer than three of its leases while a long-lease client holds the permit, so
 * no key expires under it. */
Test(cancel, keys_outlive_short_leases_in_a_mixed_pool, .timeout = 60)
{
    dbt_client *lc = fx_client("DBTHROTTLE_LEASE=20s", NULL),
               *sc = fx_client("DBTHROTTLE_LEASE=200ms", NULL);
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(dbt_client_pool(lc, "mixed"), DBT_KIND_QUERY, &now, &held),
                 DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = dbt_client_pool(sc, "mixed"), .wait_ms = 10000};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    zcard_is q1 = {&fx_redis, P_MIXED ":q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &q1, 10000));
    char *before = queue_head(&fx_redis);
    /* Three short leases are 600 ms: wait well past them, then the waiter must be where it was
     * (a waiter that lost its keys would have queued again under a new id). */
    usleep(1500000);
    char *after = queue_head(&fx_redis);
    cr_assert(before && after);
    cr_expect_str_eq(after, before, "the waiter lost its place and queued again");
    free(before);
    free(after);
    dbt_release(held);
    pthread_join(t, NULL);
    cr_expect_eq(w.res, DBT_ACQ_GRANTED);
    dbt_release(w.permit);
}
