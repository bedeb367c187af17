/* Classes and weights, the client's side (dbt_acquire_opts.klass and .weight): the id names the
 * class and the weight (the 5-part form Redis holds), and a permit passes from thread to thread
 * of a process (local handover) only to a waiter of the same shape. Read from Redis' holders and
 * from the ids the waiters end up with. */
#include "clock.h"
#include "pool_types.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <regex.h>
#include <string.h>

#define HOLDERS "dbthrottle:{cl}:q:holders"

static bool id_like(const char *id, const char *ere)
{
    regex_t re;
    cr_assert_eq(regcomp(&re, ere, REG_EXTENDED | REG_NOSUB), 0);
    bool m = regexec(&re, id, 0, NULL, 0) == 0;
    regfree(&re);
    return m;
}

static void expect_held(const char *id)
{
    cr_expect_neq(test_redis_int(&fx_redis, "ZSCORE %s %s", HOLDERS, id), -1000,
                  "Redis' holders lack %s", id);
}

Test(class_client, ids_name_the_class_and_the_weight, .init = fx_redis_start, .fini = fx_stop)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "cl");
    dbt_permit *a, *b, *d;
    dbt_acquire_opts tagged = {.limit = 8, .wait_ms = 5000, .klass = "batch"};
    dbt_acquire_opts heavy = {.limit = 8, .wait_ms = 5000, .weight = 3};
    dbt_acquire_opts plain = {.limit = 8, .wait_ms = 5000};
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &tagged, &a), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &heavy, &b), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &plain, &d), DBT_ACQ_GRANTED);
    cr_expect(id_like(dbt_permit_id(a), "^[0-9a-f]{16}\\.[0-9]+\\.batch\\.1\\.8$"), "%s",
              dbt_permit_id(a));
    cr_expect(id_like(dbt_permit_id(b), "^[0-9a-f]{16}\\.[0-9]+\\.-\\.3\\.8$"), "%s",
              dbt_permit_id(b));
    cr_expect(id_like(dbt_permit_id(d), "^[0-9a-f]{16}\\.[0-9]+\\.8$"), "%s", dbt_permit_id(d));
    cr_expect_eq(dbt_permit_weight(a), 1);
    cr_expect_eq(dbt_permit_weight(b), 3);
    expect_held(dbt_permit_id(a));
    expect_held(dbt_permit_id(b));
    expect_held(dbt_permit_id(d));
    dbt_release(a);
    dbt_release(b);
    dbt_release(d);
}

typedef struct {
    dbt_pool *p;
    const char *klass;
    dbt_acq_result r;
    char id[64];
} waiter;

static void *wait_for_one(void *arg)
{
    waiter *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000, .klass = w->klass};
    dbt_permit *pm = NULL;
    w->r = dbt_acquire(w->p, DBT_KIND_QUERY, &o, &pm);
    if (pm) {
        snprintf(w->id, sizeof w->id, "%s", dbt_permit_id(pm));
        dbt_release(pm);
    }
    return NULL;
}

static bool waits_counted(void *arg)
{
    dbt_pool_stats st;
    dbt_pool_get_stats(arg, &st);
    return st.waits >= 1;
}

/* One thread holds the only permit, another of the same process waits; the holder gives it back.
 * Same shape: the permit passes to the waiter here (a handover, the holder's id). Another class:
 * it goes back to Redis, which grants the waiter's own place (its own id): a permit of class x
 * run as class y would leave x's count of units and never enter y's. */
static void pass_on(const char *holder_class, const char *waiter_class, bool handed)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "cl");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 5000, .klass = holder_class};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &held), DBT_ACQ_GRANTED);
    char held_id[64];
    snprintf(held_id, sizeof held_id, "%s", dbt_permit_id(held));
    /* The renewer's first report (it starts with the first permit) is in: a renewal in flight
     * while the waiter queues would count a waiter it did not renew as another process' and end
     * local handover (rightly, as far as it can tell); the next one is a third of a lease away. */
    zcard_is reported = {&fx_redis, "dbthrottle:{cl}:procs", 1};
    cr_assert(test_wait_until(test_zcard_is, &reported, 10000), "the process never reported");
    waiter w = {.p = p, .klass = waiter_class};
    pthread_t t;
    pthread_create(&t, NULL, wait_for_one, &w);
    zcard_is queued = {&fx_redis, "dbthrottle:{cl}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "the waiter never queued");
    /* ... and its thread read acquire.lua's reply (its verdict applied, then the wait counted). */
    cr_assert(test_wait_until(waits_counted, p, 10000), "the waiter never read its reply");
    dbt_release(held);
    pthread_join(t, NULL);
    cr_assert_eq(w.r, DBT_ACQ_GRANTED);
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    char want[48];
    snprintf(want, sizeof want, ".%s.1.1", waiter_class);
    cr_expect(strstr(w.id, want) != NULL, "the waiter ran on %s, not a %s permit", w.id, want);
    if (handed) {
        cr_expect_str_eq(w.id, held_id, "passed on here: the holder's permit");
        cr_expect_eq(st.handovers, 1);
    } else {
        cr_expect_str_neq(w.id, held_id, "a class-%s permit went to a class-%s waiter",
                          holder_class, waiter_class);
        cr_expect_eq(st.handovers, 0);
    }
}

Test(class_client, handover_only_to_a_waiter_of_the_same_class, .init = fx_redis_start,
     .fini = fx_stop)
{
    pass_on("x", "y", false);
}

Test(class_client, handover_within_a_class_still_works, .init = fx_redis_start, .fini = fx_stop)
{
    pass_on("x", "x", true);
}

/* The 5-part id is whole whatever its parts' lengths: a class name of 32 characters, a serial of
 * a long-lived process, a two-digit weight and a three-digit limit. Cut short, the id would name
 * another limit (or none), and Redis would count the permit by the wrong weight. */
Test(class_client, a_long_id_is_not_cut, .init = fx_redis_start, .fini = fx_stop)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "cl");
    atomic_store(&c->serial, 123456789); /* as after 123 million commands */
    const char *klass = "abcdefghijklmnopqrstuvwxyz012345";
    dbt_acquire_opts heavy = {.limit = 500, .wait_ms = 5000, .klass = klass, .weight = 12};
    dbt_permit *a;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &heavy, &a), DBT_ACQ_GRANTED);
    char k[33];
    int w = 0, l = 0;
    cr_expect(dbt_parse_id_shape(dbt_permit_id(a), k, &w, &l), "%s", dbt_permit_id(a));
    cr_expect_str_eq(k, klass);
    cr_expect_eq(w, 12, "weight %d in %s", w, dbt_permit_id(a));
    cr_expect_eq(l, 500, "limit %d in %s", l, dbt_permit_id(a));
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", HOLDERS), 12, "Redis holds %lld units",
                 test_redis_int(&fx_redis, "ZCARD %s", HOLDERS));
    dbt_release(a);
}

/* The holder's release, once the main thread waits. */
static void *release_when_queued(void *arg)
{
    dbt_permit *held = arg;
    zcard_is queued = {&fx_redis, "dbthrottle:{cl}:q:queue", 1};
    if (test_wait_until(test_zcard_is, &queued, 10000))
        test_wait_until(waits_counted, held->pool, 10000);
    dbt_release(held);
    return NULL;
}

/* A class's wait replaces DBTHROTTLE_WAIT_TIMEOUT for a thread that takes the queued place of one
 * served by local handover (an orphan: no Redis call, so no acquire reply to read the class's
 * wait from) as for one that queues. */
Test(class_client, an_adopted_place_keeps_the_class_wait, .init = fx_redis_start, .fini = fx_stop,
     .timeout = 60)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    freeReplyObject(
        redisCommand(rc, "SET dbthrottle:{cl}:q:classes aging=0;default=;x:0:0:1500:-"));
    redisFree(rc);
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "cl");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000, .klass = "x"};
    dbt_permit *a, *b, *d = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    zcard_is reported = {&fx_redis, "dbthrottle:{cl}:procs", 1};
    cr_assert(test_wait_until(test_zcard_is, &reported, 10000), "the process never reported");
    pthread_t t;
    pthread_create(&t, NULL, release_when_queued, a);
    /* queued (class wait 1.5 s), then served by a's permit passed on here: its place an orphan */
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &b), DBT_ACQ_GRANTED);
    pthread_join(t, NULL);
    /* the next waiter of the class takes that place (within the orphan's 50 ms, usually) */
    int64_t t0 = dbt_now_us();
    dbt_acq_result r = dbt_acquire(p, DBT_KIND_QUERY, &o, &d);
    int64_t waited_ms = (dbt_now_us() - t0) / 1000;
    dbt_pool_stats st;
    dbt_pool_get_stats(p, &st);
    cr_log_info("adoptions %llu, waited %lld ms", (unsigned long long)st.adoptions,
                (long long)waited_ms);
    cr_expect_eq(r, DBT_ACQ_TIMEOUT, "result %d", r);
    cr_expect_lt(waited_ms, 10000, "waited %lld ms: the class's wait is 1500 ms",
                 (long long)waited_ms);
    if (d)
        dbt_release(d);
    dbt_release(b);
}
