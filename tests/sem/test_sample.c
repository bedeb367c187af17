/* The command sample (docs/design.md, "The command sample"): each hold of a pool in shadow mode
 * (or, with DBTHROTTLE_SAMPLE=always, enforced) reaches Redis' sample key with its arrival by
 * Redis' clock, its wait, its hold and what enforcing would have done or whether it queued;
 * nothing enforced by default; and the key stays within its cap and age whatever comes. Judged in
 * Redis: the sample's members, read with redis-cli's own commands. */
#include "redis_conn.h"
#include "route.h"
#include "script_run.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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
    int64_t queued_us; /* of wait_us, a queued hold's queueing ("<acquire>:<queued>") */
    char conn[16], klass[40];
    int weight, would;
} member;

/* The sample's holds, in their members' order (each member a chunk of one process' holds: a head
 * line, then one line per hold, lua/protocol/sample.def), at most cap; returns how many. A hold
 * arrived its "ago" before its member's score. */
static int read_sample(member *out, int cap)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "ZRANGE %s 0 -1 WITHSCORES", SAMPLE);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    int n = 0;
    for (size_t i = 0; i + 1 < r->elements; i += 2) {
        int64_t called = strtoll(r->element[i + 1]->str, NULL, 10);
        char *text = strdup(r->element[i]->str), *save = NULL;
        cr_assert_not_null(text);
        char id[64];
        long long holds, dropped, total;
        char *line = strtok_r(text, "\n", &save);
        cr_assert(line && sscanf(line, "%63s %lld %lld %lld", id, &holds, &dropped, &total) == 4,
                  "a member's head: \"%s\"", r->element[i]->str);
        for (long long h = 0; h < holds; h++) {
            line = strtok_r(NULL, "\n", &save);
            cr_assert_not_null(line, "member %s: %lld holds said, %lld there", id, holds, h);
            if (n == cap)
                continue;
            member *m = &out[n++];
            memset(m, 0, sizeof *m);
            long long ago, hd;
            char w[48];
            int got = sscanf(line, "%lld %15s %47s %lld %d %d %39s", &ago, m->conn, w, &hd,
                             &m->weight, &m->would, m->klass);
            cr_assert_geq(got, 6, "hold \"%s\"", line);
            m->arrival_us = called - ago;
            char *colon = strchr(w, ':');
            m->queued_us = colon ? strtoll(colon + 1, NULL, 10) : 0;
            m->wait_us = strtoll(w, NULL, 10) + m->queued_us;
            m->hold_us = hd;
        }
        cr_assert_null(strtok_r(NULL, "\n", &save), "member %s: more lines than its %lld holds", id,
                       holds);
        free(text);
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

/* The holds sampled and the holds said not kept, over the whole sample (its members' heads and
 * lines). */
static void sample_totals(long long *holds, long long *dropped)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "ZRANGE %s 0 -1", SAMPLE);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    *holds = *dropped = 0;
    for (size_t i = 0; i < r->elements; i++) {
        long long h, d;
        cr_assert_eq(sscanf(r->element[i]->str, "%*s %lld %lld", &h, &d), 2);
        *holds += h;
        *dropped += d;
    }
    freeReplyObject(r);
    redisFree(c);
}

typedef struct {
    dbt_pool *p;
    dbt_acq_result r;
    dbt_permit *permit;
} waiter_run;

static void *waiter(void *arg)
{
    waiter_run *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 20000, .conn = "waiter"};
    w->r = dbt_acquire(w->p, DBT_KIND_QUERY, &o, &w->permit);
    return NULL;
}

/* DBTHROTTLE_SAMPLE=always: enforced holds are sampled too, each saying whether it queued (the
 * report splits the limit's own queueing from the acquire's round trips by it), and a command
 * refused at its wait timeout is said not sampled. At a limit of 1: one granted at once, held
 * 600 ms more; one queued behind it; one refused while the second holds. */
Test(sample, always_samples_enforced_holds_and_whether_they_queued, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_SAMPLE=always", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000, .conn = "first"};
    dbt_permit *first;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &first), DBT_ACQ_GRANTED);
    waiter_run w = {.p = p};
    pthread_t t;
    cr_assert_eq(pthread_create(&t, NULL, waiter, &w), 0);
    zcard_is queued = {&fx_redis, "dbthrottle:{sample}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 5000), "the second queued");
    usleep(600000);
    dbt_release(first);
    pthread_join(t, NULL);
    cr_assert_eq(w.r, DBT_ACQ_GRANTED);
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0, .conn = "refused"};
    dbt_permit *refused = NULL;
    cr_assert_neq(dbt_acquire(p, DBT_KIND_QUERY, &now, &refused), DBT_ACQ_GRANTED);
    dbt_release(w.permit);
    dbt_client_exit(c);
    member m[8];
    int n = read_sample(m, 8);
    cr_assert_eq(n, 2, "2 holds sampled, %d in Redis", n);
    cr_expect_eq(m[0].would, DBT_SAMPLE_AT_ONCE, "the first: granted at once (%d)", m[0].would);
    cr_expect_lt(m[0].wait_us, 250000, "the first waited %" PRId64 " us", m[0].wait_us);
    cr_expect_eq(m[1].would, DBT_SAMPLE_QUEUED, "the second: queued (%d)", m[1].would);
    /* (its queueing counts from its thread's reading of the reply: a loaded machine may read it
     * late, but not by half of the 600 ms it then waited) */
    cr_expect_geq(m[1].queued_us, 300000, "the second queued %" PRId64 " us behind 600 ms",
                  m[1].queued_us);
    cr_expect_lt(m[1].wait_us - m[1].queued_us, 300000,
                 "its acquire, to the reply that queued it: %" PRId64 " us",
                 m[1].wait_us - m[1].queued_us);
    long long holds, dropped;
    sample_totals(&holds, &dropped);
    cr_expect_eq(dropped, 1, "the refused command is said not sampled (%lld)", dropped);
}

/* sample=off keeps nothing, shadow mode's commands included. */
Test(sample, off_samples_nothing_in_shadow_mode_either, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_SAMPLE=off", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 10000, .conn = "x"};
    dbt_permit *a, *b;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &a), DBT_ACQ_GRANTED);
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &b), DBT_ACQ_GRANTED, "shadow: over the limit");
    dbt_release(b);
    dbt_release(a);
    dbt_client_exit(c);
    cr_expect_eq(test_redis_int(&fx_redis, "EXISTS %s", SAMPLE), 0);
}

/* DBTHROTTLE_SAMPLE is live: an enforcing process samples nothing until the operator's `sample
 * always` reaches it, and nothing again after `sample off`. */
Test(sample, the_live_setting_turns_the_enforced_sample_on_and_off, .timeout = 60)
{
    dbt_client *c = fx_client("DBTHROTTLE_CACHE_PERMITS=off", "DBTHROTTLE_LEASE=1s", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    const char *texts[] = {NULL, "v2\nsample=always\n", "v3\nsample=off\n"};
    for (int round = 0; round < 3; round++) {
        if (texts[round]) {
            cr_assert_eq(test_redis_int(&fx_redis, "SET %s %s", "dbthrottle:{sample}:settings",
                                        texts[round]),
                         -1000);
            /* (applied at a renewal: a third of the lease) */
            for (int i = 0; i < 500 && dbt_pool_live_applied(p) != round + 1; i++)
                usleep(20000);
            cr_assert_eq(dbt_pool_live_applied(p), round + 1, "live v%d not applied", round + 1);
        }
        char conn[16];
        snprintf(conn, sizeof conn, "round-%d", round);
        dbt_acquire_opts o = {.limit = 4, .wait_ms = 10000, .conn = conn};
        dbt_permit *s;
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_GRANTED);
        dbt_release(s);
    }
    dbt_client_exit(c);
    member m[8];
    int n = read_sample(m, 8);
    cr_assert_eq(n, 1, "one command sampled (under sample=always), %d in Redis", n);
    cr_expect_eq(m[0].would, DBT_SAMPLE_AT_ONCE);
}

/* The first word of each member (its "<cid>.<first>.<built>.<clock>"), oldest first, joined by
 * spaces. */
static void member_names(char *out, size_t cap)
{
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "ZRANGE %s 0 -1", SAMPLE);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY);
    size_t len = 0;
    out[0] = '\0';
    for (size_t i = 0; i < r->elements && len < cap; i++)
        len += (size_t)snprintf(out + len, cap - len, "%s%.*s", i ? " " : "",
                                (int)strcspn(r->element[i]->str, " "), r->element[i]->str);
    freeReplyObject(r);
    redisFree(c);
}

/* Sends one chunk as the library does: holds lines, then dropped holds; returns sample.lua's
 * reply (the holds the sample carries). */
static long long send_chunk(dbt_redis *conn, const dbt_keys *keys, const dbt_config *cfg,
                            const char *cid, uint64_t first, int nholds, const char *text,
                            uint64_t dropped)
{
    char err[DBT_ERRLEN];
    long long carried = -1;
    dbt_script_call c;
    dbt_build_sample(&c, keys, DBT_KIND_QUERY, cfg, cid, first, nholds, text, dropped, 0, "");
    redisReply *rep = dbt_script_run(conn, &c, dbt_parse_sample, &carried, err);
    cr_assert_not_null(rep, "%s", err);
    freeReplyObject(rep);
    return carried;
}

/* sample.lua itself, as the library sends it: a burst far above the cap leaves the cap in holds
 * (as Redis holds them: every line counted), the oldest chunks gone; a chunk is one member. */
Test(sample, the_sample_keeps_its_cap_under_a_burst, .timeout = 120)
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
        kept = send_chunk(conn, &keys, &cfg, "00000000000000aa", serial, DBT_SAMPLE_CHUNK, text, 0);
        serial += DBT_SAMPLE_CHUNK;
    }
    long long members = test_redis_int(&fx_redis, "ZCARD %s", SAMPLE);
    cr_expect_eq(members * DBT_SAMPLE_CHUNK, kept, "%lld chunks of %d, the script says %lld held",
                 members, DBT_SAMPLE_CHUNK, kept);
    cr_expect(kept <= DBT_SAMPLE_CAP && kept > DBT_SAMPLE_CAP - DBT_SAMPLE_CHUNK,
              "%d holds sent, %lld kept: the cap (%d) within a chunk", calls * DBT_SAMPLE_CHUNK,
              kept, DBT_SAMPLE_CAP);
    member *all = malloc((size_t)(DBT_SAMPLE_CAP + DBT_SAMPLE_CHUNK) * sizeof *all);
    cr_assert_not_null(all);
    int n = read_sample(all, DBT_SAMPLE_CAP + DBT_SAMPLE_CHUNK);
    cr_expect_eq(n, kept, "Redis holds %d holds' lines, the script counts %lld", n, kept);
    free(all);
    /* the oldest went: the first call's chunk is gone, the last call's is there */
    char *names = malloc(64 * (size_t)members + 1);
    cr_assert_not_null(names);
    member_names(names, 64 * (size_t)members + 1);
    cr_expect(strncmp(names, "00000000000000aa.0.0. ", 22) != 0, "the first chunk is kept");
    char last[64];
    snprintf(last, sizeof last, " 00000000000000aa.%llu.0.",
             (unsigned long long)(serial - DBT_SAMPLE_CHUNK));
    size_t ln = strlen(last), nn = strlen(names);
    cr_expect(nn >= ln && strcmp(names + nn - ln, last) == 0, "the last chunk is the newest");
    free(names);
    long long mem = test_redis_int(&fx_redis, "MEMORY USAGE %s", SAMPLE);
    cr_log_info("the sample at its cap: %lld bytes (%.0f per hold)", mem,
                (double)mem / (double)kept);
    free(text);
    dbt_keys_free(&keys);
    dbt_redis_free(conn);
    dbt_config_free(&cfg);
}

/* A member sent longer ago than the age limit goes at the next call; holds not kept are said in
 * the head of the chunk that comes with them. */
Test(sample, an_old_chunk_goes_and_dropped_holds_are_said, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    dbt_keys keys;
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "sample"));
    int64_t old = redis_time_us() - (int64_t)DBT_SAMPLE_AGE_MS * 1000 - 60000000;
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r = redisCommand(c, "ZADD %s %lld %s", SAMPLE, (long long)old,
                                 "00000000000000bb.0 1 0 1\n1000 c1 0 1000 1 0 \n");
    cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    redisFree(c);
    long long kept = send_chunk(conn, &keys, &cfg, "00000000000000cc", 0, 2,
                                "2000 c1 0 1000 1 0 \n1000 c2 0 1000 1 1 \n", 5);
    cr_expect_eq(kept, 2, "the script says %lld held", kept);
    char names[256];
    member_names(names, sizeof names);
    cr_expect_str_eq(names, "00000000000000cc.0.0.", "the old chunk went, the new one stays");
    c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    r = redisCommand(c, "ZRANGE %s 0 0", SAMPLE);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 1);
    long long holds = -1, dropped = -1;
    cr_expect_eq(sscanf(r->element[0]->str, "%*s %lld %lld", &holds, &dropped), 2);
    cr_expect(holds == 2 && dropped == 5, "its head says %lld holds, %lld not kept", holds,
              dropped);
    freeReplyObject(r);
    redisFree(c);
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
    long long holds, dropped;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        found = found || (sscanf(r->element[i]->str, "%*s %lld %lld", &holds, &dropped) == 2 &&
                          dropped == 1);
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

typedef struct {
    dbt_pool *pool;
    dbt_permit *permit;
    dbt_acq_result res;
    atomic_bool done;
} interruptible;

static void *wait_interruptibly(void *arg)
{
    interruptible *w = arg;
    dbt_acquire_opts o = {.limit = 1, .wait_ms = 30000, .conn = "w", .interrupted = signalled};
    w->res = dbt_acquire(w->pool, DBT_KIND_QUERY, &o, &w->permit);
    atomic_store(&w->done, true);
    return NULL;
}

/* With DBTHROTTLE_SAMPLE=always, a wait the program interrupts (psql's Ctrl-C) ends a command
 * that never ran: the sample says one is missing, as for a refused one. */
Test(sample, an_interrupted_wait_is_counted_as_missing, .timeout = 60)
{
    struct sigaction sa = {.sa_handler = on_sigusr1}; /* no SA_RESTART, like psql's SIGINT */
    sigaction(SIGUSR1, &sa, NULL);
    dbt_client *c = fx_client("DBTHROTTLE_SAMPLE=always", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts now = {.limit = 1, .wait_ms = 0, .conn = "h"};
    dbt_permit *held;
    cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &now, &held), DBT_ACQ_GRANTED);
    interruptible w = {.pool = p};
    pthread_t t;
    pthread_create(&t, NULL, wait_interruptibly, &w);
    zcard_is queued = {&fx_redis, "dbthrottle:{sample}:q:queue", 1};
    cr_assert(test_wait_until(test_zcard_is, &queued, 10000), "the second acquire did not queue");
    /* Sent again until the waiter returns, in case the first landed before it began to sleep. */
    for (int i = 0; i < 250 && !atomic_load(&w.done); i++) {
        pthread_kill(t, SIGUSR1);
        usleep(20000);
    }
    pthread_join(t, NULL);
    cr_assert_eq(w.res, DBT_ACQ_INTERRUPTED);
    dbt_release(held);
    cr_expect(test_wait_until(sample_says_missed, NULL, 20000),
              "the sample never said a command was missing");
}

/* A busy process keeps up: 4 buffers' worth of commands back to back (thousands a second on
 * loopback) are all sampled, none dropped; the buffer is sent as it fills, not a renewal later. */
Test(sample, a_busy_process_keeps_up, .timeout = 120)
{
    dbt_client *c = fx_client("DBTHROTTLE_MODE=shadow", "DBTHROTTLE_CACHE_PERMITS=off", NULL);
    dbt_pool *p = dbt_client_pool(c, "sample");
    dbt_acquire_opts o = {.limit = 64, .wait_ms = 10000, .conn = "busy"};
    int n = 4 * DBT_SAMPLE_BUF;
    for (int i = 0; i < n; i++) {
        dbt_permit *s;
        cr_assert_eq(dbt_acquire(p, DBT_KIND_QUERY, &o, &s), DBT_ACQ_GRANTED);
        dbt_release(s);
    }
    dbt_client_exit(c);
    long long holds, dropped;
    sample_totals(&holds, &dropped);
    cr_expect_eq(holds + dropped, n, "%d commands: %lld sampled, %lld said not kept", n, holds,
                 dropped);
    cr_expect_eq(dropped, 0, "%lld of %d commands not sampled", dropped, n);
}

/* Redis' clock stepped back (or a failover to a server whose clock is behind): the newest member
 * is scored ahead of now. Each chunk after it is scored above the one before, so each call reads
 * the last one's total and counts every chunk (before, each read the same stale newest and the
 * sample counted one chunk, whatever came: its cap unkept); the report pages by those scores. */
Test(sample, a_clock_stepped_back_keeps_the_count, .timeout = 60)
{
    dbt_config cfg;
    test_config(&cfg, &fx_redis, NULL);
    char err[DBT_ERRLEN];
    dbt_redis *conn = dbt_redis_connect(&cfg, err);
    cr_assert_not_null(conn, "%s", err);
    dbt_keys keys;
    cr_assert(dbt_keys_init(&keys, cfg.key_prefix, "sample"));
    long long ahead = (long long)redis_time_us() + 60000000; /* a minute ahead */
    redisContext *c = test_redis_connect(&fx_redis);
    cr_assert_not_null(c);
    redisReply *r =
        redisCommand(c, "ZADD %s %lld %s", SAMPLE, ahead,
                     "00000000000000dd.0 2 0 2\n1000 c1 0 1000 1 0 \n1000 c2 0 1000 1 0 \n");
    cr_assert(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    freeReplyObject(r);
    char text[64 * 20];
    size_t len = 0;
    for (int i = 0; i < 10; i++)
        len += (size_t)snprintf(text + len, sizeof text - len, "%d c%d 0 1000 1 0 \n", 10 - i, i);
    long long kept = 0;
    for (int call = 0; call < 3; call++)
        kept = send_chunk(conn, &keys, &cfg, "00000000000000ee", (uint64_t)call * 10, 10, text, 0);
    cr_expect_eq(kept, 32, "2 + 3 chunks of 10 holds: the script counts %lld", kept);
    r = redisCommand(c, "ZRANGE %s 0 -1 WITHSCORES", SAMPLE);
    cr_assert(r && r->type == REDIS_REPLY_ARRAY && r->elements == 8, "4 members");
    long long prev = 0;
    for (size_t i = 0; i < r->elements; i += 2) {
        long long score = strtoll(r->element[i + 1]->str, NULL, 10);
        cr_expect_gt(score, prev, "member %zu scored %lld, after %lld", i / 2, score, prev);
        prev = score;
    }
    cr_expect(strncmp(r->element[0]->str, "00000000000000dd.0 ", 19) == 0,
              "the member ahead stays first");
    freeReplyObject(r);
    redisFree(c);
    dbt_keys_free(&keys);
    dbt_redis_free(conn);
    dbt_config_free(&cfg);
}
