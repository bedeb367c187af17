/* Sentinel's errors as dbt_redis_error_permanent classifies them (issue 16): an unknown master
 * name and refused sentinel credentials are configuration errors; no sentinel answering, a master
 * that is not (yet) the master, and READONLY are outages. The texts are sentinel.c's. */
#include "redis_errors.h"

#include <criterion/criterion.h>
#include <string.h>

Test(sentinel_errors, configuration_errors_are_permanent_and_name_the_setting)
{
    const struct {
        const char *err, *setting;
    } permanent[] = {
        {"Redis Sentinel does not know the master \"nosuch\" named by DBTHROTTLE_REDIS_URL "
         "(asked: 127.0.0.1:26379 (does not know the master)): fix the master name in "
         "DBTHROTTLE_REDIS_URL",
         "DBTHROTTLE_REDIS_URL"},
        {"Redis Sentinel refused our credentials (127.0.0.1:26379 (redis 127.0.0.1:26379: AUTH "
         "failed: redis: WRONGPASS invalid username-password pair or user is disabled.)): set "
         "the sentinels' password in DBTHROTTLE_SENTINEL_PASSWORD_FILE (and their user in "
         "DBTHROTTLE_SENTINEL_USER)",
         "DBTHROTTLE_SENTINEL_PASSWORD_FILE"},
    };
    for (size_t i = 0; i < sizeof permanent / sizeof *permanent; i++) {
        char why[512] = "";
        cr_expect(dbt_redis_error_permanent(permanent[i].err, true, why, sizeof why),
                  "transient: %s", permanent[i].err);
        cr_expect(strstr(why, permanent[i].setting) != NULL, "%s", why);
    }
}

Test(sentinel_errors, outages_are_transient)
{
    /* The long message is one string with its parts in parentheses (clang's
     * -Wstring-concatenation takes two adjacent literals in an array for a missing comma). */
    const char *transient[] = {
        ("redis-sentinel: no sentinel answered for master mymaster (tried 127.0.0.1:1 (redis "
         "127.0.0.1:1: Connection refused), h:26379 (redis h:26379: Name or service not known))"),
        "redis-sentinel: master mymaster: redis: ROLE does not say master (a failover under way?)",
        "redis-sentinel: master mymaster: redis 127.0.0.1:6380: Connection refused",
        "redis: READONLY You can't write against a read only replica.",
    };
    for (size_t i = 0; i < sizeof transient / sizeof *transient; i++) {
        char why[64] = "untouched";
        cr_expect(!dbt_redis_error_permanent(transient[i], false, why, sizeof why), "permanent: %s",
                  transient[i]);
    }
}
