/* adapt.lua, the adaptive controller's lease and limit (dbthrottle adapt), through the real script
 * on a redis-server of the test's own, judged from Redis' keys: the lease is exclusive and lapses
 * by Redis' clock; only its holder sets the limit, with a TTL that each lease refreshes; a set
 * grants the waiters that now fit; an operator's limit (no TTL) stops the controller; a
 * resignation frees the lease at once. */
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define BASE "dbthrottle:{ad}:"
#define P    BASE "q:"
#define LIM  P "limit"
#define REC  LIM ":adapt"
#define A    "hostA:11:00000000000000aa"
#define B    "hostB:22:00000000000000bb"

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
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "ad"));
}

static void stop(void)
{
    dbt_keys_free(&keys);
    if (conn)
        dbt_redis_free(conn);
    dbt_config_free(&cfg);
    fx_stop();
}

TestSuite(adapt_script, .init = start, .fini = stop);

static dbt_adapt_reply run(const dbt_adapt_args *a)
{
    dbt_script_call c;
    dbt_build_adapt(&c, &keys, DBT_KIND_QUERY, &cfg, a);
    dbt_adapt_reply out;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_adapt, &out, err);
    cr_assert_not_null(rep, "adapt.lua: %s", err);
    freeReplyObject(rep);
    return out;
}

static dbt_adapt_reply lease(const char *token, int64_t lease_ms, int64_t ttl_ms)
{
    dbt_adapt_args a = {.op = DBT_ADAPT_LEASE,
                        .token = token,
                        .lease_ms = lease_ms,
                        .host = token[4] == 'A' ? "hostA" : "hostB",
                        .pid = token[4] == 'A' ? 11 : 22,
                        .min = 1,
                        .max = 50,
                        .ttl_ms = ttl_ms,
                        .interval_ms = 100,
                        .window_ms = 500};
    return run(&a);
}

static dbt_adapt_reply set(const char *token, int limit)
{
    dbt_adapt_args a = {.op = DBT_ADAPT_SET, .token = token, .limit = limit, .reason = "test"};
    return run(&a);
}

static dbt_adapt_reply resign(const char *token)
{
    dbt_adapt_args a = {.op = DBT_ADAPT_RESIGN, .token = token};
    return run(&a);
}

static long long hget_int(const char *field)
{
    return test_redis_int(&fx_redis, "HGET " REC " %s", field);
}

/* The record's owner field ("" when resigned). */
static void owner_of(char *out, size_t cap)
{
    redisContext *rc = test_redis_connect(&fx_redis);
    redisReply *r = redisCommand(rc, "HGET " REC " owner");
    snprintf(out, cap, "%s", r && r->type == REDIS_REPLY_STRING ? r->str : "(none)");
    freeReplyObject(r);
    redisFree(rc);
}

Test(adapt_script, the_lease_is_exclusive)
{
    dbt_adapt_reply a = lease(A, 10000, 30000);
    cr_assert_eq(a.status, DBT_ADAPT_OK);
    cr_expect_str_eq(a.owner, A);
    cr_expect_str_eq(a.owner_host, "hostA");
    cr_expect_eq(a.owner_pid, 11);
    cr_expect_gt(a.lease_left_ms, 9000);
    dbt_adapt_reply b = lease(B, 10000, 30000);
    cr_expect_eq(b.status, DBT_ADAPT_NOT_LEADER, "a second token took a live lease");
    cr_expect_str_eq(b.owner, A, "the reply names the leader");
    char owner[128];
    owner_of(owner, sizeof owner);
    cr_expect_str_eq(owner, A, "the record's owner");
    cr_expect_eq(hget_int("pid"), 11, "the loser's lease call wrote the record");
    /* the holder renews it */
    cr_expect_eq(lease(A, 10000, 30000).status, DBT_ADAPT_OK);
}

Test(adapt_script, the_lease_lapses_at_lease_until_by_redis_clock_and_another_takes_it)
{
    dbt_adapt_reply a = lease(A, 400, 30000);
    cr_assert_eq(a.status, DBT_ADAPT_OK);
    long long until = hget_int("lease_until");
    cr_expect_eq(until, a.now_ms + 400);
    int64_t deadline = test_now_ms() + 10000;
    dbt_adapt_reply b;
    for (;;) {
        b = lease(B, 400, 30000);
        if (b.status == DBT_ADAPT_OK)
            break;
        cr_assert_eq(b.status, DBT_ADAPT_NOT_LEADER);
        cr_assert_lt(b.now_ms, until, "refused at %lld, after the lease ran out at %lld", b.now_ms,
                     until);
        cr_assert_lt(test_now_ms(), deadline, "B never took the lapsed lease");
        nanosleep(&(struct timespec){0, 20 * 1000000L}, NULL);
    }
    cr_expect_geq(b.now_ms, until, "taken at %lld, before the lease ran out at %lld", b.now_ms,
                  until);
    char owner[128];
    owner_of(owner, sizeof owner);
    cr_expect_str_eq(owner, B);
    cr_expect_eq(hget_int("since"), b.now_ms, "since: when B took it");
    /* A, back, is now the standby */
    cr_expect_eq(lease(A, 400, 30000).status, DBT_ADAPT_NOT_LEADER);
    cr_expect_eq(set(A, 9).status, DBT_ADAPT_NOT_LEADER);
}

Test(adapt_script, a_set_by_a_non_leader_changes_nothing)
{
    cr_assert_eq(lease(A, 10000, 30000).status, DBT_ADAPT_OK);
    cr_assert_eq(set(A, 4).status, DBT_ADAPT_OK);
    dbt_adapt_reply b = set(B, 9);
    cr_expect_eq(b.status, DBT_ADAPT_NOT_LEADER);
    cr_expect_eq(b.override, 4, "the reply shows the limit in force");
    cr_expect_eq(test_redis_int(&fx_redis, "GET " LIM), 4, "the standby's set changed the limit");
    cr_expect_eq(hget_int("limit"), 4);
    /* nor without any lease at all */
    cr_expect_eq(resign(A).status, DBT_ADAPT_OK);
    cr_expect_eq(set(B, 9).status, DBT_ADAPT_NOT_LEADER, "a set without a lease was done");
    cr_expect_eq(test_redis_int(&fx_redis, "GET " LIM), 4);
}

/* A permit of the query semaphore, by the real acquire.lua: its status. */
static dbt_acquire_status acquire(const char *id, int limit)
{
    dbt_acquire_call a = {.id = id, .limit = limit, .who = "hostC 3 c1"};
    dbt_script_call c;
    dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
    dbt_acquire_reply ar;
    char err[DBT_ERRLEN];
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_acquire, &ar, err);
    cr_assert_not_null(rep, "acquire: %s", err);
    freeReplyObject(rep);
    return ar.status;
}

Test(adapt_script, a_set_raises_the_limit_and_grants_the_waiters_that_now_fit_at_once)
{
    cr_assert_eq(acquire("00000000000000c1.1.1", 1), DBT_ACQUIRE_GRANTED);
    cr_assert_eq(acquire("00000000000000c2.1.1", 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(acquire("00000000000000c3.1.1", 1), DBT_ACQUIRE_QUEUED);
    cr_assert_eq(lease(A, 10000, 30000).status, DBT_ADAPT_OK);
    long long before = test_redis_int(&fx_redis, "LLEN " BASE "wake:00000000000000c1");
    dbt_adapt_reply s = set(A, 2);
    cr_assert_eq(s.status, DBT_ADAPT_OK);
    cr_expect_eq(s.granted, 1, "granted %lld at once", s.granted);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "holders"), 2);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD " P "queue"), 1);
    cr_expect_geq(
        test_redis_int(&fx_redis, "LPOS " BASE "wake:00000000000000c2 gq:00000000000000c2.1.1"), 0,
        "the first waiter was not woken with its grant");
    /* the holder of the first permit is asked for what it keeps (admin limit's code) */
    long long told = test_redis_int(&fx_redis, "LLEN " BASE "wake:00000000000000c1") - before;
    cr_expect_eq(told, 1, "the holder got %lld messages", told);
    cr_expect_eq(test_redis_int(&fx_redis, "GET " LIM), 2);
    cr_expect_eq(hget_int("limit"), 2);
    cr_expect_eq(hget_int("changed_at"), s.now_ms);
}

Test(adapt_script, the_limit_gets_the_ttl_and_each_lease_refreshes_it)
{
    cr_assert_eq(lease(A, 10000, 20000).status, DBT_ADAPT_OK);
    dbt_adapt_reply s = set(A, 3);
    cr_assert_eq(s.status, DBT_ADAPT_OK);
    long long t = test_redis_int(&fx_redis, "PTTL " LIM);
    cr_expect(t > 15000 && t <= 20000, "PTTL %lld after a set with ttl 20000", t);
    cr_expect(s.override_pttl > 15000 && s.override_pttl <= 20000, "the reply's PTTL %lld",
              s.override_pttl);
    cr_expect_eq(s.override, 3);
    /* time passes (as if): the next lease gives it its whole TTL again */
    cr_assert_eq(test_redis_int(&fx_redis, "PEXPIRE " LIM " 1000"), 1);
    dbt_adapt_reply l = lease(A, 10000, 20000);
    cr_expect_eq(l.status, DBT_ADAPT_OK);
    t = test_redis_int(&fx_redis, "PTTL " LIM);
    cr_expect(t > 15000, "PTTL %lld after a lease", t);
    /* a standby's lease call does not refresh it */
    cr_assert_eq(test_redis_int(&fx_redis, "PEXPIRE " LIM " 1000"), 1);
    cr_expect_eq(lease(B, 10000, 20000).status, DBT_ADAPT_NOT_LEADER);
    t = test_redis_int(&fx_redis, "PTTL " LIM);
    cr_expect(t <= 1000, "PTTL %lld after a standby's lease", t);
}

Test(adapt_script, an_operators_limit_without_ttl_stops_the_controller)
{
    cr_assert_eq(lease(A, 10000, 20000).status, DBT_ADAPT_OK);
    cr_assert_eq(set(A, 3).status, DBT_ADAPT_OK);
    /* dbthrottle limit by hand: a value without a TTL */
    redisContext *rc = test_redis_connect(&fx_redis);
    freeReplyObject(redisCommand(rc, "SET " LIM " 7"));
    redisFree(rc);
    dbt_adapt_reply l = lease(A, 10000, 20000);
    cr_expect_eq(l.status, DBT_ADAPT_OPERATOR);
    cr_expect_eq(l.override, 7);
    cr_expect_eq(l.override_pttl, -1);
    cr_expect_eq(test_redis_int(&fx_redis, "PTTL " LIM), -1, "the lease gave the operator's a TTL");
    dbt_adapt_reply s = set(A, 5);
    cr_expect_eq(s.status, DBT_ADAPT_OPERATOR);
    cr_expect_eq(test_redis_int(&fx_redis, "GET " LIM), 7, "the set replaced the operator's");
    cr_expect_eq(test_redis_int(&fx_redis, "PTTL " LIM), -1);
    cr_expect_eq(hget_int("limit"), 3, "the record says the refused set was made");
    /* once the operator clears it, the controller sets again */
    rc = test_redis_connect(&fx_redis);
    freeReplyObject(redisCommand(rc, "DEL " LIM));
    redisFree(rc);
    cr_expect_eq(lease(A, 10000, 20000).status, DBT_ADAPT_OK);
    cr_expect_eq(set(A, 5).status, DBT_ADAPT_OK);
    cr_expect_eq(test_redis_int(&fx_redis, "GET " LIM), 5);
}

Test(adapt_script, a_resignation_lets_another_take_the_lease_at_once)
{
    cr_assert_eq(lease(A, 60000, 20000).status, DBT_ADAPT_OK);
    cr_assert_eq(set(A, 6).status, DBT_ADAPT_OK);
    cr_expect_eq(resign(B).status, DBT_ADAPT_NOT_LEADER, "a standby resigned the leader's lease");
    dbt_adapt_reply r = resign(A);
    cr_expect_eq(r.status, DBT_ADAPT_OK);
    cr_expect_str_eq(r.owner, "");
    cr_expect_eq(r.lease_left_ms, 0);
    char owner[128];
    owner_of(owner, sizeof owner);
    cr_expect_str_eq(owner, "", "the record's owner after a resignation");
    cr_expect_eq(hget_int("lease_until"), 0);
    long long t = test_redis_int(&fx_redis, "PTTL " LIM);
    cr_expect(t > 0, "the limit lost its TTL or went at the resignation (PTTL %lld)", t);
    cr_expect_eq(test_redis_int(&fx_redis, "GET " LIM), 6);
    dbt_adapt_reply b = lease(B, 60000, 20000);
    cr_expect_eq(b.status, DBT_ADAPT_OK, "the standby did not take a resigned lease at once");
    cr_expect_str_eq(b.owner, B);
    cr_expect_gt(test_redis_int(&fx_redis, "PTTL " REC), 6LL * 24 * 3600 * 1000,
                 "the record is kept a week");
}
