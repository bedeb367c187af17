/* Which Redis errors are configuration errors (refused whatever DBTHROTTLE_ON_REDIS_ERROR says)
 * and which are outages (open or closed as configured): the table of docs/configuration.md. The
 * messages are those real Redis 7 and hiredis give, as dbt_redis_* pass them on. */
#include "redis_errors.h"

#include <criterion/criterion.h>
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
        {"redis no-such-host.invalid:6379: Name or service not known", "does not resolve"},
        {"redis h:6379: No address associated with hostname", "no address"},
        {"redis 127.0.0.1:6379: ERR unknown command 'EVALSHA', with args beginning with: ",
         "not Redis"},
        {"redis: Protocol error, got \"H\" as reply type byte", "protocol"},
        {"Redis' maxmemory-policy is allkeys-lru, which may evict the pool's keys (each has a "
         "TTL) and over-admit: set maxmemory-policy noeviction in Redis",
         "noeviction"},
        {"Redis 6.2.1 is older than 7.0, which the scripts need: upgrade Redis or fix "
         "DBTHROTTLE_REDIS_URL",
         "upgrade"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[256] = "";
        cr_expect(dbt_redis_error_permanent(cases[i].err, why, sizeof why), "transient: %s",
                  cases[i].err);
        cr_expect(strstr(why, cases[i].cause) != NULL, "%s -> %s", cases[i].err, why);
        /* Each names what to fix: a setting, the worker ACL, or Redis' own setting. */
        cr_expect(strstr(why, "DBTHROTTLE_REDIS_URL") || strstr(why, "maxmemory-policy"), "%s",
                  why);
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
        "redis: BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN "
        "NOSCRIPT.",
        "redis: MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "redis: READONLY You can't write against a read only replica.",
        "redis: OOM command not allowed when used memory > 'maxmemory'.",
        "redis: WRONGTYPE Operation against a key holding the wrong kind of value",
        "redis h:6379: Temporary failure in name resolution",
        "redis: NOSCRIPT No matching script. Please use EVAL.",
        "",
    };
    for (size_t i = 0; i < sizeof transient / sizeof *transient; i++) {
        char why[64] = "untouched";
        cr_expect(!dbt_redis_error_permanent(transient[i], why, sizeof why), "permanent: %s",
                  transient[i]);
        cr_expect_str_eq(why, "untouched");
    }
    cr_expect(!dbt_redis_error_permanent(NULL, NULL, 0));
}
