/* Shares of the limit between hosts (docs/design.md, "Shares"): with another host waiting, a host
 * at or below its share passes permits among its own waiters through its segment, and a host
 * above its share gives its releases back to Redis, which grants them to the oldest place of a
 * host below its share before the head. Driven through the real scripts (script_shares: the
 * pump's choice, the "s" push, the renewal's share) and through two clients of two "hosts" (two
 * share directories: two segments, two groups), judged from Redis' own keys: which ids hold,
 * which wait, what is on the wake lists. */
#include "hostshare_internal.h"
#include "pool.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define G    "0123456789abcdef"
#define H    "fedcba9876543210"
#define BASE "dbthrottle:{sh}:"
#define P    BASE "q:"
#define WAKE BASE "wake:"

/* ---- helpers over Redis' own keys ---- */

static bool zscore_exists(const char *key, const char *member)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "ZSCORE %s %s", key, member);
    cr_assert_not_null(r);
    bool there = r->type == REDIS_REPLY_STRING;
    freeReplyObject(r);
    redisFree(rc);
    return there;
}

/* The list's elements (ZRANGE 0 -1 or LRANGE 0 -1), joined by ' ' ("" when empty). */
static void range(const char *cmd, const char *key, char *out, size_t cap)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "%s %s 0 -1", cmd, key);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->elements; i++)
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", i ? " " : "",
                                r->element[i]->str);
    freeReplyObject(r);
    redisFree(rc);
}

/* ---- the scripts ---- */

static dbt_config cfg;
static dbt_redis *conn;
static dbt_keys keys;

static void script_start(void)
{
    fx_redis_start();
    char err[DBT_ERRLEN];
    test_config(&cfg, &fx_redis, NULL);
    conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "sh"));
}

static void script_stop(void)
{
    dbt_keys_free(&keys);
    if (conn)
        dbt_redis_free(conn);
    dbt_config_free(&cfg);
    fx_stop();
}

TestSuite(script_shares, .init = script_start, .fini = script_stop);

/* An acquire by a caller of configuration with (its lease, so its key TTL). */
static dbt_acquire_reply acq_as(const dbt_config *with, const char *id, int limit)
{
    dbt_acquire_call a = {.id = id, .limit = limit, .who = "host 1 c1"};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, with, &a);
    dbt_acquire_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "acquire %s: %s", id, err);
    freeReplyObject(rep);
    return reply;
}

static dbt_acquire_reply acq(const char *id, int limit)
{
    return acq_as(&cfg, id, limit);
}

static void rel(const char *id)
{
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id, -1);
    bool held = false;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_release, &held, err);
    cr_assert_not_null(rep, "release %s: %s", id, err);
    freeReplyObject(rep);
}

static dbt_renew_reply renew(char **held, int nh)
{
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {{{held, nh, nh}, {NULL, 0, 0}}};
    dbt_local_counts local[DBT_NKINDS] = {{0, 0, 0}, {0, 0, 0}};
    const char *args[DBT_RENEW_NARGS(8) + 8];
    cr_assert(nh <= 8);
    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, lists, local, args);
    dbt_renew_reply rr;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_renew, &rr, err);
    cr_assert_not_null(rep, "renew: %s", err);
    freeReplyObject(rep);
    return rr;
}

#define GA G "~00000000000000a1"
#define HB H "~00000000000000b1"

/* Host G holds the limit (2) and one more of its waiters queues (G alone: sole); then a waiter of
 * host H queues. Demands G 3, H 1: shares 1 and 1. A permit G gives back goes to H's place, not
 * to G's, which is the head; G, holding more than its new share, is told so on wake:G. */
Test(script_shares, a_permit_back_goes_to_a_host_below_its_share_before_the_head)
{
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.2", 2).status, DBT_ACQUIRE_GRANTED);
    dbt_acquire_reply g3 = acq(GA ".3.2", 2);
    cr_assert_eq(g3.status, DBT_ACQUIRE_QUEUED);
    dbt_acquire_reply h1 = acq(HB ".4.2", 2);
    cr_assert_eq(h1.status, DBT_ACQUIRE_QUEUED);

    char list[512], want[128];
    range("LRANGE", WAKE G, list, sizeof list);
    /* g3, the first waiter, recalls what G's processes keep (on the host's list too: lua's
     * K.recall); H's waiter ends G's sole state and G is told its share. */
    snprintf(want, sizeof want, "rq:%lld fq:%lld sq:1:%lld", g3.ticket, h1.ticket + 1,
             h1.ticket + 2);
    cr_expect_str_eq(list, want, "G's sole state ends, and G is told its share (1 of 2)");
    range("LRANGE", WAKE H, list, sizeof list);
    cr_expect_str_eq(list, "", "H holds nothing: nothing to tell");

    rel(GA ".1.2");
    cr_expect(zscore_exists(P "holders", HB ".4.2"), "H, below its share, is granted");
    cr_expect(zscore_exists(P "queue", GA ".3.2"), "G's place, the head, still waits");
    range("LRANGE", WAKE HB, list, sizeof list);
    cr_expect_str_eq(list, "gq:" HB ".4.2");

    /* G at its share now: its next release, if it went to Redis, goes to its own place */
    rel(GA ".2.2");
    cr_expect(zscore_exists(P "holders", GA ".3.2"));
}

/* The renewal tells the renewing host its share and what it holds; none in force while only it
 * waits. */
Test(script_shares, a_renewal_says_the_hosts_share_and_holding)
{
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".3.2", 2).status, DBT_ACQUIRE_QUEUED);
    char *held[] = {GA ".1.2", GA ".2.2"};
    dbt_renew_reply rr = renew(held, 2);
    cr_expect_eq(rr.share[DBT_KIND_QUERY], -1, "G alone waits: the sole rule, no share");
    cr_expect_eq(rr.held[DBT_KIND_QUERY], 2);
    cr_assert_eq(acq(HB ".4.2", 2).status, DBT_ACQUIRE_QUEUED);
    rr = renew(held, 2);
    cr_expect_eq(rr.share[DBT_KIND_QUERY], 1, "G's share of 2 beside H's");
    cr_expect_eq(rr.held[DBT_KIND_QUERY], 2);
}

/* A plain process (not sharing with its host) among the waiters keeps arrival order. */
Test(script_shares, a_plain_process_waiting_keeps_arrival_order)
{
    cr_assert_eq(acq(GA ".1.1", 1).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.1", 1).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq("00000000000000c1.3.1", 1).status, DBT_ACQUIRE_QUEUED);
    rel(GA ".1.1");
    cr_expect(zscore_exists(P "holders", GA ".2.1"), "the head, whatever the shares");
}

/* ---- two hosts' clients ---- */

enum { LIMIT = 2 };

typedef struct {
    dbt_pool *pool;
    dbt_permit *permit;
    int rc;
    int limit; /* 0: LIMIT */
} waiter;

static void *wait_for_permit(void *arg)
{
    waiter *w = arg;
    dbt_acquire_opts o = {.limit = w->limit ? w->limit : LIMIT, .wait_ms = 20000, .conn = "sh"};
    w->rc = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    return NULL;
}

static char dirs[2][32];

static void hosts_start(void)
{
    fx_redis_start();
    for (int i = 0; i < 2; i++) {
        snprintf(dirs[i], sizeof dirs[i], "/tmp/dbt-shares-XXXXXX");
        cr_assert(mkdtemp(dirs[i]));
    }
}

static void hosts_stop(void)
{
    fx_stop();
    for (int i = 0; i < 2; i++) {
        char rm[128];
        snprintf(rm, sizeof rm, "rm -rf %s", dirs[i]);
        if (system(rm) != 0)
            cr_log_warn("could not remove %s", dirs[i]);
    }
}

TestSuite(shares, .init = hosts_start, .fini = hosts_stop);

static dbt_pool *pool_on_host(int host)
{
    char dir_kv[160];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dirs[host]);
    /* a renewal every 2 s: a count a renewal left off by one is set right within that */
    dbt_client *c = fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, "DBTHROTTLE_LEASE=6s",
                              "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    cr_assert(c);
    return dbt_client_pool(c, "sh");
}

static dbt_permit *take_at(dbt_pool *p, dbt_kind kind, int limit)
{
    dbt_acquire_opts o = {.limit = limit, .wait_ms = 0, .conn = "sh"};
    dbt_permit *pm = NULL;
    cr_assert_eq(dbt_acquire(p, kind, &o, &pm), DBT_ACQ_GRANTED);
    return pm;
}

static dbt_permit *take(dbt_pool *p)
{
    return take_at(p, DBT_KIND_QUERY, LIMIT);
}

static void start_waiter_at(waiter *w, dbt_pool *p, pthread_t *t, int queued_after, int limit)
{
    w->pool = p;
    w->permit = NULL;
    w->rc = -1;
    w->limit = limit;
    cr_assert_eq(pthread_create(t, NULL, wait_for_permit, w), 0);
    zcard_is q = {&fx_redis, P "queue", queued_after};
    cr_assert(test_wait_until(test_zcard_is, &q, 10000), "never queued");
}

static void start_waiter(waiter *w, dbt_pool *p, pthread_t *t, int queued_after)
{
    start_waiter_at(w, p, t, queued_after, LIMIT);
}

/* The host's segment learned its share from the "s" its listener popped, and counts what the
 * host holds as Redis does (a renewal in flight across a grant counts it twice until the next
 * renewal: the safe side, which would send the release to Redis). Synchronisation only: what the
 * test judges is Redis' state after the release. */
typedef struct {
    dbt_pool *pool;
    uint64_t share1;
    int64_t held;
} share_known;

static bool share_is_known(void *arg)
{
    share_known *k = arg;
    pthread_mutex_lock(&k->pool->mu);
    dbt_share *sh = k->pool->share;
    bool known = false;
    if (sh && dbt_share_lock(sh) == 0) {
        const dbt_share_view *v = &dbt_share_segment(sh)->share[DBT_KIND_QUERY];
        known = v->share1 == k->share1 && v->held == k->held;
        dbt_share_unlock(sh);
    }
    pthread_mutex_unlock(&k->pool->mu);
    return known;
}

static void wait_share_known(dbt_pool *p, int64_t share, int64_t held)
{
    share_known k = {p, (uint64_t)share + 1, held};
    cr_assert(test_wait_until(share_is_known, &k, 10000),
              "the host never learned its share of %lld holding %lld", (long long)share,
              (long long)held);
}

/* The same, whatever the host counts itself holding (held -1). */
static bool share_alone_is_known(void *arg)
{
    share_known *k = arg;
    pthread_mutex_lock(&k->pool->mu);
    dbt_share *sh = k->pool->share;
    bool known = false;
    if (sh && dbt_share_lock(sh) == 0) {
        known = dbt_share_segment(sh)->share[DBT_KIND_QUERY].share1 == k->share1;
        dbt_share_unlock(sh);
    }
    pthread_mutex_unlock(&k->pool->mu);
    return known;
}

/* A process' record in Redis was written again (a renewal of it ran) since `since` (its score:
 * when the record expires, by Redis' clock). */
typedef struct {
    const char *cid;
    long long since;
} record_renewed;

static long long record_score(const char *cid)
{
    return test_redis_int(&fx_redis, "ZSCORE " BASE "procs %s", cid);
}

static bool record_is_renewed(void *arg)
{
    record_renewed *r = arg;
    return record_score(r->cid) > r->since;
}

/* Hosts A and B hold one permit each of 2 and each has a waiter: shares 1 and 1. A's release
 * goes to A's waiter through A's segment: its id stays held in Redis (no release.lua, no grant),
 * while B's waiter waits on. Before shares, with another host waiting every release went to
 * Redis: A's id left the holders and A's place was granted by Redis. */
Test(shares, a_host_at_its_share_passes_locally_while_another_host_waits, .timeout = 60)
{
    dbt_pool *a = pool_on_host(0), *b = pool_on_host(1);
    dbt_permit *a1 = take(a), *b1 = take(b);
    waiter wa, wb;
    pthread_t ta, tb;
    start_waiter(&wa, a, &ta, 1);
    start_waiter(&wb, b, &tb, 2);
    wait_share_known(a, 1, 1);
    char a1_id[DBT_ID_MAX], b1_id[DBT_ID_MAX], a_place[DBT_ID_MAX], b_place[DBT_ID_MAX];
    snprintf(a1_id, sizeof a1_id, "%s", a1->id);
    snprintf(b1_id, sizeof b1_id, "%s", b1->id);
    char q[512];
    range("ZRANGE", P "queue", q, sizeof q);
    cr_assert_eq(sscanf(q, "%127s %127s", a_place, b_place), 2, "queue: %s", q);

    dbt_release(a1);
    pthread_join(ta, NULL);
    cr_assert_eq(wa.rc, DBT_ACQ_GRANTED);
    cr_expect(zscore_exists(P "holders", a1_id),
              "A's permit went back to Redis: A at its share did not pass it locally");
    /* B's waiter still waits: its place is queued, not granted (the holders are A's passed
     * permit and B's own, nothing else). */
    char held[512];
    range("ZRANGE", P "holders", held, sizeof held);
    range("ZRANGE", P "queue", q, sizeof q);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", P "holders"), LIMIT, "holders: %s", held);
    cr_expect(zscore_exists(P "holders", b1_id) && !zscore_exists(P "holders", b_place) &&
                  zscore_exists(P "queue", b_place),
              "B's waiter still waits (its place %s; holders: %s; queue: %s)", b_place, held, q);

    dbt_release(wa.permit);
    dbt_release(b1);
    pthread_join(tb, NULL);
    cr_assert_eq(wb.rc, DBT_ACQ_GRANTED);
    dbt_release(wb.permit);
}

/* Host A holds both permits and has a waiter (sole); then B's waiter queues: shares 1 and 1, A
 * holds 2. A's first release goes back to Redis, which grants B's place (below its share)
 * although A's place is the head; A's second release, at its share, goes to A's waiter locally.
 * Before shares: A's release went to the head, A's own place, and B waited on. */
Test(shares, a_host_above_its_share_gives_back_and_the_other_host_gets_its_share, .timeout = 60)
{
    dbt_pool *a = pool_on_host(0), *b = pool_on_host(1);
    dbt_permit *a1 = take(a), *a2 = take(a);
    waiter wa, wb;
    pthread_t ta, tb;
    start_waiter(&wa, a, &ta, 1);
    start_waiter(&wb, b, &tb, 2);
    wait_share_known(a, 1, 2);
    char queue[512];
    range("ZRANGE", P "queue", queue, sizeof queue);
    char a_place[DBT_ID_MAX], b_place[DBT_ID_MAX];
    cr_assert_eq(sscanf(queue, "%127s %127s", a_place, b_place), 2, "queue: %s", queue);

    dbt_release(a1);
    pthread_join(tb, NULL);
    char held[512];
    range("ZRANGE", P "holders", held, sizeof held);
    range("ZRANGE", P "queue", queue, sizeof queue);
    cr_assert_eq(wb.rc, DBT_ACQ_GRANTED, "holders: %s; queue: %s; B's place %s", held, queue,
                 b_place);
    cr_expect(zscore_exists(P "holders", b_place), "B's place was not granted by Redis");
    cr_expect(zscore_exists(P "queue", a_place), "A's place, the head, waits on");

    char a2_id[DBT_ID_MAX];
    snprintf(a2_id, sizeof a2_id, "%s", a2->id);
    dbt_release(a2);
    pthread_join(ta, NULL);
    cr_assert_eq(wa.rc, DBT_ACQ_GRANTED);
    cr_expect(zscore_exists(P "holders", a2_id), "A at its share did not pass its permit locally");
    dbt_release(wa.permit);
    dbt_release(wb.permit);
}

/* The operator's drain ends passing within a share (invariant 5): every host group holding is
 * told a share of 0 on its list. */
Test(script_shares, a_drain_tells_every_holding_host_a_share_of_0)
{
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(HB ".2.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".3.2", 2).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(HB ".4.2", 2).status, DBT_ACQUIRE_QUEUED);
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *r = redisCommand(rc, "DEL " WAKE G " " WAKE H);
    freeReplyObject(r);
    redisFree(rc);
    dbt_script_call c;
    dbt_build_admin(&c, &keys, DBT_KIND_QUERY, &cfg, DBT_ADMIN_DRAIN, NULL);
    dbt_admin_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_admin, &reply, err);
    cr_assert_not_null(rep, "admin: %s", err);
    freeReplyObject(rep);
    /* The drain's recall of kept permits (K.recall_kept, to each host's list too), then the
     * share of 0, each with its own ticket. */
    char list[512];
    long long recall, share;
    range("LRANGE", WAKE G, list, sizeof list);
    cr_expect(sscanf(list, "rq:%lld sq:0:%lld", &recall, &share) == 2 && share == recall + 1,
              "wake:G: %s", list);
    range("LRANGE", WAKE H, list, sizeof list);
    cr_expect(sscanf(list, "rq:%lld sq:0:%lld", &recall, &share) == 2 && share == recall + 1,
              "wake:H: %s", list);
}

/* A drain tells every holding host a share of 0, and must stay in force: a waiter that queues
 * while the pool is drained must not tell a holding host a share again (a host at or below it
 * would pass its permits among its own processes in a drained pool), nor may a renewal say one. */
Test(script_shares, a_drain_is_not_undone_by_the_next_waiters_share)
{
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".3.2", 2).status, DBT_ACQUIRE_QUEUED);
    dbt_script_call c;
    dbt_build_admin(&c, &keys, DBT_KIND_QUERY, &cfg, DBT_ADMIN_DRAIN, NULL);
    dbt_admin_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_admin, &reply, err);
    cr_assert_not_null(rep, "admin: %s", err);
    freeReplyObject(rep);
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    freeReplyObject(redisCommand(rc, "DEL " WAKE G " " WAKE H));
    redisFree(rc);

    cr_assert_eq(acq(HB ".4.2", 2).status, DBT_ACQUIRE_QUEUED);
    char list[512];
    range("LRANGE", WAKE G, list, sizeof list);
    cr_expect(strstr(list, "sq:") == NULL, "no share told while drained; wake:G: %s", list);
    char *held[] = {GA ".1.2", GA ".2.2"};
    cr_expect_eq(renew(held, 2).share[DBT_KIND_QUERY], -1, "no share in force while drained");
}

/* More waiting hosts than permits: a share of 0 would starve its host while the others pass
 * theirs locally for good, so no share is in force: the head is granted, and nobody is told. */
Test(script_shares, more_hosts_waiting_than_permits_keep_arrival_order)
{
#define HC "00112233445566ff~00000000000000c1"
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(HC ".3.2", 2).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(HB ".4.2", 2).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(GA ".5.2", 2).status, DBT_ACQUIRE_QUEUED);
    char list[512];
    range("LRANGE", WAKE G, list, sizeof list);
    cr_expect(strstr(list, "sq:") == NULL, "wake:G: %s", list);
    char *held[] = {GA ".2.2"};
    cr_expect_eq(renew(held, 1).share[DBT_KIND_QUERY], -1);
    rel(GA ".1.2");
    cr_expect(zscore_exists(P "holders", HC ".3.2"), "the head");
#undef HC
}

/* The counts' keys are new keys like the pool's others: they get the pool's floor TTL (SEEN's
 * remaining one when longer than the caller's), not the caller's alone, or a caller of a short
 * lease would make them expire under the holders and waiters of one of a long lease (the count
 * then starts over from nothing while they still hold and wait). */
Test(script_shares, the_counts_keys_live_as_long_as_the_pools_others)
{
    dbt_config longer;
    test_config(&longer, &fx_redis, "DBTHROTTLE_LEASE=10m", NULL);
    cr_assert_eq(acq_as(&longer, "00000000000000c1.1.1", 1).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.1", 1).status, DBT_ACQUIRE_QUEUED);
    rel("00000000000000c1.1.1"); /* G's place is granted: G's count of holders is new */
    cr_assert(zscore_exists(P "holders", GA ".2.1"));
    long long seen = test_redis_int(&fx_redis, "PTTL " P "limit_seen");
    cr_assert_gt(seen, dbt_key_ttl_ms(&cfg), "SEEN's TTL is the longer caller's");
    long long h = test_redis_int(&fx_redis, "PTTL " P "owners:h");
    cr_expect_geq(h, seen - 1000, "owners:h lives %lld ms, SEEN %lld ms", h, seen);
    cr_assert_eq(acq(HB ".3.1", 1).status, DBT_ACQUIRE_QUEUED); /* the count of waiters is new */
    long long w = test_redis_int(&fx_redis, "PTTL " P "owners:w");
    cr_expect_geq(w, seen - 1000, "owners:w lives %lld ms, SEEN %lld ms", w, seen);
    dbt_config_free(&longer);
}

/* G and H hold one permit each of 2 and each has a waiter: both are told a share of 1. */
static void two_hosts_told_a_share(void)
{
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(HB ".2.2", 2).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".3.2", 2).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(HB ".4.2", 2).status, DBT_ACQUIRE_QUEUED);
    char list[512];
    range("LRANGE", WAKE H, list, sizeof list);
    cr_assert(strstr(list, "sq:1:"), "H was told its share; wake:H: %s", list);
    range("LRANGE", WAKE G, list, sizeof list);
    cr_assert(strstr(list, "sq:1:"), "G was told its share; wake:G: %s", list);
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    freeReplyObject(redisCommand(rc, "DEL " WAKE G " " WAKE H));
    redisFree(rc);
}

/* Every host told a share is told "none" (-1) on its list, with a ticket, and the shares told are
 * forgotten: without it, each would go on passing within the share told until its next renewal
 * (lease/3) while shares are not in force. */
static void every_host_told_none(const char *why)
{
    char list[512];
    range("LRANGE", WAKE G, list, sizeof list);
    cr_expect(strncmp(list, "sq:-1:", 6) == 0, "%s: wake:G: \"%s\"", why, list);
    range("LRANGE", WAKE H, list, sizeof list);
    cr_expect(strncmp(list, "sq:-1:", 6) == 0, "%s: wake:H: \"%s\"", why, list);
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS " P "owners:s"), 0, "%s: owners:s", why);
}

Test(script_shares, a_plain_process_waiting_ends_the_shares_told)
{
    two_hosts_told_a_share();
    cr_assert_eq(acq("00000000000000c1.5.2", 2).status, DBT_ACQUIRE_QUEUED);
    every_host_told_none("a plain process waits");
}

Test(script_shares, more_hosts_waiting_than_permits_ends_the_shares_told)
{
    two_hosts_told_a_share();
    cr_assert_eq(acq("00112233445566ff~00000000000000c1.5.2", 2).status, DBT_ACQUIRE_QUEUED);
    every_host_told_none("three hosts wait for 2 permits");
}

Test(script_shares, the_queue_emptied_ends_the_shares_told)
{
    two_hosts_told_a_share();
    dbt_script_call c;
    char err[DBT_ERRLEN];
    dbt_cancel_outcome outcome;
    for (int i = 0; i < 2; i++) {
        dbt_build_cancel(&c, &keys, DBT_KIND_QUERY, &cfg, i ? HB ".4.2" : GA ".3.2", true);
        redisReply *rep = dbt_script_run(conn, &c, dbt_parse_cancel, &outcome, err);
        cr_assert_not_null(rep, "cancel: %s", err);
        freeReplyObject(rep);
    }
    cr_assert_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 0);
    every_host_told_none("the queue emptied");
}

/* Host A holds all 4 permits and has a waiter; host B's waiter queues: shares A 3, B 1, A told
 * its 3 (it holds 4, above it). Then another process of host A, which holds and waits nothing of
 * the query kind (a connection permit only), renews: its reply says no share and no holding of
 * queries, which are not A's. Applied to the host's view, it wiped the share and the count A's
 * own grants set (held 0); B's next waiters brought A's share down to 2 by a push, which sets the
 * share and leaves the count: A, holding 4, passed its release to its own waiter while B, below
 * its share, waited. Now the renewal of a process that names no id of the group of a kind leaves
 * the kind's view alone: A's release goes to Redis, which grants B. */
Test(shares, a_renewal_naming_no_id_of_the_group_leaves_its_share_alone, .timeout = 60)
{
    enum { L = 4 };
    dbt_pool *a = pool_on_host(0), *b = pool_on_host(1), *a_other = pool_on_host(0);
    dbt_permit *held[L];
    for (int i = 0; i < L; i++)
        held[i] = take_at(a, DBT_KIND_QUERY, L);
    waiter wa, wb[3];
    pthread_t ta, tb[3];
    start_waiter_at(&wa, a, &ta, 1, L);
    start_waiter_at(&wb[0], b, &tb[0], 2, L);
    wait_share_known(a, 3, L);

    /* the other process of A: a connection permit, then two renewals of it after the one its
     * start made (each sent after the one before was applied) */
    dbt_permit *conn_permit = take_at(a_other, DBT_KIND_CONN, 10);
    record_renewed rr = {a_other->client->cid, record_score(a_other->client->cid)};
    for (int i = 0; i < 3; i++) {
        dbt_pool_renew_now(a_other);
        cr_assert(test_wait_until(record_is_renewed, &rr, 10000),
                  "no renewal of the other process");
        rr.since = record_score(rr.cid);
    }

    start_waiter_at(&wb[1], b, &tb[1], 3, L);
    start_waiter_at(&wb[2], b, &tb[2], 4, L);
    share_known k = {a, 3, -1}; /* A's share is 2 now */
    cr_assert(test_wait_until(share_alone_is_known, &k, 10000), "A never learned its share of 2");
    char a1_id[DBT_ID_MAX], places[512];
    snprintf(a1_id, sizeof a1_id, "%s", held[0]->id);
    range("ZRANGE", P "queue", places, sizeof places);

    dbt_release(held[0]);
    zcard_is granted = {&fx_redis, P "queue", 3};
    bool to_redis = test_wait_until(test_zcard_is, &granted, 10000);
    char h[1024];
    range("ZRANGE", P "holders", h, sizeof h);
    cr_expect(to_redis && !zscore_exists(P "holders", a1_id),
              "A, holding 4 of a share of 2, passed its release locally (holders: %s; the places "
              "were: %s)",
              h, places);
    cr_expect(strstr(h, b->group) != NULL, "B's place was not granted (holders: %s)", h);

    for (int i = 1; i < L; i++)
        dbt_release(held[i]);
    pthread_join(ta, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(tb[i], NULL);
    cr_expect_eq(wa.rc, DBT_ACQ_GRANTED);
    if (wa.permit)
        dbt_release(wa.permit);
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(wb[i].rc, DBT_ACQ_GRANTED);
        if (wb[i].permit)
            dbt_release(wb[i].permit);
    }
    dbt_release(conn_permit);
}

/* A process that held a permit under its plain cid before it attached to its host's segment
 * names that id first: the renewal's share and holding are still its group's (the first id it
 * names with a host group), not none's. */
Test(script_shares, a_renewal_says_the_share_of_the_first_grouped_id_it_names)
{
    cr_assert_eq(acq("00000000000000a1.1.3", 3).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.3", 3).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".3.3", 3).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".4.3", 3).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(HB ".5.3", 3).status, DBT_ACQUIRE_QUEUED);
    char *held[] = {"00000000000000a1.1.3", GA ".2.3", GA ".3.3"};
    dbt_renew_reply rr = renew(held, 3);
    /* of the 2 the plain permit leaves (it does not wait): 1 each, the tie to H holding less */
    cr_expect_eq(rr.share[DBT_KIND_QUERY], 1, "G's share of 2 beside H's (demands 3 and 1)");
    cr_expect_eq(rr.held[DBT_KIND_QUERY], 2);
}

/* Units held by an owner that does not wait are not the waiting owners' to share. Host C holds 2
 * of 4 and waits for nothing; G holds 2 and waits for 1 more, H waits for 1. Shared as if all 4
 * were theirs, G's share was 3 and H's 1 (4 of the 2 C leaves them): G, below its 3, passed its
 * permits among its processes, and a permit G gave back went to G's place, the head, below its
 * share too; H got one only when C gave one back, which a host holding long never does. Shares
 * are of what the non-waiting owners leave (2): G 1, H 1, and G's permit back goes to H. */
Test(script_shares, units_held_by_owners_that_do_not_wait_are_not_shared)
{
#define HC "00112233445566ff~00000000000000c1"
    cr_assert_eq(acq(HC ".1.4", 4).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(HC ".2.4", 4).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".3.4", 4).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".4.4", 4).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".5.4", 4).status, DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acq(HB ".6.4", 4).status, DBT_ACQUIRE_QUEUED);
    char list[512];
    range("LRANGE", WAKE G, list, sizeof list);
    cr_expect(strstr(list, "sq:1:") != NULL, "G's share is 1 of the 2 C leaves; wake:G: %s", list);
    char *held[] = {GA ".3.4", GA ".4.4"};
    cr_expect_eq(renew(held, 2).share[DBT_KIND_QUERY], 1,
                 "G's share, with H's 1, is what C leaves");
    rel(GA ".3.4");
    cr_expect(zscore_exists(P "holders", HB ".6.4"), "H, below its share, is granted G's permit");
    cr_expect(zscore_exists(P "queue", GA ".5.4"), "G, at its share, waits on");
#undef HC
}

/* A count of holders left behind while nobody holds (an older client's script, a path that did not
 * count) starts over at the next refresh of the pool's keys (touch), not at each release. */
Test(script_shares, a_count_of_holders_left_while_nobody_holds_starts_over)
{
    cr_assert_eq(acq(GA ".1.2", 2).status, DBT_ACQUIRE_GRANTED);
    rel(GA ".1.2");
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    freeReplyObject(redisCommand(rc, "ZADD " P "owners:h 3 ~" H));
    /* the keys are due for their refresh (SEEN's TTL below half of theirs) */
    freeReplyObject(redisCommand(rc, "PEXPIRE " P "limit_seen 1000"));
    redisFree(rc);
    rel(GA ".1.2"); /* a release of nothing held: its call refreshes the keys */
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS " P "owners:h"), 0,
                 "H's count of 3 stayed while nobody holds");
}

/* Counts of holders that drifted while permits are held (a client of an older version gives back
 * a grouped permit without counting it; a path that does not count) are recounted from the
 * holders at the next refresh of the pool's keys: a host counted above what it holds would be
 * told to give back what it may keep, and a phantom holder would take a share of what is left. */
Test(script_shares, counts_of_holders_that_drifted_are_recounted_from_the_holders)
{
    cr_assert_eq(acq(GA ".1.4", 4).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq(GA ".2.4", 4).status, DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acq("00000000000000c1.3.4", 4).status, DBT_ACQUIRE_GRANTED);
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    freeReplyObject(redisCommand(rc, "ZINCRBY " P "owners:h 3 ~" G));
    freeReplyObject(redisCommand(rc, "ZADD " P "owners:h 5 ~" H));
    freeReplyObject(redisCommand(rc, "PEXPIRE " P "limit_seen 1000"));
    redisFree(rc);
    rel("00000000000000c1.3.4"); /* its call refreshes the keys */
    char counts[256];
    range("ZRANGE", P "owners:h", counts, sizeof counts);
    cr_expect_str_eq(counts, "~" G, "the groups counted");
    cr_expect_eq(test_redis_int(&fx_redis, "ZSCORE " P "owners:h ~" G), 2, "G holds 2");
    long long ttl = test_redis_int(&fx_redis, "PTTL " P "owners:h");
    cr_expect(ttl > 0, "owners:h has no TTL (%lld)", ttl);
}

/* What host A counts itself holding (its segment's view), or -1 when it cannot be read. */
static int64_t host_held(dbt_pool *p)
{
    int64_t held = -1;
    pthread_mutex_lock(&p->mu);
    dbt_share *sh = p->share;
    if (sh && dbt_share_lock(sh) == 0) {
        held = dbt_share_segment(sh)->share[DBT_KIND_QUERY].held;
        dbt_share_unlock(sh);
    }
    pthread_mutex_unlock(&p->mu);
    return held;
}

typedef struct {
    dbt_pool *pool;
    int64_t held;
} held_is;

static bool host_held_is(void *arg)
{
    held_is *h = arg;
    return host_held(h->pool) == h->held;
}

/* Host A keeps a permit idle (kept permits on: it waits on the host's shelf); host B's waiter
 * queues, Redis recalls the kept permit, A gives it back from the shelf, and B is granted. A holds
 * nothing now, and counts so at once: before, the return of a kept permit was not counted, and A
 * counted itself holding it until its next renewal (here 10 s away): a saturated host that
 * believed itself above its share gave every permit back to Redis
 * (tests/faults/hosts_pass_within_their_shares). */
Test(shares, a_kept_permit_given_back_is_counted_at_once, .timeout = 60)
{
    char dir_kv[160];
    snprintf(dir_kv, sizeof dir_kv, "DBTHROTTLE_SHARE_DIR=%s", dirs[0]);
    dbt_client *ca = fx_client("DBTHROTTLE_HOST_SHARE=on", dir_kv, "DBTHROTTLE_LEASE=30s",
                               "DBTHROTTLE_CACHE_PERMITS=on", "DBTHROTTLE_CACHE_IDLE=1m", NULL);
    cr_assert(ca);
    dbt_pool *a = dbt_client_pool(ca, "sh"), *b = pool_on_host(1);
    dbt_permit *pa = take(a);
    char pa_id[DBT_ID_MAX];
    snprintf(pa_id, sizeof pa_id, "%s", pa->id);
    cr_assert(dbt_permit_park(pa), "A's permit was not kept"); /* still held in Redis */
    cr_assert(zscore_exists(P "holders", pa_id));
    held_is one = {a, 1};
    cr_assert(test_wait_until(host_held_is, &one, 5000), "A counts %lld held, not 1",
              (long long)host_held(a));
    dbt_permit *b1 = take(b); /* the limit (2) is reached: A's kept one and B's */
    /* (it queues, and is granted within a few round trips: not waited for as queued) */
    waiter wb = {.pool = b, .rc = -1};
    pthread_t tb;
    cr_assert_eq(pthread_create(&tb, NULL, wait_for_permit, &wb), 0);
    pthread_join(tb, NULL);
    cr_assert_eq(wb.rc, DBT_ACQ_GRANTED);
    cr_expect_not(zscore_exists(P "holders", pa_id), "A's kept permit is still held in Redis");
    held_is none = {a, 0};
    cr_expect(test_wait_until(host_held_is, &none, 1000),
              "A gave its kept permit back but counts %lld held", (long long)host_held(a));
    cr_expect_not(dbt_permit_unpark(&pa), "A still believes it keeps the recalled permit");
    dbt_release(wb.permit);
    dbt_release(b1);
}
