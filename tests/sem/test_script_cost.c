/* What an uncontended grant costs Redis in commands run inside the scripts, counted by Redis
 * itself (INFO commandstats): each command a script runs costs Redis about a microsecond of its
 * one core, whatever the command, and every grant of every pool shares that core
 * (docs/performance.md, "What each script costs Redis"). The scripts are called as the library
 * calls them (dbt_build_acquire, dbt_build_release, bound to the server's era), on one process'
 * pool where nobody waits. */
#include "script_protocol.h"
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TestSuite(script_cost, .init = fx_redis_start, .fini = fx_stop);

/* Calls one script by EVAL (its text as the library sends it), asserting it did not fail. */
static void run(redisContext *rc, dbt_script_call *c)
{
    const char *argv[3 + 2 * DBT_NKEYS + 2 + DBT_CALL_MAX_FIXED_ARGS];
    char nkeys[8];
    snprintf(nkeys, sizeof nkeys, "%d", c->nkeys);
    int argc = 0;
    argv[argc++] = "EVAL";
    argv[argc++] = c->script->body;
    argv[argc++] = nkeys;
    for (int i = 0; i < c->nkeys; i++)
        argv[argc++] = c->keys[i];
    for (int i = 0; i < c->nargs; i++)
        argv[argc++] = c->args[i];
    redisReply *r = redisCommandArgv(rc, argc, argv, NULL);
    cr_assert_not_null(r);
    cr_assert_neq(r->type, REDIS_REPLY_ERROR, "%s: %s", c->script->name, r->str);
    freeReplyObject(r);
}

/* The calls of one command in INFO commandstats (0 when it never ran). */
static long long calls_of(redisContext *rc, const char *cmd)
{
    redisReply *r = redisCommand(rc, "INFO commandstats");
    cr_assert(r && r->type == REDIS_REPLY_STRING);
    char line[64];
    snprintf(line, sizeof line, "cmdstat_%s:calls=", cmd);
    const char *at = strstr(r->str, line);
    long long n = at ? atoll(at + strlen(line)) : 0;
    freeReplyObject(r);
    return n;
}

/* A grant and its release where nobody waits: the limit seen's TTL, which paces the keys' TTLs, is
 * read once per script (a key the call creates gets its TTL from that one reading, not from a
 * PTTL each), and the ticket counter with the operator's controls in one MGET (the limit seen
 * stays a GET: the workers' documented ACL needs it, tests/cli/acl.sh). */
Test(script_cost, an_uncontended_grant_reads_each_thing_once, .timeout = 30)
{
    enum { CYCLES = 20 };
    dbt_config cfg = {.lease_ms = 10000, .redis_timeout_ms = 1000};
    dbt_keys keys;
    cr_assert(dbt_keys_init(&keys, "dbthrottle:", "cost"));
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    redisReply *info = redisCommand(rc, "INFO server");
    cr_assert(info && info->type == REDIS_REPLY_STRING);
    char run_id[41] = "";
    const char *at = strstr(info->str, "run_id:");
    cr_assert_not_null(at);
    snprintf(run_id, sizeof run_id, "%.40s", at + 7);
    freeReplyObject(info);
    char id[64];
    for (int i = 0; i <= CYCLES; i++) {
        if (i == 1) /* the first call made the pool's keys: count from the second */
            freeReplyObject(redisCommand(rc, "CONFIG RESETSTAT"));
        snprintf(id, sizeof id, "00000000000000ab.%d.64", i + 1);
        dbt_acquire_call a = {.id = id, .limit = 64, .who = "host 1 c1"};
        dbt_script_call c;
        dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
        dbt_script_bind_era(&c, run_id, 0);
        run(rc, &c);
        dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id, -1);
        dbt_script_bind_era(&c, run_id, 0);
        run(rc, &c);
    }
    long long scripts = calls_of(rc, "eval"), pttl = calls_of(rc, "pttl");
    long long reads = calls_of(rc, "get") + calls_of(rc, "mget"), zcard = calls_of(rc, "zcard");
    /* (after the counts, which this ZCARD would change) every call was a grant and its release:
     * the holders are empty again */
    cr_assert_eq(test_redis_int(&fx_redis, "ZCARD %s", keys.keys[DBT_KIND_QUERY][DBT_K_HOLDERS]),
                 0);
    cr_assert_eq(scripts, 2 * CYCLES);
    cr_expect_leq(pttl, scripts, "%lld PTTL in %lld script calls: more than one a call", pttl,
                  scripts);
    cr_expect_leq(reads, 2 * CYCLES, "%lld GET and MGET in %d grants: more than two a grant", reads,
                  CYCLES);
    cr_expect_leq(zcard, CYCLES, "%lld ZCARD in %d grants: the queue counted again", zcard, CYCLES);
    redisFree(rc);
    dbt_keys_free(&keys);
}

/* Every command the scripts ran (INFO commandstats: the calls of all commands but EVAL and the
 * INFO and CONFIG the test sends), but HINCRBY: a release adds its hold to the histogram's sum
 * with one when the hold lasted 1 ms or more, which depends on the machine, not on the path (under
 * ASan beside make test's other lanes every hold did: grouped 31 against plain 26, where the
 * scripts' paths cost 30 and 26). Grouping adds none (its counts are ZADD INCR and ZREM). */
static long long commands_run(redisContext *rc)
{
    redisReply *r = redisCommand(rc, "INFO commandstats");
    cr_assert(r && r->type == REDIS_REPLY_STRING);
    long long n = 0;
    for (const char *at = strstr(r->str, "cmdstat_"); at; at = strstr(at + 1, "cmdstat_")) {
        if (!strncmp(at, "cmdstat_eval:", 13) || !strncmp(at, "cmdstat_info:", 13) ||
            !strncmp(at, "cmdstat_config|", 15) || !strncmp(at, "cmdstat_hincrby:", 16))
            continue;
        const char *calls = strstr(at, ":calls=");
        if (calls)
            n += atoll(calls + 7);
    }
    freeReplyObject(r);
    return n;
}

/* The commands an uncontended grant and release of ids "<cid>.<i>.64" ran (commands_run: HINCRBY
 * left out), per cycle: the fewest of TRIALS runs of CYCLES. A hold that falls in a histogram
 * bucket new to the pool costs a PEXPIRE more (a slow machine's holds of 1 ms and more): the
 * fewest counts the scripts' own path, which is what the comparison is about. */
static long long cycle_commands(const char *pool, const char *cid)
{
    enum { CYCLES = 20, TRIALS = 3 };
    dbt_config cfg = {.lease_ms = 10000, .redis_timeout_ms = 1000};
    dbt_keys keys;
    cr_assert(dbt_keys_init(&keys, "dbthrottle:", pool));
    redisContext *rc = test_redis_connect(&fx_redis);
    cr_assert_not_null(rc);
    long long fewest = -1;
    char id[64];
    for (int t = 0; t < TRIALS; t++) {
        long long n = 0;
        for (int i = 0; i <= CYCLES; i++) {
            if (i == 1) /* the first call made the pool's keys: count from the second */
                n = -commands_run(rc);
            snprintf(id, sizeof id, "%s.%d.64", cid, t * (CYCLES + 1) + i + 1);
            dbt_acquire_call a = {.id = id, .limit = 64, .who = "host 1 c1"};
            dbt_script_call c;
            dbt_build_acquire(&c, &keys, DBT_KIND_QUERY, &cfg, &a);
            run(rc, &c);
            dbt_build_release(&c, &keys, DBT_KIND_QUERY, &cfg, id, -1);
            run(rc, &c);
        }
        n += commands_run(rc);
        if (fewest < 0 || n / CYCLES < fewest)
            fewest = n / CYCLES;
    }
    redisFree(rc);
    dbt_keys_free(&keys);
    return fewest;
}

/* A process that shares with its host (an id "<G>~<cid>...") pays for the count of its group's
 * holders (docs/design.md, "Shares") on its uncontended path: its ZADD INCR at the grant and at
 * the release, and the ZREM of a count back at 0 (the set then empty, Redis deletes it), and
 * nothing else (a ZCARD of the holders and a DEL of the set went with each release). */
Test(script_cost, a_grouped_grant_pays_for_its_count_only, .timeout = 30)
{
    long long plain = cycle_commands("plain", "00000000000000ab");
    long long grouped = cycle_commands("grouped", "0123456789abcdef~00000000000000ab");
    cr_log_info("commands per uncontended grant and release: plain %lld, grouped %lld", plain,
                grouped);
    cr_expect_leq(grouped - plain, 4, "plain %lld, grouped %lld commands a grant and release",
                  plain, grouped);
}
