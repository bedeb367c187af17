/* Shares of the limit between hosts (docs/design.md, "Shares"), in the scripts: a permit that goes
 * back to Redis is granted to the oldest place of a host group below its share before the head; a
 * host group whose share changed is told "s<kind>:<share>:<ticket>" on wake:G; the renewal says
 * the renewing host's share and holding; a drain tells every holding host a share of 0; a plain
 * process among the waiters keeps arrival order. Driven through the real scripts as the library
 * builds them, judged from Redis' own keys (holders, queue, the wake lists). */
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
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

static dbt_acquire_reply acq(const char *id, int limit)
{
    dbt_acquire_call a = {.id = id, .limit = limit, .who = "host 1 c1"};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply reply;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &reply, err);
    cr_assert_not_null(rep, "acquire %s: %s", id, err);
    freeReplyObject(rep);
    return reply;
}

static void rel(const char *id)
{
    dbt_script_call c;
    dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id);
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
    snprintf(want, sizeof want, "fq:%lld sq:1:%lld", h1.ticket + 1, h1.ticket + 2);
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
    char list[512];
    range("LRANGE", WAKE G, list, sizeof list);
    cr_expect(strncmp(list, "sq:0:", 5) == 0, "wake:G: %s", list);
    range("LRANGE", WAKE H, list, sizeof list);
    cr_expect(strncmp(list, "sq:0:", 5) == 0, "wake:H: %s", list);
}
