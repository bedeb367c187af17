/* Eras and quarantine (docs/design.md, "Failover and data loss"): when Redis' state is not the
 * state the holders believe in (a restart without persistence, another server, keys deleted by
 * hand), no grant is made until the holders have re-asserted their permits, and those count
 * against the limit. Judged from Redis' own keys, never from the library's view of itself. */
#include "clock.h"
#include "redis_conn.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define P "dbthrottle:{era}:q:"

/* Every test here starts with a redis-server of its own and ends with it stopped. */
TestSuite(eras, .init = fx_redis_start, .fini = fx_stop);

/* A lease of 3 s renews every second; with a 500 ms Redis timeout Q is 1 + 0.5 + 1 = 2.5 s. */
#define LEASE       "DBTHROTTLE_LEASE=3s"
#define TIMEOUT     "DBTHROTTLE_REDIS_TIMEOUT=500ms"
#define Q_MS        2500
#define RENEWAL_MS  1000
#define FOREIGN_RUN "0123456789abcdef0123456789abcdef01234567"

static dbt_acquire_opts try_only(int limit)
{
    return (dbt_acquire_opts){.limit = limit, .wait_ms = 0};
}

/* The era key's text ("" when absent), for the assertions' messages and checks. */
static void era_of(char *out, size_t cap)
{
    out[0] = '\0';
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *rep = rc ? redisCommand(rc, "GET " P "era") : NULL;
    if (rep && rep->type == REDIS_REPLY_STRING)
        snprintf(out, cap, "%s", rep->str);
    freeReplyObject(rep);
    if (rc)
        redisFree(rc);
}

/* Milliseconds the semaphore's quarantine still lasts, by Redis' clock (0: none). */
static long long quarantine_left(void)
{
    char era[128];
    era_of(era, sizeof era);
    long long till = 0;
    if (sscanf(era, "%*s %lld", &till) != 1 || till == 0)
        return 0;
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *t = redisCommand(rc, "TIME");
    long long now =
        strtoll(t->element[0]->str, NULL, 10) * 1000 + strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(t);
    redisFree(rc);
    return till > now ? till - now : 0;
}

static long long stat_of(const char *field)
{
    long long v = test_redis_int(&fx_redis, "HGET " P "stats %s", field);
    return v < 0 ? 0 : v;
}

/* Kills Redis (no persistence: everything is lost) and starts it again, empty, on its port. */
static void restart_empty(void)
{
    test_redis_kill(&fx_redis);
    cr_assert(test_redis_restart(&fx_redis, NULL), "redis-server did not start again");
}

/* A thread that waits for a permit (up to 30 s). */
typedef struct {
    dbt_pool *pool;
    int limit;
    dbt_acq_result res;
    dbt_permit *permit;
    atomic_llong granted_at;
} waiter_arg;

static void *waiter(void *arg)
{
    waiter_arg *w = arg;
    dbt_acquire_opts o = {.limit = w->limit, .wait_ms = 30000};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    atomic_store(&w->granted_at, test_now_ms());
    return NULL;
}

static bool member_is(void *arg)
{
    const char **km = arg;
    return test_redis_int(&fx_redis, "ZSCORE %s %s", km[0], km[1]) > 0;
}

/* Redis restarted empty while two permits are held: the holders' next renewal (at once: their
 * connection reached another run_id) re-asserts them, a quarantine of Q starts, in which nobody
 * is granted although a permit is free; then the free one is granted and no more.
 * On the code before eras the permits were lost: Redis' holders stayed empty. */
Test(eras, restart_empty_holders_reassert_and_count, .timeout = 90)
{
    dbt_client *hc = fx_client(LEASE, TIMEOUT, "DBTHROTTLE_ON_REDIS_ERROR=closed", NULL);
    dbt_client *nc = fx_client(LEASE, TIMEOUT, "DBTHROTTLE_ON_REDIS_ERROR=closed", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "era"), *np = dbt_client_pool(nc, "era");
    dbt_acquire_opts three = try_only(3);
    dbt_permit *a, *b, *x = NULL, *y = NULL;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &three, &a), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &three, &b), DBT_ACQ_GRANTED);
    cr_expect_eq(quarantine_left(), 0, "a new pool was quarantined");

    restart_empty();
    int64_t back = test_now_ms();
    zcard_is two = {&fx_redis, P "holders", 2};
    cr_assert(test_wait_until(test_zcard_is, &two, 2 * RENEWAL_MS + 2000),
              "the holders were not re-asserted (holders %lld)",
              test_redis_int(&fx_redis, "ZCARD " P "holders"));
    cr_log_info("re-asserted %lld ms after Redis was back", (long long)(test_now_ms() - back));
    cr_expect_eq(stat_of("reasserted"), 2);
    cr_expect_eq(stat_of("quarantines"), 1);
    cr_expect_gt(quarantine_left(), 0, "no quarantine after a restart");
    cr_expect_not(dbt_permit_lost(a));
    cr_expect_not(dbt_permit_lost(b));
    /* In quarantine: refused although a permit is free (3 - 2). */
    dbt_acq_result r = DBT_ACQ_TIMEOUT;
    while (quarantine_left() > 300 &&
           (r = dbt_acquire(np, DBT_KIND_QUERY, &three, &x)) == DBT_ACQ_TIMEOUT)
        usleep(100 * 1000);
    cr_expect_neq(r, DBT_ACQ_GRANTED, "granted during the quarantine");
    /* Once it is over, the free one is granted, and the re-asserted ones still count. */
    int64_t deadline = test_now_ms() + Q_MS + RENEWAL_MS + 3000;
    while ((r = dbt_acquire(np, DBT_KIND_QUERY, &three, &x)) != DBT_ACQ_GRANTED &&
           test_now_ms() < deadline)
        usleep(50 * 1000);
    cr_assert_eq(r, DBT_ACQ_GRANTED, "no grant after the quarantine");
    cr_expect_eq(dbt_acquire(np, DBT_KIND_QUERY, &three, &y), DBT_ACQ_TIMEOUT,
                 "a fourth permit at a limit of 3");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 3);
    dbt_release(x);
    dbt_release(a);
    dbt_release(b);
}

/* The pool's state now on a server that lacks the last writes (as after a failover to a replica
 * that lagged: another run_id in the era, the holder and the waiter missing), while the
 * connections live on. The holder re-asserts; the waiter's place is queued again under its own
 * id; the holder gives its permit back during the quarantine, and the waiter is granted when the
 * quarantine ends, within Q and a renewal of the change, not before. (A waiter whose own
 * listener connection broke, as in a restart, gives up as in any outage: refused when closed.)
 * On the code before eras the holder was lost and the waiter granted beside it at once. */
Test(eras, lagging_state_waiter_requeued_and_granted_after_quarantine, .timeout = 90)
{
    dbt_client *hc = fx_client(LEASE, TIMEOUT, "DBTHROTTLE_ON_REDIS_ERROR=closed", NULL);
    dbt_client *wc = fx_client(LEASE, TIMEOUT, "DBTHROTTLE_ON_REDIS_ERROR=closed", NULL);
    dbt_pool *hp = dbt_client_pool(hc, "era"), *wp = dbt_client_pool(wc, "era");
    dbt_acquire_opts one = try_only(1);
    dbt_permit *a;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &one, &a), DBT_ACQ_GRANTED);
    waiter_arg w = {.pool = wp, .limit = 1};
    pthread_t t;
    pthread_create(&t, NULL, waiter, &w);
    zcard_is queued = {&fx_redis, P "queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 10000));

    cr_assert_eq(test_redis_int(&fx_redis, "SET " P "era %s", FOREIGN_RUN " 0 -"), -1000);
    cr_assert_eq(test_redis_int(&fx_redis, "DEL " P "holders " P "queue " P "wexp"), 3);
    int64_t changed = test_now_ms();
    const char *holder[] = {P "holders", dbt_permit_id(a)};
    cr_assert(test_wait_until(member_is, holder, 2 * RENEWAL_MS + 2000),
              "the holder was not re-asserted");
    /* The waiter's place, under its own id (its process' cid), is in the queue again. */
    cr_expect(test_wait_until(test_zcard_is, &queued, 2 * RENEWAL_MS + 2000),
              "the waiter was not queued again");
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *q = redisCommand(rc, "ZRANGE " P "queue 0 -1");
    cr_assert(q && q->type == REDIS_REPLY_ARRAY && q->elements == 1);
    cr_expect_eq(strncmp(q->element[0]->str, dbt_client_id(wc), 16), 0, "queued: %s",
                 q->element[0]->str);
    freeReplyObject(q);
    redisFree(rc);
    cr_expect_eq(stat_of("requeued"), 1);
    cr_expect_eq(stat_of("reasserted"), 1);
    /* The permit given back in the quarantine waits for its end. */
    dbt_release(a);
    while (quarantine_left() > 200)
        usleep(20 * 1000);
    cr_expect_eq(atomic_load(&w.granted_at), 0, "granted during the quarantine");
    pthread_join(t, NULL);
    cr_assert_eq(w.res, DBT_ACQ_GRANTED);
    long long after = (long long)(atomic_load(&w.granted_at) - changed);
    cr_log_info("waiter granted %lld ms after the change (Q %d ms)", after, Q_MS);
    cr_expect_leq(after, Q_MS + RENEWAL_MS + 1500, "grants resumed late: %lld ms", after);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 1);
    dbt_release(w.permit);
}

/* A pool new to Redis and to the process is granted at once: no quarantine, none counted.
 * (Passes on the code before eras too: it guards against a quarantine for nothing.) */
Test(eras, a_new_pool_is_not_quarantined, .timeout = 60)
{
    dbt_client *c = fx_client(LEASE, TIMEOUT, NULL);
    dbt_pool *p = dbt_client_pool(c, "era");
    dbt_acquire_opts one = try_only(1);
    dbt_permit *a;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &one, &a), DBT_ACQ_GRANTED);
    dbt_release(a);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &one, &a), DBT_ACQ_GRANTED);
    dbt_release(a);
    cr_expect_eq(stat_of("quarantines"), 0);
    cr_expect_eq(quarantine_left(), 0);
}

/* The pool's state comes from another server (its era names another run_id: a failover, a
 * restore): a quarantine starts, and nobody is granted until it ends.
 * On the code before eras the acquire was granted at once. */
Test(eras, another_servers_state_is_quarantined, .timeout = 60)
{
    dbt_client *c = fx_client(LEASE, TIMEOUT, NULL);
    dbt_pool *p = dbt_client_pool(c, "era");
    cr_assert_eq(test_redis_int(&fx_redis, "SET " P "era %s", FOREIGN_RUN " 0 -"), -1000);
    dbt_acquire_opts one = try_only(1);
    dbt_permit *a = NULL;
    cr_expect_eq(dbt_acquire(p, DBT_KIND_QUERY, &one, &a), DBT_ACQ_TIMEOUT,
                 "granted on another server's state");
    char era[128];
    era_of(era, sizeof era);
    cr_expect_neq(strncmp(era, FOREIGN_RUN, 40), 0, "the era is still the other server's: %s", era);
    cr_expect_gt(quarantine_left(), Q_MS - 1000);
    cr_expect_eq(stat_of("quarantines"), 1);
    int64_t deadline = test_now_ms() + Q_MS + 3000;
    dbt_acq_result r;
    while ((r = dbt_acquire(p, DBT_KIND_QUERY, &one, &a)) != DBT_ACQ_GRANTED &&
           test_now_ms() < deadline)
        usleep(50 * 1000);
    cr_expect_eq(r, DBT_ACQ_GRANTED, "no grant after the quarantine");
    if (r == DBT_ACQ_GRANTED)
        dbt_release(a);
}

/* The same, but the caller names that server as one whose whole state this one took over (a
 * cluster slot migrated: the adopt token): no quarantine, the era becomes this server's. */
Test(eras, an_adopted_state_is_not_quarantined, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, LEASE, TIMEOUT, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(r, "%s", err);
    cr_assert_eq(strlen(r->run_id), 40, "INFO gave no run_id");
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, cfg.key_prefix, "era"));
    cr_assert_eq(test_redis_int(&fx_redis, "SET " P "era %s", FOREIGN_RUN " 0 -"), -1000);
    dbt_acquire_call a = {.id = "00000000000000aa.1.1", .limit = 1, .who = "h 1 c"};
    dbt_script_call c;
    dbt_build_acquire(&c, &k, DBT_KIND_QUERY, &cfg, &a);
    c.args[DBT_ARG_ADOPT] = FOREIGN_RUN;
    dbt_acquire_reply reply;
    redisReply *rep = dbt_script_run(r, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_eq(reply.status, DBT_ACQUIRE_GRANTED);
    cr_expect_eq(reply.quarantine_ms, 0);
    char era[128];
    era_of(era, sizeof era);
    cr_expect_eq(strncmp(era, r->run_id, 40), 0, "the era is not this server's: %s", era);
    cr_expect_eq(stat_of("quarantines"), 0);
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}

/* On a server that runs on (no restart), the holders key deleted by hand: the holder's next
 * renewal finds its permit missing although it neither expired nor was given back, which proves
 * data was lost: a quarantine, and the permit re-asserted. A permit that really expired (reaped,
 * so remembered as gone) stays lost when its owner renews it late, and starts nothing.
 * On the code before eras the deleted holder was lost and a newcomer granted beside it. */
Test(eras, lost_holders_are_reasserted_expired_ones_are_not, .timeout = 60)
{
    dbt_client *hc = fx_client(LEASE, TIMEOUT, NULL), *nc = fx_client(LEASE, TIMEOUT, NULL);
    dbt_pool *hp = dbt_client_pool(hc, "era"), *np = dbt_client_pool(nc, "era");
    dbt_acquire_opts one = try_only(1);
    dbt_permit *a, *x = NULL;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &one, &a), DBT_ACQ_GRANTED);
    cr_assert_eq(test_redis_int(&fx_redis, "DEL " P "holders"), 1);
    const char *holder[] = {P "holders", dbt_permit_id(a)};
    cr_assert(test_wait_until(member_is, holder, 2 * RENEWAL_MS + 2000),
              "the deleted holder was not re-asserted");
    cr_expect_eq(stat_of("reasserted"), 1);
    cr_expect_eq(stat_of("quarantines"), 1);
    char era[128];
    era_of(era, sizeof era);
    cr_expect(strstr(era, " lost"), "era: %s", era);
    cr_expect_not(dbt_permit_lost(a), "the holder lost a permit it re-asserted");
    cr_expect_eq(dbt_acquire(np, DBT_KIND_QUERY, &one, &x), DBT_ACQ_TIMEOUT,
                 "a newcomer was granted beside the re-asserted holder");
    dbt_release(a);

    /* An id that expired and was reaped, renewed late by hand: lost, no quarantine. */
    int64_t wait_q = test_now_ms() + Q_MS + 2000;
    while (quarantine_left() > 0 && test_now_ms() < wait_q)
        usleep(50 * 1000);
    dbt_config cfg;
    test_config(&cfg, &fx_redis, "DBTHROTTLE_LEASE=300ms", TIMEOUT, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(r, "%s", err);
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, cfg.key_prefix, "era"));
    static const char id[] = "00000000000000bb.1.1";
    dbt_acquire_call ac = {.id = id, .limit = 1, .who = "h 1 c"};
    dbt_script_call c;
    dbt_build_acquire(&c, &k, DBT_KIND_QUERY, &cfg, &ac);
    dbt_acquire_reply areply;
    redisReply *rep = dbt_script_run(r, &c, dbt_parse_acquire, &areply, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_assert_eq(areply.status, DBT_ACQUIRE_GRANTED);
    usleep(500 * 1000); /* its 300 ms lease runs out (no renewal) */
    char *held[] = {(char *)id};
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {
        [DBT_KIND_QUERY] = {[DBT_RENEW_HELD] = {.ids = NULL, .n = 0}}};
    dbt_local_counts local[DBT_NKINDS] = {{0}, {0}};
    const char *args[DBT_RENEW_NARGS(1)];
    dbt_renew_reply rr;
    /* A renewal of nothing reaps it (and records it gone), then the late one names it. */
    dbt_build_renew(&c, &k, &cfg, lists, local, args);
    rep = dbt_script_run(r, &c, dbt_parse_renew, &rr, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 0, "not reaped");
    cr_expect_gt(test_redis_int(&fx_redis, "ZSCORE " P "gone %s", id), 0, "not remembered gone");
    lists[DBT_KIND_QUERY][DBT_RENEW_HELD] = (dbt_id_list){.ids = held, .n = 1, .cap = 1};
    long long quarantines = stat_of("quarantines");
    dbt_build_renew(&c, &k, &cfg, lists, local, args);
    rep = dbt_script_run(r, &c, dbt_parse_renew, &rr, err);
    cr_assert_not_null(rep, "%s", err);
    cr_expect_eq(rr.lost_holders.n, 1, "an expired permit was not reported lost");
    cr_expect_eq(rr.quarantine_ms[DBT_KIND_QUERY], 0, "an expired permit started a quarantine");
    freeReplyObject(rep);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 0, "an expired one came back");
    cr_expect_eq(stat_of("quarantines"), quarantines);
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}

/* Released ids are remembered in GONE for Q, so that a renewal racing a release is not taken for
 * data lost. A process may release thousands of permits between two renewals: each release forgets
 * the ids past their time as it adds its own, so GONE holds one window's ids, not every id a busy
 * pool ever released. Two bursts of releases, the first one's time past before the second: after
 * the second, GONE holds its ids only (on the code that trimmed GONE in renew.lua alone: both). */
static void release_burst(dbt_redis *r, const dbt_config *cfg, const dbt_keys *k, int from, int n)
{
    char err[DBT_ERRLEN], id[64];
    for (int i = from; i < from + n; i++) {
        snprintf(id, sizeof id, "00000000000000bb.%d.1", i);
        dbt_script_call c;
        dbt_build_release(&c, k, DBT_KIND_QUERY, cfg, id, -1);
        bool held;
        redisReply *rep = dbt_script_run(r, &c, dbt_parse_release, &held, err);
        cr_assert_not_null(rep, "%s", err);
        freeReplyObject(rep);
    }
}

Test(eras, released_ids_are_forgotten_as_fast_as_they_come, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, LEASE, TIMEOUT, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(r, "%s", err);
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, cfg.key_prefix, "era"));
    enum { BURST = 300 };
    release_burst(r, &cfg, &k, 0, BURST);
    cr_assert_eq(test_redis_int(&fx_redis, "ZCARD " P "gone"), BURST);
    /* Until the first burst's ids are past their time by Redis' clock. */
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *last = redisCommand(rc, "ZRANGE " P "gone -1 -1 WITHSCORES");
    cr_assert(last && last->type == REDIS_REPLY_ARRAY && last->elements == 2);
    long long forget = strtoll(last->element[1]->str, NULL, 10);
    freeReplyObject(last);
    for (;;) {
        redisReply *t = redisCommand(rc, "TIME");
        long long now = strtoll(t->element[0]->str, NULL, 10) * 1000 +
                        strtoll(t->element[1]->str, NULL, 10) / 1000;
        freeReplyObject(t);
        if (now > forget)
            break;
        usleep(50 * 1000);
    }
    redisFree(rc);
    release_burst(r, &cfg, &k, BURST, BURST);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "gone"), BURST,
                 "GONE still holds ids past their time");
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}

/* A caller whose INFO the ACL refuses cannot tell servers apart, but a quarantine another caller
 * started holds for it too: its acquire is not granted meanwhile. */
Test(eras, a_caller_without_info_respects_a_running_quarantine, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, LEASE, TIMEOUT, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(r, "%s", err);
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, cfg.key_prefix, "era"));
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *t = redisCommand(rc, "TIME");
    long long now =
        strtoll(t->element[0]->str, NULL, 10) * 1000 + strtoll(t->element[1]->str, NULL, 10) / 1000;
    freeReplyObject(t);
    char era[128];
    snprintf(era, sizeof era, "%s %lld changed", FOREIGN_RUN, now + 20000);
    redisReply *set = redisCommand(rc, "SET " P "era %s", era);
    cr_assert(set && set->type == REDIS_REPLY_STATUS);
    freeReplyObject(set);
    redisFree(rc);
    r->run_id[0] = '\0'; /* as when INFO was refused */
    dbt_acquire_call a = {
        .id = "00000000000000cc.1.1", .limit = 1, .try_only = true, .who = "h 1 c"};
    dbt_script_call c;
    dbt_build_acquire(&c, &k, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply reply;
    redisReply *rep = dbt_script_run(r, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_neq(reply.status, DBT_ACQUIRE_GRANTED, "granted in another caller's quarantine");
    cr_expect_gt(reply.quarantine_ms, 0);
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}

/* An acquire can reach Redis after the cancel its caller sent for it: the caller timed out on a
 * stalled or slow Redis, gave up, and sent the cancel it owed on another connection, and Redis,
 * once it runs again, serves the sockets in its own order (chaos seed 8: two places a pgbench had
 * given up on were granted on Redis' return and held two of three permits for a whole lease with
 * nothing running). The id is new to every acquire, so one already cancelled (or released) is
 * stale: it takes no permit and no place. On the code before, it was granted. */
Test(eras, an_acquire_landing_after_its_cancel_takes_nothing, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, LEASE, TIMEOUT, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(r, "%s", err);
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, cfg.key_prefix, "era"));
    static const char late[] = "00000000000000dd.1.1", next[] = "00000000000000dd.2.1";
    dbt_script_call c;
    dbt_build_cancel(&c, &k, DBT_KIND_QUERY, &cfg, late, true);
    dbt_cancel_outcome co;
    redisReply *rep = dbt_script_run(r, &c, dbt_parse_cancel, &co, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_eq(co, DBT_CANCEL_UNKNOWN);
    for (int try_only = 0; try_only < 2; try_only++) {
        dbt_acquire_call a = {.id = late, .limit = 1, .try_only = try_only, .who = "h 1 c"};
        dbt_build_acquire(&c, &k, DBT_KIND_QUERY, &cfg, &a);
        dbt_acquire_reply reply;
        rep = dbt_script_run(r, &c, dbt_parse_acquire, &reply, err);
        cr_assert_not_null(rep, "%s", err);
        freeReplyObject(rep);
        cr_expect_eq(reply.status, DBT_ACQUIRE_NOT_GRANTED, "a cancelled id was served (%d)",
                     (int)reply.status);
        cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 0,
                     "a cancelled id holds a permit");
        cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 0,
                     "a cancelled id holds a place");
    }
    /* the permit is there for the next caller */
    dbt_acquire_call b = {.id = next, .limit = 1, .try_only = true, .who = "h 1 c"};
    dbt_build_acquire(&c, &k, DBT_KIND_QUERY, &cfg, &b);
    dbt_acquire_reply reply;
    rep = dbt_script_run(r, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_eq(reply.status, DBT_ACQUIRE_GRANTED);
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}

/* Whether the late renewal has run: the permit it named was counted expired (or, on the code
 * before, started a quarantine). */
static bool late_renewal_ran(void *arg)
{
    (void)arg;
    return stat_of("expired") + stat_of("quarantines") > 0;
}

static bool renewed_since(void *arg)
{
    const char **km = arg;
    return test_redis_int(&fx_redis, "ZSCORE %s %s", km[0], km[1]) > strtoll(km[2], NULL, 10);
}

/* Redis stopped (SIGSTOP) for longer than the pool's keys live, under a holder renewing: the keys
 * (three leases, refreshed once half of that has passed, so as little as 1.5 leases left) expire
 * on Redis' clock, and the renewal the holder wrote into Redis' socket during the stop runs when
 * Redis resumes, naming a permit Redis lacks and does not remember as gone. The permit's lease
 * ran out during the stop (its holder is told so, as for any expired lease): an expiry, counted
 * as one, and no quarantine; a newcomer is granted at once. Chaos seed 10 (lease 2 s, a 4.1 s
 * stop): no grant for anyone for 2.2 s after. On the code before: a quarantine ("lost"), the
 * newcomer refused, and the holder's expired permit re-asserted for a lease. */
Test(eras, a_stall_longer_than_the_keys_live_is_an_expiry_not_a_loss, .timeout = 60)
{
    dbt_client *hc = fx_client("DBTHROTTLE_LEASE=1s", TIMEOUT, NULL);
    dbt_client *nc = fx_client("DBTHROTTLE_LEASE=1s", TIMEOUT, NULL);
    dbt_pool *hp = dbt_client_pool(hc, "era"), *np = dbt_client_pool(nc, "era");
    dbt_acquire_opts one = try_only(1);
    dbt_permit *a, *x = NULL;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &one, &a), DBT_ACQ_GRANTED);
    /* renewed once: the renewer's connection stays open, and carries its next renewal into the
     * stopped Redis' socket */
    char first[32];
    snprintf(first, sizeof first, "%lld",
             test_redis_int(&fx_redis, "ZSCORE " P "holders %s", dbt_permit_id(a)));
    const char *since[] = {P "holders", dbt_permit_id(a), first};
    cr_assert(test_wait_until(renewed_since, since, 3000), "the holder was not renewed");
    kill(fx_redis.pid, SIGSTOP);
    usleep(3500 * 1000); /* more than the keys' TTL (three leases) since their last refresh */
    kill(fx_redis.pid, SIGCONT);
    cr_assert(test_wait_until(late_renewal_ran, NULL, 5000),
              "no renewal sent during the stop ran after it (expired %lld, quarantines %lld)",
              stat_of("expired"), stat_of("quarantines"));
    char era[128];
    era_of(era, sizeof era);
    cr_expect_eq(stat_of("quarantines"), 0, "a stall was read as data lost (era: %s)", era);
    cr_expect_eq(quarantine_left(), 0, "in quarantine after a stall (era: %s)", era);
    cr_expect_eq(stat_of("expired"), 1, "the permit whose lease ran out was not counted expired");
    cr_expect_eq(dbt_acquire(np, DBT_KIND_QUERY, &one, &x), DBT_ACQ_GRANTED,
                 "a newcomer was not granted at once after the stall (era: %s)", era);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 1,
                 "the expired permit was re-asserted beside the newcomer's");
    cr_expect(dbt_permit_lost(a), "the holder was not told its lease ran out");
    dbt_release(x);
    dbt_release(a);
}

/* Redis stopped for longer than a lease but not for as long as its keys live, under a holder
 * renewing: the renewal written into the stopped Redis' socket runs when it resumes and names a
 * permit Redis still has, whose lease ran out during the stop (by Redis' clock, and so by its
 * process', which has given it up). It must not renew it: the permit is expired and reaped, and a
 * newcomer is granted at once. On the code before: the late renewal renewed it for a whole lease,
 * a permit nobody used (the newcomer refused, capacity lost for a lease after every such stop). */
Test(eras, a_late_renewal_does_not_revive_a_lease_that_ran_out, .timeout = 60)
{
    dbt_client *hc = fx_client("DBTHROTTLE_LEASE=1s", TIMEOUT, NULL);
    dbt_client *nc = fx_client("DBTHROTTLE_LEASE=1s", TIMEOUT, NULL);
    dbt_pool *hp = dbt_client_pool(hc, "era"), *np = dbt_client_pool(nc, "era");
    dbt_acquire_opts one = try_only(1);
    dbt_permit *a, *x = NULL;
    cr_assert_eq(dbt_acquire(hp, DBT_KIND_QUERY, &one, &a), DBT_ACQ_GRANTED);
    char first[32];
    snprintf(first, sizeof first, "%lld",
             test_redis_int(&fx_redis, "ZSCORE " P "holders %s", dbt_permit_id(a)));
    const char *since[] = {P "holders", dbt_permit_id(a), first};
    cr_assert(test_wait_until(renewed_since, since, 3000), "the holder was not renewed");
    kill(fx_redis.pid, SIGSTOP);
    /* more than a lease (1 s), less than the 1.5 s the keys have at least (TTL 3 leases, refreshed
     * at half); a longer stop is the test above, which passes here too */
    usleep(1400 * 1000);
    kill(fx_redis.pid, SIGCONT);
    /* the renewal sent during the stop runs first: it was in Redis' socket before this call */
    dbt_acq_result got = dbt_acquire(np, DBT_KIND_QUERY, &one, &x);
    long long held = test_redis_int(&fx_redis, "ZSCORE " P "holders %s", dbt_permit_id(a));
    cr_expect_eq(got, DBT_ACQ_GRANTED,
                 "a newcomer was not granted at once: the lapsed permit was renewed (its score "
                 "%lld, before the stop %s)",
                 held, first);
    cr_expect_eq(stat_of("quarantines"), 0, "a quarantine after a stop shorter than the keys live");
    cr_expect(dbt_permit_lost(a), "the holder was not told its lease ran out");
    if (x)
        dbt_release(x);
    dbt_release(a);
}

/* One renewal of held id, as the renewer sends it (its record, what it does, its local waits),
 * stating that its process believes in its lease until `until_us` (this process' clock; the
 * connection's reading of Redis' clock carries it to Redis'); 0: not said, as an older client. */
static redisReply *renew_stating(dbt_redis *r, const dbt_config *cfg, const dbt_keys *k,
                                 const char *id, int64_t until_us, dbt_renew_reply *rr, char *err)
{
    char *held[] = {(char *)id};
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {{{0}}};
    lists[DBT_KIND_QUERY][DBT_RENEW_HELD] = (dbt_id_list){.ids = held, .n = 1, .cap = 1};
    dbt_local_counts local[DBT_NKINDS] = {{0}, {0}};
    const char *args[DBT_RENEW_NARGS(1) + DBT_RENEW_RECORD_ARGS + 1 + DBT_NKINDS + 1];
    dbt_script_call c;
    dbt_build_renew(&c, k, cfg, lists, local, args);
    dbt_renew_add_record(&c, k, "00000000000000ee", "v1", 60000, false);
    char doing[DBT_DOING_LEN];
    dbt_format_doing('r', "", "h 1 c", -1, doing, sizeof doing);
    char *d[] = {doing};
    dbt_renew_add_doing(&c, d, 1);
    const char *waits[DBT_NKINDS] = {"", ""};
    dbt_renew_add_local_hist(&c, waits);
    if (until_us)
        dbt_renew_add_until(&c, until_us, NULL);
    return dbt_script_run(r, &c, dbt_parse_renew, rr, err);
}

/* The rule itself, call by call: a permit Redis lacks, deleted by hand, named by a renewal that
 * runs after the time its process said it may believe in its lease (a renewal delayed past it):
 * lost, counted expired, remembered gone, no quarantine. The same named by a renewal within its
 * lease (the control: keys deleted while holders' leases are valid), or by one that says nothing
 * (an older client): evidence of data lost, a quarantine, and the permit re-asserted. */
Test(eras, a_renewal_past_its_lease_proves_no_loss_one_within_it_does, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, LEASE, TIMEOUT, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(r, "%s", err);
    dbt_keys k;
    cr_assert(dbt_keys_init(&k, cfg.key_prefix, "era"));
    static const char *const ids[] = {"00000000000000ee.1.3", "00000000000000ee.2.3",
                                      "00000000000000ee.3.3"};
    for (int i = 0; i < 3; i++) {
        /* each case on its own: a quarantine the one before started is over */
        int64_t wait_q = test_now_ms() + Q_MS + 2000;
        while (quarantine_left() > 0 && test_now_ms() < wait_q)
            usleep(50 * 1000);
        dbt_acquire_call ac = {.id = ids[i], .limit = 3, .try_only = true, .who = "h 1 c"};
        dbt_script_call c;
        dbt_build_acquire(&c, &k, DBT_KIND_QUERY, &cfg, &ac);
        dbt_acquire_reply areply;
        redisReply *rep = dbt_script_run(r, &c, dbt_parse_acquire, &areply, err);
        cr_assert_not_null(rep, "%s", err);
        freeReplyObject(rep);
        cr_assert_eq(areply.status, DBT_ACQUIRE_GRANTED, "%s: %d", ids[i], (int)areply.status);
        cr_assert_eq(test_redis_int(&fx_redis, "ZREM " P "holders %s", ids[i]), 1);
        long long quarantines = stat_of("quarantines"), expired = stat_of("expired");
        /* past its lease by 2 s; within it for 2 s more; not said */
        int64_t until_us = i == 0 ? dbt_now_us() - 2000000 : i == 1 ? dbt_now_us() + 2000000 : 0;
        dbt_renew_reply rr;
        rep = renew_stating(r, &cfg, &k, ids[i], until_us, &rr, err);
        cr_assert_not_null(rep, "%s", err);
        if (i == 0) {
            cr_expect_eq(rr.lost_holders.n, 1, "a lease that ran out was not reported lost");
            cr_expect_eq(rr.quarantine_ms[DBT_KIND_QUERY], 0,
                         "a late renewal started a quarantine");
            cr_expect_eq(stat_of("quarantines"), quarantines);
            cr_expect_eq(stat_of("expired"), expired + 1);
            cr_expect_gt(test_redis_int(&fx_redis, "ZSCORE " P "gone %s", ids[i]), 0,
                         "not remembered gone");
            cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 0,
                         "a lease that ran out was re-asserted");
        } else {
            cr_expect_eq(rr.lost_holders.n, 0, "%s: a lost permit within its lease was dropped",
                         i == 1 ? "stated" : "not stated");
            cr_expect_gt(rr.quarantine_ms[DBT_KIND_QUERY], 0, "%s: data lost, no quarantine",
                         i == 1 ? "stated" : "not stated");
            cr_expect_eq(stat_of("quarantines"), quarantines + 1);
            cr_expect_gt(test_redis_int(&fx_redis, "ZSCORE " P "holders %s", ids[i]), 0,
                         "a permit lost within its lease was not re-asserted");
        }
        cr_expect_gt(rr.now_ms, 0, "no Redis clock in the reply");
        freeReplyObject(rep);
    }
    dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
}
