/* Metrics kept in Redis (issue 18): the wait and hold histograms the scripts keep (judged against
 * the test's own clock and read back with HGET from the hist hash), the counters and histograms
 * outliving the pool's transient keys, and what status.lua reports of them. */
#include "redis_conn.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define P    "dbthrottle:{metrics}:q:"
#define CID  "00000000000000d1"
#define HIST P "hist"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(metrics, .init = fx_redis_start, .fini = fx_stop);

/* The bucket bounds (ms) the scripts use (lua/_common.lua, HIST_BOUNDS). */
static const double bounds[] = {1,   2.5,  5,    10,   25,    50,    100,  250,
                                500, 1000, 2500, 5000, 10000, 30000, 60000};
#define NBOUNDS ((int)(sizeof bounds / sizeof *bounds))

/* The bucket a value (ms) falls in. */
static int bucket_of(long long ms)
{
    int i = 0;
    while (i < NBOUNDS && (double)ms > bounds[i])
        i++;
    return i;
}

/* A field of the hist hash (0 when absent). */
static long long hist_field(const char *field)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = redisCommand(rc, "HGET " HIST " %s", field);
    long long v = rep && rep->type == REDIS_REPLY_STRING ? strtoll(rep->str, NULL, 10) : 0;
    freeReplyObject(rep);
    redisFree(rc);
    return v;
}

/* How many values series ('w' or 'h') of class klass holds, over all its buckets. */
static long long hist_count(char series, const char *klass)
{
    long long n = 0;
    for (int i = 0; i <= NBOUNDS; i++) {
        char f[64];
        snprintf(f, sizeof f, "%c:%d:%s", series, i, klass);
        n += hist_field(f);
    }
    return n;
}

static long long hist_sum(char series, const char *klass)
{
    char f[64];
    snprintf(f, sizeof f, "%c:s:%s", series, klass);
    return hist_field(f);
}

static long long bucket_count(char series, int i, const char *klass)
{
    char f[64];
    snprintf(f, sizeof f, "%c:%d:%s", series, i, klass);
    return hist_field(f);
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

typedef struct {
    dbt_pool *pool;
    dbt_permit *permit;
    dbt_acq_result res;
    int64_t started_ms, returned_ms;
    atomic_bool done;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = DBT_FOREVER};
    w->started_ms = test_now_ms();
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    w->returned_ms = test_now_ms();
    atomic_store(&w->done, true);
    return NULL;
}

static bool hist_count_is(void *arg)
{
    const long long *want = arg; /* {series, count} */
    return hist_count((char)want[0], "") == want[1];
}

/* A holder keeps its permit for a known time by the test's clock while a waiter of another
 * process waits a known time: the buckets and sums Redis recorded agree with both clocks. */
Test(metrics, wait_and_hold_histograms_agree_with_the_clock, .timeout = 60)
{
    dbt_client *hc = fx_client("DBTHROTTLE_LEASE=10s", NULL),
               *wc = fx_client("DBTHROTTLE_LEASE=10s", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "metrics"), *wp = dbt_client_pool(wc, "metrics");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    int64_t before_grant = test_now_ms();
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    int64_t after_grant = test_now_ms();
    cr_expect_eq(bucket_count('w', 0, ""), 1, "a grant at once is a wait of 0 in the first bucket");
    cr_expect_eq(hist_sum('w', ""), 0);

    waiter_arg w = {.pool = wp};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, waiter, &w), 0);
    zcard_is queued = {&fx_redis, P "queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "the waiter never queued");
    int64_t seen_queued = test_now_ms();
    sleep_ms(400); /* the known wait (and hold) */
    int64_t before_release = test_now_ms();
    dbt_release(held);
    long long want_w[2] = {'w', 2};
    cr_assert(test_wait_until(hist_count_is, want_w, 10000), "the waiter's grant was not recorded");
    /* Redis ran the release, which granted the waiter, before this: a release is sent without
     * waiting for its reply, and Redis may run it after dbt_release returned (seen in CI under
     * ASan: a hold 2 ms longer than release's return allowed). */
    int64_t after_release = test_now_ms();
    pthread_join(t, NULL);
    cr_assert_eq(w.res, DBT_ACQ_GRANTED);

    /* the hold: from the grant (Redis granted before the acquire returned) to the release */
    long long hold = hist_sum('h', "");
    cr_expect_eq(hist_count('h', ""), 1);
    cr_expect_geq(hold, before_release - after_grant - 2, "hold %lld ms", hold);
    cr_expect_leq(hold, after_release - before_grant + 2, "hold %lld ms", hold);
    cr_expect_eq(bucket_count('h', bucket_of(hold), ""), 1, "hold %lld ms not in its bucket", hold);
    /* the wait: from its queueing (before the test saw it queued) to its grant (by the release,
     * before the waiter returned); the two clocks differ by at most a millisecond's rounding */
    long long wait = hist_sum('w', "");
    cr_expect_geq(wait, before_release - seen_queued - 2, "wait %lld ms", wait);
    cr_expect_leq(wait, w.returned_ms - w.started_ms + 2, "wait %lld ms", wait);
    cr_expect_eq(bucket_count('w', bucket_of(wait), ""), 1, "wait %lld ms not in its bucket", wait);
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " P "stats grants"), 2);

    sleep_ms(150);
    int64_t before_second = test_now_ms();
    dbt_release(w.permit);
    long long want_h[2] = {'h', 2};
    cr_assert(test_wait_until(hist_count_is, want_h, 10000), "the second hold was not recorded");
    int64_t after_second = test_now_ms(); /* Redis ran the release before this (see above) */
    long long second = hist_sum('h', "") - hold;
    cr_expect_geq(second, before_second - w.returned_ms - 2, "second hold %lld ms", second);
    cr_expect_leq(second, after_second - before_release + 2, "second hold %lld ms", second);
}

/* ---- through the scripts themselves, as test_classes.c drives them ----------------------------
 */

static dbt_config cfg;
static dbt_redis *conn;
static dbt_keys keys;

static void scripts_start(void)
{
    fx_redis_start();
    char err[DBT_ERRLEN];
    test_config(&cfg, &fx_redis, "DBTHROTTLE_LEASE=10s", NULL);
    conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "metrics"));
}

static void scripts_stop(void)
{
    dbt_keys_free(&keys);
    if (conn)
        dbt_redis_free(conn);
    dbt_config_free(&cfg);
    fx_stop();
}

TestSuite(metrics_scripts, .init = scripts_start, .fini = scripts_stop);

static int acq_with(const dbt_config *c, const char *id, bool try_only)
{
    int limit = 1;
    cr_assert(dbt_parse_id_shape(id, NULL, NULL, &limit), "%s", id);
    dbt_acquire_call a = {.id = id, .limit = limit, .try_only = try_only, .who = "h 1 c"};
    dbt_script_call call;
    dbt_build_acquire(&call, &keys, DBT_KIND_QUERY, c, &a);
    dbt_acquire_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &call, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "acquire %s: %s", id, err);
    freeReplyObject(rep);
    return (int)reply.status;
}

static int acq(const char *id)
{
    return acq_with(&cfg, id, false);
}

static void rel(const char *id)
{
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id, -1);
    bool held;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_release, &held, err);
    cr_assert_not_null(rep, "release %s: %s", id, err);
    freeReplyObject(rep);
}

static int cancel(const char *id)
{
    dbt_script_call c;
    dbt_build_cancel(&c, &keys, DBT_KIND_QUERY, &cfg, id, true);
    dbt_cancel_outcome out;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_cancel, &out, err);
    cr_assert_not_null(rep, "cancel %s: %s", id, err);
    freeReplyObject(rep);
    return (int)out;
}

static void evict(const char *id)
{
    dbt_script_call c;
    dbt_build_admin(&c, &keys, DBT_KIND_QUERY, &cfg, DBT_ADMIN_EVICT, id);
    dbt_admin_reply a;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_admin, &a, err);
    cr_assert_not_null(rep, "evict %s: %s", id, err);
    freeReplyObject(rep);
    cr_expect(a.evicted);
    cr_expect_eq(strchr(a.info, '\x1f'), NULL, "the evicted info is its first part: %s", a.info);
}

static bool status_of(dbt_status_reply *s)
{
    dbt_script_call c;
    dbt_build_status(&c, &keys, 0);
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_status, s, err);
    cr_assert_not_null(rep, "status: %s", err);
    freeReplyObject(rep);
    return true;
}

typedef struct {
    const dbt_config *short_cfg;
    long long want;
} reaped;

/* Any script reaps: a try-only acquire of another id, then the hold histogram's count. */
static bool reaped_is(void *arg)
{
    reaped *r = arg;
    acq_with(r->short_cfg, CID ".99.1", true);
    return hist_count('h', "") >= r->want;
}

/* A release that says its holder's hold (a permit passed without Redis was held by several in
 * turn since its grant): that hold goes to the histogram, not the time since the grant. */
Test(metrics_scripts, a_release_counts_the_hold_its_holder_says, .timeout = 30)
{
    cr_assert_eq(acq(CID ".1.1"), DBT_ACQUIRE_GRANTED);
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, CID ".1.1", 2400);
    bool held;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_release, &held, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect(held);
    cr_expect_eq(hist_count('h', ""), 1);
    cr_expect_eq(hist_sum('h', ""), 2400, "the hold said, not the ~0 ms since the grant");
    cr_expect_eq(bucket_count('h', bucket_of(2400), ""), 1);
}

/* Only a waiter that gave up is counted as cancelled; a place withdrawn because its waiter was
 * served otherwise (a permit passed without Redis) is not. */
Test(metrics_scripts, only_a_waiter_that_gave_up_is_cancelled, .timeout = 30)
{
    cr_assert_eq(acq(CID ".1.1"), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(CID ".2.1"), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(CID ".3.1"), DBT_ACQUIRE_QUEUED);
    dbt_script_call c;
    dbt_build_cancel(&c, &keys, DBT_KIND_QUERY, &cfg, CID ".2.1", false);
    dbt_cancel_outcome out;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_cancel, &out, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_eq(out, DBT_CANCEL_WITHDRAWN);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 1, "withdrawn all the same");
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " P "stats cancelled"), -1000, "not counted");
    cr_expect_eq(cancel(CID ".3.1"), DBT_CANCEL_WITHDRAWN);
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " P "stats cancelled"), 1);
}

/* Every way out of the holders is one hold: a release, the cancel of a waiter granted meanwhile,
 * an eviction, an expiry; a weighted permit counts once. */
Test(metrics_scripts, every_way_out_of_the_holders_is_one_hold, .timeout = 60)
{
    cr_assert_eq(acq(CID ".1.1"), DBT_ACQUIRE_GRANTED);
    rel(CID ".1.1");
    cr_expect_eq(hist_count('h', ""), 1, "release");
    cr_assert_eq(acq(CID ".2.1"), DBT_ACQUIRE_GRANTED);
    cr_expect_eq(cancel(CID ".2.1"), DBT_CANCEL_RETURNED);
    cr_expect_eq(hist_count('h', ""), 2, "cancel of a granted one");
    cr_assert_eq(acq(CID ".3.1"), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(CID ".4.1"), DBT_ACQUIRE_QUEUED);
    cr_expect_eq(cancel(CID ".4.1"), DBT_CANCEL_WITHDRAWN);
    cr_expect_eq(hist_count('h', ""), 2, "a waiter withdrawn held nothing");
    cr_expect_eq(hist_count('w', ""), 3, "a waiter withdrawn was never granted");
    evict(CID ".3.1");
    cr_expect_eq(hist_count('h', ""), 3, "eviction");
    /* a weighted permit (3 units at a limit of 4) is one value */
    dbt_acquire_call a = {.id = CID ".5.-.3.4", .limit = 4, .who = "h 1 c"};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_assert_eq(reply.status, DBT_ACQUIRE_GRANTED);
    cr_expect_eq(hist_count('w', ""), 4);
    rel(CID ".5.-.3.4");
    cr_expect_eq(hist_count('h', ""), 4, "a weighted permit is one hold");
    /* expiry: a permit of a 300 ms lease, never renewed, reaped by a later call */
    dbt_config short_cfg;
    test_config(&short_cfg, &fx_redis, "DBTHROTTLE_LEASE=300ms", NULL);
    int64_t t0 = test_now_ms();
    cr_assert_eq(acq_with(&short_cfg, CID ".6.1", false), DBT_ACQUIRE_GRANTED);
    long long before = hist_sum('h', "");
    reaped r = {&short_cfg, 5};
    cr_expect(test_wait_until(reaped_is, &r, 10000), "the expired permit was not recorded");
    long long expired = hist_sum('h', "") - before;
    cr_expect_geq(expired, 300, "an expired permit was held at least its lease: %lld", expired);
    cr_expect_leq(expired, test_now_ms() - t0 + 2);
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " P "stats expired"), 1);
    dbt_config_free(&short_cfg);
}

/* With classes defined, a value is recorded under the class its permit was granted as (the
 * default class for an untagged one), the wait at the grant and the hold at the release alike. */
Test(metrics_scripts, histograms_per_class)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    freeReplyObject(redisCommand(rc, "SET " P "classes %s",
                                 "aging=0;default=batch;web:50:1:-:-;batch:50:0:-:-"));
    redisFree(rc);
    cr_assert_eq(acq(CID ".1.web.1.2"), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(CID ".2.2"), DBT_ACQUIRE_GRANTED);
    cr_expect_eq(bucket_count('w', 0, "web"), 1);
    cr_expect_eq(bucket_count('w', 0, "batch"), 1, "an untagged one is the default class'");
    cr_expect_eq(hist_count('w', ""), 0, "no value without a class while classes are defined");
    rel(CID ".1.web.1.2");
    rel(CID ".2.2");
    cr_expect_eq(hist_count('h', "web"), 1);
    cr_expect_eq(hist_count('h', "batch"), 1);
    dbt_status_reply s;
    status_of(&s);
    dbt_status_kind *k = &s.kind[DBT_KIND_QUERY];
    cr_assert_eq(k->nhists, 4, "w and h of web and batch: %d", k->nhists);
    for (int i = 0; i < k->nhists; i++)
        cr_expect(k->hists[i].count == 1 && (strcmp(k->hists[i].klass, "web") == 0 ||
                                             strcmp(k->hists[i].klass, "batch") == 0));
    dbt_status_free(&s);
}

/* status.lua states the bounds, the histograms (buckets not cumulative, sum, count) and the
 * oldest current wait. */
Test(metrics_scripts, status_reports_the_oldest_wait_and_the_histograms, .timeout = 30)
{
    cr_assert_eq(acq(CID ".1.1"), DBT_ACQUIRE_GRANTED);
    int64_t t0 = test_now_ms();
    cr_assert_eq(acq(CID ".2.1"), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(CID ".3.1"), DBT_ACQUIRE_QUEUED);
    sleep_ms(300);
    dbt_status_reply s;
    status_of(&s);
    dbt_status_kind *k = &s.kind[DBT_KIND_QUERY];
    cr_expect_geq(k->oldest_wait_ms, 300 - 2, "oldest wait %lld", k->oldest_wait_ms);
    cr_expect_leq(k->oldest_wait_ms, test_now_ms() - t0 + 2, "oldest wait %lld", k->oldest_wait_ms);
    cr_assert_eq(k->nbounds, NBOUNDS);
    for (int i = 0; i < NBOUNDS; i++)
        cr_expect_eq(k->hist_bound_ms[i], bounds[i], "bound %d: %g", i, k->hist_bound_ms[i]);
    /* the client buckets local handover's waits by the same list, read from the scripts' text */
    double client[DBT_HIST_MAX];
    cr_assert_eq(dbt_hist_bounds(client, DBT_HIST_MAX), NBOUNDS);
    for (int i = 0; i < NBOUNDS; i++)
        cr_expect_eq(client[i], bounds[i], "the client's bound %d: %g", i, client[i]);
    cr_assert_eq(k->nhists, 1, "only the wait has values yet");
    cr_expect_eq(k->hists[0].series, 'w');
    cr_expect_str_eq(k->hists[0].klass, "");
    cr_expect_eq(k->hists[0].count, 1);
    cr_expect_eq(k->hists[0].bucket[0], 1);
    cr_expect_eq(k->hists[0].sum_ms, 0);
    cr_expect_eq(s.kind[DBT_KIND_CONN].oldest_wait_ms, 0);
    cr_expect_eq(s.kind[DBT_KIND_CONN].nhists, 0);
    dbt_status_free(&s);
    rel(CID ".1.1");
    status_of(&s);
    k = &s.kind[DBT_KIND_QUERY];
    cr_expect_eq(k->nhists, 2);
    long long total = 0;
    for (int i = 0; i < k->nhists; i++)
        if (k->hists[i].series == 'w') {
            cr_expect_eq(k->hists[i].count, 2);
            for (int b = 0; b <= NBOUNDS; b++)
                total += k->hists[i].bucket[b];
            cr_expect_geq(k->hists[i].sum_ms, 300 - 2);
        }
    cr_expect_eq(total, 2, "the buckets are not cumulative");
    cr_expect_leq(k->oldest_wait_ms, test_now_ms() - t0 + 2, "now the second waiter's");
    dbt_status_free(&s);
}

/* The counters and histograms outlive the pool's transient keys (three leases after the last
 * use): they have a week's TTL, and a pool used again counts on from where it was. */
Test(metrics, counters_outlive_the_pool_transient_keys, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=500ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "metrics");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    dbt_release(held);
    fx_client_free(c);
    key_gone seen = {&fx_redis, P "limit_seen"}, info = {&fx_redis, P "info"};
    cr_assert(test_wait_until(test_key_gone, &seen, 10000), "the transient keys stayed");
    cr_assert(test_wait_until(test_key_gone, &info, 10000), "the transient keys stayed");
    const long long six_days = 6LL * 24 * 3600 * 1000;
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " P "stats"), six_days);
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " HIST), six_days);
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " P "stats grants"), 1);
    cr_expect_eq(hist_count('w', ""), 1);
    cr_expect_eq(hist_count('h', ""), 1);

    c = fx_client("DBTHROTTLE_LEASE=500ms", NULL);
    p = dbt_client_pool(c, "metrics");
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    dbt_release(held);
    fx_client_free(c);
    long long want_h[2] = {'h', 2};
    cr_expect(test_wait_until(hist_count_is, want_h, 10000), "the second hold was not recorded");
    cr_expect_eq(test_redis_int(&fx_redis, "HGET " P "stats grants"), 2, "restarted from zero");
    cr_expect_eq(hist_count('w', ""), 2);
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " P "stats"), six_days);
}

/* ---- the holders' sessions ------------------------------------------------------------------- */

/* The pool's query holders as status.lua reports them (a connection of the test's own). */
static void status_now(dbt_status_reply *s)
{
    dbt_config c;
    test_config(&c, &fx_redis, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&c, err);
    cr_assert_not_null(r, "%s", err);
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, c.key_prefix, "metrics"));
    dbt_script_call call;
    dbt_build_status(&call, &k, 0);
    redisReply *rep = dbt_script_run(r, &call, dbt_parse_status, s, err);
    cr_assert_not_null(rep, "status: %s", err);
    freeReplyObject(rep);
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&c);
}

typedef struct {
    const char *state;
    long backend_pid;
} holder_is;

/* What holder_is_now saw last, for the message of a check that failed. */
static char last_seen[128];

/* The one query holder is in that state (NULL: any) with that backend pid (0: any). */
static bool holder_is_now(void *arg)
{
    const holder_is *want = arg;
    dbt_status_reply s;
    status_now(&s);
    const dbt_status_kind *q = &s.kind[DBT_KIND_QUERY];
    snprintf(last_seen, sizeof last_seen, "%d holders, the first %s of pid %ld", q->nh,
             q->nh ? q->holders[0].state : "-", q->nh ? q->holders[0].backend_pid : 0L);
    bool ok = q->nh == 1 && (!want->state || strcmp(q->holders[0].state, want->state) == 0) &&
              (!want->backend_pid || q->holders[0].backend_pid == want->backend_pid);
    dbt_status_free(&s);
    return ok;
}

/* A holder's entry names the session its acquire gave (names with spaces whole, a separator in
 * one made '_', each cut to 63 bytes), and its state follows the permit: running, idle in a
 * transaction, kept between commands, running again (each by the next renewal, lease/3). */
Test(metrics, holders_show_their_session_and_state, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1500ms", "DBTHROTTLE_CACHE_PERMITS=on",
                              "DBTHROTTLE_CACHE_IDLE=60s", NULL);
    dbt_pool *p = dbt_client_pool(c, "metrics");
    char user[100], session[DBT_SESSION_LEN];
    memset(user, 'u', 80);
    user[80] = '\0';
    cr_assert(dbt_format_session(4242, "app\x1fname with spaces", user, "the db", session,
                                 sizeof session));
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0, .session = session};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    dbt_status_reply s;
    status_now(&s);
    const dbt_status_kind *q = &s.kind[DBT_KIND_QUERY];
    cr_assert_eq(q->nh, 1);
    cr_expect_str_eq(q->holders[0].state, "running");
    cr_expect_eq(q->holders[0].backend_pid, 4242);
    cr_expect_str_eq(q->holders[0].app, "app_name with spaces");
    cr_expect_eq(strlen(q->holders[0].user), 63);
    cr_expect_str_eq(q->holders[0].db, "the db");
    cr_expect_gt(q->holders[0].pid, 0, "the first part is read as before");
    dbt_status_free(&s);

    dbt_permit_note_idle(held, true);
    holder_is idle = {"idle_tx", 4242};
    cr_expect(test_wait_until(holder_is_now, &idle, 10000), "never idle_tx: %s", last_seen);
    dbt_permit_note_idle(held, false);
    cr_assert(dbt_permit_park(held), "not kept");
    holder_is kept = {"kept", 4242};
    cr_expect(test_wait_until(holder_is_now, &kept, 10000), "never kept: %s", last_seen);
    cr_assert(dbt_permit_unpark(&held), "given back meanwhile");
    holder_is running = {"running", 4242};
    cr_expect(test_wait_until(holder_is_now, &running, 10000), "never running again: %s",
              last_seen);
    dbt_release(held);
}

typedef struct {
    dbt_pool *pool;
    const char *session;
    dbt_permit *permit;
    dbt_acq_result res;
} session_waiter;

static void *wait_with_session(void *arg)
{
    session_waiter *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = DBT_FOREVER, .session = w->session};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    return NULL;
}

/* A waiter's entry names its session too, and a permit passed to another thread of the process
 * (local handover, no Redis call) comes to name the new holder's session by the next renewal. */
Test(metrics, a_permit_passed_on_names_its_new_session, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1500ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "metrics");
    char s1[DBT_SESSION_LEN], s2[DBT_SESSION_LEN];
    cr_assert(dbt_format_session(1111, "first", "u", "d", s1, sizeof s1));
    cr_assert(dbt_format_session(2222, "second", "u", "d", s2, sizeof s2));
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0, .session = s1};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    session_waiter w = {.pool = p, .session = s2};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, wait_with_session, &w), 0);
    zcard_is queued = {&fx_redis, P "queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "the waiter never queued");
    dbt_status_reply s;
    status_now(&s);
    cr_assert_eq(s.kind[DBT_KIND_QUERY].nw, 1);
    cr_expect_eq(s.kind[DBT_KIND_QUERY].waiters[0].backend_pid, 2222);
    cr_expect_str_eq(s.kind[DBT_KIND_QUERY].waiters[0].state, "");
    dbt_status_free(&s);
    dbt_release(held);
    pthread_join(t, NULL);
    cr_assert_eq(w.res, DBT_ACQ_GRANTED);
    holder_is second = {"running", 2222};
    cr_expect(test_wait_until(holder_is_now, &second, 10000),
              "the holder still names the first: %s", last_seen);
    dbt_release(w.permit);
}

/* ---- waits granted by local handover ------------------------------------------------------------
 */

static bool handed_over(void *arg)
{
    dbt_pool_stats st;
    dbt_pool_get_stats(arg, &st);
    return st.handovers >= 1;
}

typedef struct {
    long long want, grants;
} grants_counted;

/* Both grants are counted, and the wait histogram counts every one: its count equals grants. */
static bool hist_counts_every_grant(void *arg)
{
    grants_counted *g = arg;
    g->grants = test_redis_int(&fx_redis, "HGET " P "stats grants");
    return g->grants >= g->want && hist_count('w', "") == g->grants;
}

/* A permit one thread passes to another of its process without Redis (local handover) is counted
 * in the wait histogram by the next renewal, as in grants and wait_ms: the histogram's count stays
 * the number of grants, and its sum the waits' (within the clocks' rounding). */
Test(metrics, waits_granted_by_local_handover_reach_the_histogram, .timeout = 120)
{
    dbt_client *c = fx_client("DBTHROTTLE_LEASE=1500ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "metrics");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0};
    /* A round: one thread holds for 300 ms while another of the process waits. Whether the
     * release goes to the waiter without Redis depends on the process' verdict of the moment:
     * rounds until one did (each round's grants count alike). */
    int rounds = 0;
    int64_t waited_ms = 0; /* the waiters' own measure, an upper bound of each wait */
    for (; rounds < 8 && !handed_over(p); rounds++) {
        dbt_permit *held;
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
        waiter_arg w = {.pool = p};
        pthread_t t;
        cr_assert_eq(pthread_create(&t, NULL, waiter, &w), 0);
        zcard_is queued = {&fx_redis, P "queue", 1};
        cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "the waiter never queued");
        sleep_ms(300);
        dbt_release(held);
        pthread_join(t, NULL);
        cr_assert_eq(w.res, DBT_ACQ_GRANTED);
        waited_ms += w.returned_ms - w.started_ms;
        /* After a local handover the served thread's place stays queued in Redis, an orphan,
         * while a thread of the process holds (for its next wait), and goes once the process is
         * idle: withdrawn before the release that makes it idle, which would otherwise grant the
         * orphan, and Redis would count that grant and its wait too, beside the handover the
         * renewal reports. The permit goes back to an empty queue: the histogram holds the
         * rounds' waits alone. */
        dbt_release(w.permit);
        zcard_is left = {&fx_redis, P "queue", 0};
        cr_assert(test_wait_until(test_zcard_is, &left, 10000), "the waiter's place stayed queued");
    }
    cr_assert(handed_over(p), "no local handover in %d rounds: nothing to judge", rounds);
    grants_counted g = {.want = 2LL * rounds};
    cr_expect(test_wait_until(hist_counts_every_grant, &g, 10000),
              "the histogram counts %lld of %lld grants", hist_count('w', ""), g.grants);
    cr_expect_eq(bucket_count('w', 0, ""), rounds, "the grants at once");
    long long sum = hist_sum('w', "");
    cr_expect_geq(sum, rounds * (300LL - 2), "the waits %lld ms", sum);
    cr_expect_leq(sum, waited_ms + 2LL * rounds, "the waits %lld ms", sum);
    long long above = 0; /* the waits of 300 ms or more, in the buckets above 250 ms */
    for (int i = bucket_of(251); i <= NBOUNDS; i++)
        above += bucket_count('w', i, "");
    cr_expect_eq(above, rounds, "the waits of 300 ms or more");
}
