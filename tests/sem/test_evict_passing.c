/* An eviction while the permit passes between the processes of a host (host-level sharing): the
 * giver's renewal and the receiver's may both name the evicted id. Each is told it was evicted,
 * and neither takes the id's absence for data lost: no re-assertion, no quarantine. Driven through
 * the real scripts (admin.lua's evict, renew.lua from two processes), judged from Redis' keys. */
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define G    "0123456789abcdef"
#define BASE "dbthrottle:{ep}:"
#define P    BASE "q:"
#define ID   G "~00000000000000a1.1.1"

static dbt_config cfg;
static dbt_redis *conn;
static dbt_keys keys;

static void start(void)
{
    fx_redis_start();
    char err[DBT_ERRLEN];
    test_config(&cfg, &fx_redis, NULL);
    conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "ep"));
}

static void stop(void)
{
    dbt_keys_free(&keys);
    if (conn)
        dbt_redis_free(conn);
    dbt_config_free(&cfg);
    fx_stop();
}

TestSuite(evict_passing, .init = start, .fini = stop);

static void evict(dbt_admin_op op, const char *id)
{
    dbt_script_call c;
    dbt_build_admin(&c, &keys, DBT_KIND_QUERY, &cfg, op, id);
    dbt_admin_reply a;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_admin, &a, err);
    cr_assert_not_null(rep, "evict: %s", err);
    freeReplyObject(rep);
    cr_assert(a.evicted, "%s was not held", id);
}

/* A renewal by process cid of the one query permit id; what it answers of it: "e:ID", "ID" (lost)
 * or "" (renewed or re-asserted), and the count re-asserted. */
static void renew_one(const char *cid, const char *id, char *lost, size_t cap, long long *back)
{
    char *held[] = {(char *)id};
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {{{held, 1, 1}, {NULL, 0, 0}}};
    dbt_local_counts local[DBT_NKINDS] = {{0, 0, 0}, {0, 0, 0}};
    const char *args[DBT_RENEW_NARGS(1) + DBT_RENEW_RECORD_ARGS + 8];
    dbt_script_call c;
    dbt_build_renew(&c, &keys, &cfg, lists, local, args);
    dbt_renew_add_record(&c, &keys, cid, "v1\thostA", 60000, false);
    dbt_renew_reply rr;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_renew, &rr, err);
    cr_assert_not_null(rep, "renew: %s", err);
    lost[0] = '\0';
    if (rr.lost_holders.n == 1)
        snprintf(lost, cap, "%s", rr.lost_holders.items[0]->str);
    *back = rr.reasserted[DBT_KIND_QUERY];
    freeReplyObject(rep);
}

/* Acquires ID for process a1 of hostA. */
static void acquire_id(void)
{
    dbt_acquire_call a = {.id = ID, .limit = 2, .who = "hostA 1 c1"};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply ar;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &ar, err);
    cr_assert_not_null(rep, "acquire: %s", err);
    freeReplyObject(rep);
    cr_assert_eq(ar.status, DBT_ACQUIRE_GRANTED);
}

static void evicted_then_both_renew(dbt_admin_op op, const char *want)
{
    acquire_id();
    evict(op, ID);
    char lost[256];
    long long back = 0;
    /* The giver renews it once more (it passed it on after its renewal was built). */
    renew_one(G "~00000000000000a1", ID, lost, sizeof lost, &back);
    cr_expect_str_eq(lost, want, "the giver's renewal");
    cr_expect_eq(back, 0);
    /* The receiver, another process of the host, renews it as its own now. */
    renew_one(G "~00000000000000b1", ID, lost, sizeof lost, &back);
    cr_expect_str_eq(lost, want, "the receiver's renewal is told of the eviction too");
    cr_expect_eq(back, 0, "the receiver's renewal re-asserted the evicted permit");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 0,
                 "the evicted id is held again");
    long long q = test_redis_int(&fx_redis, "HGET " P "stats quarantines");
    cr_expect_leq(q, 0, "%lld quarantine(s)", q);
    char *era = NULL;
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *e = redisCommand(rc, "GET " P "era");
    if (e && e->type == REDIS_REPLY_STRING)
        era = strdup(e->str);
    freeReplyObject(e);
    redisFree(rc);
    cr_expect(era == NULL || strstr(era, "lost") == NULL, "the era says %s", era);
    free(era);
}

Test(evict_passing, both_renewals_of_an_evicted_permit_are_told_and_nothing_is_quarantined)
{
    evicted_then_both_renew(DBT_ADMIN_EVICT, "e:" ID);
}

Test(evict_passing, an_evict_cancel_reaches_the_receiver_too)
{
    evicted_then_both_renew(DBT_ADMIN_EVICT_CANCEL, "x:" ID);
}

/* The command that evicts has its own lease, the default 10 s, or here the shortest (200 ms): the
 * holders' may be longer (their own, or the pool's live one), and their renewals come a third of
 * theirs apart. The mark must outlive the longest lease, not the command's: on the old scripts
 * it went with the set's TTL (2 of the command's leases + Q, 2.5 s here), and a renewal after it
 * took the evicted id for data lost, re-asserted it beside the unit's next holder and quarantined
 * the pool. */
Test(evict_passing, the_mark_outlives_the_commands_own_lease, .timeout = 30)
{
    acquire_id();
    int64_t own = cfg.lease_ms;
    cfg.lease_ms = 200; /* the command's */
    evict(DBT_ADMIN_EVICT, ID);
    cfg.lease_ms = own; /* the holders' renewals: 10 s */
    char lost[256];
    long long back = 0;
    renew_one(G "~00000000000000a1", ID, lost, sizeof lost, &back);
    cr_expect_str_eq(lost, "e:" ID, "the first renewal after the eviction");
    usleep(3000000); /* past 2 x 200 ms + Q: a renewal of a 10 s lease comes 3.3 s apart */
    renew_one(G "~00000000000000b1", ID, lost, sizeof lost, &back);
    cr_expect_str_eq(lost, "e:" ID, "a renewal 3 s later is told of the eviction too");
    cr_expect_eq(back, 0, "the renewal re-asserted the evicted permit");
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 0,
                 "the evicted id is held again");
}
