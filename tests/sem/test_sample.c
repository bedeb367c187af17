/* Shadow mode's command sample (docs/design.md, "The command sample"): each hold of a pool in
 * shadow mode reaches Redis' sample key with its arrival by Redis' clock, its wait, its hold and
 * what enforcing would have done; nothing in enforce mode; and the key stays within its cap and
 * age whatever comes. Judged in Redis: the sample's members, read with redis-cli's own commands. */
#include "redis_conn.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAMPLE "dbthrottle:{sample}:q:sample"

TestSuite(sample, .init = fx_redis_start, .fini = fx_stop);

/* Redis' clock (us). */
static int64_t redis_time_us(void)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "TIME");
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 2);
    int64_t t =
        strtoll(r->element[0]->str, NULL, 10) * 1000000 + strtoll(r->element[1]->str, NULL, 10);
    freeReplyObject(r);
    redisFree(c);
    return t;
}

typedef struct {
    int64_t arrival_us, wait_us, hold_us;
    char conn[16], klass[40];
    int weight, would;
} member;

/* The sample's members, oldest first (at most cap); returns how many. */
static int read_sample(member *out, int cap)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "ZRANGE %s 0 -1 WITHSCORES", SAMPLE);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    int n = 0;
    for (size_t i = 0; i + 1 < r->elements && n < cap; i += 2, n++) {
        member *m = &out[n];
        memset(m, 0, sizeof *m);
        char id[64];
        long long w, h;
        int got = sscanf(r->element[i]->str, "%63s %15s %lld %lld %d %d %39s", id, m->conn, &w, &h,
                         &m->weight, &m->would, m->klass);
        cr_assert_geq(got, 6, "member \"%s\"", r->element[i]->str);
        m->wait_us = w;
        m->hold_us = h;
        m->arrival_us = strtoll(r->element[i + 1]->str, NULL, 10);
    }
    freeReplyObject(r);
    redisFree(c);
    return n;
}

/* Three commands at a limit of 1 on three connections, held 100, 300 and 500 ms: one ran as
 * enforcing would have, two would have waited. Each reaches Redis once its process exits. */
Test(sample, shadow_holds_reach_redis_with_their_arrival_and_hold, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    const char *conns[3] = {"conn-a", "conn-b", "conn-c"};
    dbt_permit *held[3];
    int64_t before = redis_time_us();
    for (int i = 0; i < 3; i++) {
        dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000, .conn = conns[i]};
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &held[i]), DBT_ACQ_GRANTED);
    }
    for (int i = 0; i < 3; i++) {
        usleep(i == 0 ? 100000 : 200000);
        dbt_release(held[i]);
    }
    dbt_client_exit(c);
    int64_t after = redis_time_us();
    member m[8];
    int n = read_sample(m, 8);
    cr_assert_eq(n, 3, "3 holds sampled, %d in Redis", n);
    int would_wait = 0;
    for (int i = 0; i < 3; i++) {
        cr_expect(m[i].arrival_us >= before - 50000 && m[i].arrival_us <= after,
                  "hold %d arrived at %" PRId64 " us, between %" PRId64 " and %" PRId64, i,
                  m[i].arrival_us, before, after);
        int64_t ms = m[i].hold_us / 1000;
        cr_expect(ms >= 100 + 200 * i && ms < 100 + 200 * i + 400,
                  "hold %d held %" PRId64 " ms (slept %d)", i, ms, 100 + 200 * i);
        cr_expect_eq(m[i].weight, 1);
        cr_expect_lt(m[i].wait_us, 2000000);
        would_wait += m[i].would == 1;
        for (int j = 0; j < i; j++)
            cr_expect_str_neq(m[i].conn, m[j].conn, "holds %d and %d name one connection", i, j);
    }
    cr_expect_eq(m[0].would, 0, "the first ran as enforcing would have");
    cr_expect_eq(would_wait, 2, "two would have waited");
    long long ttl = test_redis_int(&fx_redis, "PTTL %s", SAMPLE);
    cr_expect(ttl > 0 && ttl <= DBT_SAMPLE_AGE_MS, "the sample expires (PTTL %lld)", ttl);
}

/* A kept permit's every command is a hold of its own: arrival and grant at its reuse. */
Test(sample, each_command_on_a_kept_permit_is_a_hold, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_CACHE_IDLE=30s", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000, .conn = "kept"};
    dbt_permit *s = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_GRANTED);
    for (int i = 0; i < 5; i++) {
        usleep(20000);
        cr_assert(dbt_permit_park(s), "command %d's permit kept", i + 1);
        cr_assert(dbt_permit_unpark(&s), "and reused");
    }
    usleep(20000);
    dbt_release(s);
    dbt_client_exit(c);
    member m[16];
    int n = read_sample(m, 16);
    cr_expect_eq(n, 6, "6 commands, %d holds sampled", n);
    for (int i = 0; i < n; i++) {
        cr_expect(m[i].hold_us >= 20000 && m[i].hold_us < 1000000, "hold %d: %" PRId64 " us", i,
                  m[i].hold_us);
        cr_expect_eq(m[i].would, 0);
    }
}

Test(sample, enforce_mode_samples_nothing, .timeout = 60)
{
    dbt_client *c = fx_client(NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000, .conn = "x"};
    dbt_permit *s;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_GRANTED);
    dbt_release(s);
    dbt_client_exit(c);
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS %s", SAMPLE), 0);
}

/* sample.lua itself, as the library sends it: a burst far above the cap leaves the cap, the
 * oldest gone; a hold older than the age limit goes at once; holds not kept are one member. */
Test(sample, the_sample_keeps_its_cap_and_age_under_a_burst, .timeout = 120)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    dbt_keys keys;
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "sample"));
    size_t cap = (size_t)DBT_SAMPLE_CHUNK * 64;
    char *text = malloc(cap);
    cr_assert_not_null(text);
    uint64_t serial = 0;
    long long kept = 0;
    int calls = DBT_SAMPLE_CAP / DBT_SAMPLE_CHUNK + 40;
    for (int call = 0; call < calls; call++) {
        size_t len = 0;
        for (int i = 0; i < DBT_SAMPLE_CHUNK; i++)
            len += (size_t)snprintf(text + len, cap - len, "%d c%d 0 1000 1 0 \n",
                                    DBT_SAMPLE_CHUNK - i, i % 7);
        dbt_script_call c;
        dbt_build_sample(&c, &keys, DBT_KIND_QUERY, &cfg, "00000000000000aa", serial, text, 0);
        redisReply *rep = dbt_script_run(conn, &c, dbt_parse_sample, &kept, err);
        cr_assert_not_null(rep, "call %d: %s", call, err);
        freeReplyObject(rep);
        serial += DBT_SAMPLE_CHUNK;
    }
    cr_expect_eq(kept, DBT_SAMPLE_CAP, "the script says %lld kept", kept);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD %s", SAMPLE), DBT_SAMPLE_CAP,
                 "%d holds sent, the cap kept", calls * DBT_SAMPLE_CHUNK);
    /* the oldest went: the first call's members are gone, the last call's are there */
    cr_expect_eq(
        test_redis_int(&fx_redis, "ZSCORE %s %s", SAMPLE, "00000000000000aa.0 c0 0 1000 1 0 "),
        -1000);
    long long mem = test_redis_int(&fx_redis, "MEMORY USAGE %s", SAMPLE);
    cr_log_info("the sample at its cap: %lld bytes (%.0f per hold)", mem,
                (double)mem / DBT_SAMPLE_CAP);

    /* One hold older than the age limit and 5 holds not kept: the old one goes at once. */
    char old[96];
    snprintf(old, sizeof old, "%lld c1 0 1000 1 0 \n",
             (long long)DBT_SAMPLE_AGE_MS * 1000 + 60000000);
    dbt_script_call c;
    dbt_build_sample(&c, &keys, DBT_KIND_QUERY, &cfg, "00000000000000bb", 0, old, 5);
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_sample, &kept, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    cr_expect_eq(
        test_redis_int(&fx_redis, "ZSCORE %s %s", SAMPLE, "00000000000000bb.0 c1 0 1000 1 0 "),
        -1000, "the hold older than the age limit is gone");
    cr_expect_neq(test_redis_int(&fx_redis, "ZSCORE %s %s", SAMPLE, "00000000000000bb.1 x 5"),
                  -1000, "the 5 holds not kept are one member");
    free(text);
    dbt_keys_free(&keys);
    dbt_redis_free(conn);
    dbt_config_free(&cfg);
}

/* How many errors of a kind Redis answered (INFO errorstats), 0 when none. */
static long long redis_errors(const char *kind)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "INFO errorstats");
    cr_assert(r && r->type == REDIS_REPLY_STRING);
    char key[64];
    snprintf(key, sizeof key, "errorstat_%s:count=", kind);
    const char *at = strstr(r->str, key);
    long long n = at ? strtoll(at + strlen(key), NULL, 10) : 0;
    freeReplyObject(r);
    redisFree(c);
    return n;
}

static bool sample_call_failed(void *arg)
{
    (void)arg;
    return redis_errors("WRONGTYPE") > 0;
}

/* A sample call that fails (here the key is of the wrong type) is not an outage of Redis: the
 * pool's next acquire, at once after it, still reaches Redis (before, the pool took it for one
 * and for a second ran its commands without Redis: unthrottled in open mode). */
Test(sample, a_failed_sample_call_is_no_outage, .timeout = 60)
{
    cr_assert_eq(test_redis_int(&fx_redis, "SET %s not-a-zset", SAMPLE), -1000); /* +OK */
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000, .conn = "f"};
    dbt_permit *s;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_GRANTED);
    dbt_release(s);
    cr_assert(test_wait_until(sample_call_failed, NULL, 10000), "the sample was never sent");
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_GRANTED);
    cr_expect_eq(test_redis_int(&fx_redis, "ZCARD dbthrottle:{sample}:q:holders"), 1,
                 "the acquire after the failed sample call reached Redis");
    dbt_release(s);
}

static bool sample_says_missed(void *arg)
{
    (void)arg;
    redisContext *c = test_redis_connect(&fx_redis);
    if (!c)
        return false;
    redisReply *r = redisCommand(c, "ZRANGE %s 0 -1", SAMPLE);
    bool found = false;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        found = found || strstr(r->element[i]->str, " x 1") != NULL;
    if (r)
        freeReplyObject(r);
    redisFree(c);
    return found;
}

/* A command that ran with no permit while Redis was away (shadow mode runs it) is not in the
 * sample: once Redis is back, the sample says one is missing, so the report can say so. */
Test(sample, a_command_run_in_an_outage_is_counted_as_missing, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_REDIS_TIMEOUT=200ms", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    test_redis_kill(&fx_redis);
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000, .conn = "o"};
    dbt_permit *s = NULL;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_UNTHROTTLED);
    cr_assert(test_redis_restart(&fx_redis, NULL));
    cr_expect(test_wait_until(sample_says_missed, NULL, 20000),
              "the sample never said a command was missing");
}
