/* Which Redis errors are configuration errors (refused whatever DBTHROTTLE_ON_REDIS_ERROR says)
 * and which are outages (open or closed as configured): the table of docs/configuration.md. The
 * messages are those real Redis 7 and hiredis give, as dbt_redis_* pass them on. */
#include "redis_errors.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

Test(redis_errors, configuration_errors_are_permanent_and_name_the_fix)
{
    struct {
        const char *err, *cause;
    } cases[] = {
        {"redis 127.0.0.1:6379: AUTH failed: WRONGPASS invalid username-password pair or user is "
         "disabled.",
         "WRONGPASS"},
        {"redis: NOAUTH Authentication required.", "gives none"},
        {"redis 127.0.0.1:6379: AUTH failed: ERR AUTH <password> called without any password "
         "configured for the default user. Are you sure your configuration is correct?",
         "none configured"},
        {"redis: NOPERM this user has no permissions to run the 'evalsha' command", "NOPERM"},
        {"redis: NOPERM this user has no permissions to access one of the keys used as arguments",
         "NOPERM"},
        {"redis: ERR The user executing the script can't run this command or subcommand script: "
         "bcb6, on @user_script:1.",
         "may not run"},
        {"redis 127.0.0.1:6379: SELECT 99 failed: ERR DB index is out of range", "database"},
        /* As dbt_redis_connect really writes them: the step's message keeps its "redis: ". */
        {"redis 127.0.0.1:6379: AUTH failed: redis: WRONGPASS invalid username-password pair or "
         "user is disabled.",
         "WRONGPASS"},
        {"redis 127.0.0.1:6379: AUTH failed: redis: ERR AUTH <password> called without any "
         "password configured for the default user. Are you sure your configuration is "
         "correct?",
         "none configured"},
        {"redis 127.0.0.1:6379: SELECT 99 failed: redis: ERR DB index is out of range", "database"},
        {"redis 127.0.0.1:6379: redis: NOPERM this user has no permissions to run the 'script' "
         "command",
         "NOPERM"},
        {"redis no-such-host.invalid:6379: Name or service not known", "does not resolve"},
        {"redis h:6379: No address associated with hostname", "no address"},
        {"redis 127.0.0.1:6379: ERR unknown command 'EVALSHA', with args beginning with: ",
         "not Redis"},
        {"redis: Protocol error, got \"H\" as reply type byte", "protocol"},
        /* A cluster (or a proxy) that splits a script's keys, which share one hash tag, never
         * stops by itself. */
        {"redis: CROSSSLOT Keys in request don't hash to the same slot", "CROSSSLOT"},
        {"redis 127.0.0.1:7000: SELECT 2 failed: ERR SELECT is not allowed in cluster mode",
         "cluster mode"},
        /* Every dbthrottle key has one type, so a key of another type under its name belongs to
         * another program sharing the prefix: it never passes by itself (it was transient, and
         * open mode then ran unthrottled for life). */
        {"redis: WRONGTYPE Operation against a key holding the wrong kind of value script: "
         "0523826e14637c1cc9153c8506277da7a8456298, on @user_script:1.",
         "DBTHROTTLE_KEY_PREFIX"},
        {"Redis' maxmemory-policy is allkeys-lru, which may evict the pool's keys (each has a "
         "TTL) and over-admit: set maxmemory-policy noeviction in Redis",
         "noeviction"},
        {"Redis 6.2.1 is older than 7.0, which the scripts need: upgrade Redis or fix "
         "DBTHROTTLE_REDIS_URL",
         "upgrade"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[256] = "";
        cr_expect(dbt_redis_error_permanent(cases[i].err, false, why, sizeof why), "transient: %s",
                  cases[i].err);
        cr_expect(strstr(why, cases[i].cause) != NULL, "%s -> %s", cases[i].err, why);
        /* Each names what to fix: a setting, the worker ACL, or Redis' own setting. */
        cr_expect(strstr(why, "DBTHROTTLE_REDIS_URL") || strstr(why, "maxmemory-policy") ||
                      strstr(why, "DBTHROTTLE_KEY_PREFIX"),
                  "%s", why);
        cr_expect(strncmp(why, "redis ", 6) != 0, "kept the address prefix: %s", why);
    }
}

Test(redis_errors, outages_are_transient)
{
    const char *transient[] = {
        "redis 127.0.0.1:6379: Connection refused",
        "redis: timed out waiting for a reply",
        "redis: timed out (DBTHROTTLE_REDIS_TIMEOUT spent)",
        "redis: Connection reset by peer",
        "redis: Server closed the connection",
        "redis: connection lost",
        "redis: LOADING Redis is loading the dataset in memory",
        ("redis: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
         "NOSCRIPT."),
        "redis: MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "redis: READONLY You can't write against a read only replica.",
        "redis: OOM command not allowed when used memory > 'maxmemory'.",
        /* Redis Cluster's redirections: followed (cluster.c), and while they last (a slot
         * being migrated, a failover) an outage, never a configuration error. */
        "redis: MOVED 3999 127.0.0.1:6381",
        "redis 127.0.0.1:7000: MOVED 3999 127.0.0.1:6381",
        "redis: ASK 3999 127.0.0.1:6381",
        "redis: TRYAGAIN Multiple keys request during rehashing of slot",
        "redis: CLUSTERDOWN The cluster is down",
        "redis h:6379: Temporary failure in name resolution",
        "redis: NOSCRIPT No matching script. Please use EVAL.",
        "",
    };
    for (size_t i = 0; i < sizeof transient / sizeof *transient; i++) {
        char why[64] = "untouched";
        cr_expect(!dbt_redis_error_permanent(transient[i], false, why, sizeof why), "permanent: %s",
                  transient[i]);
        cr_expect_str_eq(why, "untouched");
    }
    cr_expect(!dbt_redis_error_permanent(NULL, false, NULL, 0));
}

/* Docker's embedded DNS and Kubernetes' headless services answer NXDOMAIN while the Redis
 * container or pod restarts: a name that resolved once in this process and no longer does is an
 * outage, not a typo (permanent, it refused the whole fleet even in open mode). Only a first
 * connect that never resolved it is a configuration error. */
Test(redis_errors, an_unknown_host_is_permanent_only_before_the_first_connect)
{
    const char *unresolved[] = {"redis redis.orders.svc:6379: Name or service not known",
                                "redis redis:6379: No address associated with hostname"};
    for (size_t i = 0; i < sizeof unresolved / sizeof *unresolved; i++) {
        char why[256] = "untouched";
        cr_expect(dbt_redis_error_permanent(unresolved[i], false, why, sizeof why),
                  "never reached, yet transient: %s", unresolved[i]);
        cr_expect(strstr(why, "DBTHROTTLE_REDIS_URL"), "%s", why);
        snprintf(why, sizeof why, "untouched");
        cr_expect(!dbt_redis_error_permanent(unresolved[i], true, why, sizeof why),
                  "reached before, yet permanent: %s", unresolved[i]);
        cr_expect_str_eq(why, "untouched");
    }
    /* The other configuration errors stay permanent after a first connect: they are what a
     * password rotated, an ACL changed or a policy set on the running Redis looks like. */
    char why[256];
    cr_expect(dbt_redis_error_permanent("redis 127.0.0.1:6379: AUTH failed: WRONGPASS invalid "
                                        "username-password pair or user is disabled.",
                                        true, why, sizeof why));
    cr_expect(dbt_redis_error_permanent("redis: NOPERM this user has no permissions to run the "
                                        "'blpop' command",
                                        true, why, sizeof why));
}

/* Only the error code that starts Redis' reply, after the prefix the library adds, and hiredis'
 * own messages in their exact form are read: a word of a host name, a socket path or the text a
 * Lua error quotes is not the error (each of these was taken for a permanent one). */
Test(redis_errors, only_the_code_that_starts_the_reply_counts)
{
    const char *transient[] = {
        "redis NOPERM.internal:6379: Connection refused",
        "redis unix:/run/NOAUTH/redis.sock: Connection refused",
        "redis wrongpass-cache.example:6379: timed out waiting for a reply",
        ("redis: ERR user_script:1: NOPERM fake script: 2a86aa8d0ecfbd983e5a4550fc6600c4ced67316, "
         "on @user_script:1."),
        "redis: LOADING Redis is loading the dataset in memory (NOAUTH clients wait)",
        "redis: BUSY Redis is busy running a script (WRONGTYPE keys, MOVED slots)",
        "redis h:6379: Name or service not known, or so a proxy says",
        "acquire returned an unexpected reply: ERR unknown command",
        "out of memory",
    };
    for (size_t i = 0; i < sizeof transient / sizeof *transient; i++) {
        char why[64] = "untouched";
        cr_expect(!dbt_redis_error_permanent(transient[i], false, why, sizeof why),
                  "permanent: %s -> %s", transient[i], why);
    }
    /* The reply, after each prefix the library writes. */
    cr_expect_str_eq(dbt_redis_error_reply("redis: NOPERM x"), "NOPERM x");
    cr_expect_str_eq(dbt_redis_error_reply("redis ::1:6379: AUTH failed: WRONGPASS x"),
                     "WRONGPASS x");
    cr_expect_str_eq(dbt_redis_error_reply("redis h:1: SELECT 12 failed: ERR DB index is out"),
                     "ERR DB index is out");
    cr_expect_str_eq(dbt_redis_error_reply("redis h:1: AUTH failed: redis: NOAUTH x"), "NOAUTH x");
    cr_expect_str_eq(dbt_redis_error_reply("redis unix:/tmp/r.sock: Connection refused"),
                     "Connection refused");
    cr_expect_null(dbt_redis_error_reply("out of memory"));
    cr_expect_null(dbt_redis_error_reply("rediscover: x"));
}
