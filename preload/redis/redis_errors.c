/* redis_errors.c - telling a configuration error from an outage by what Redis (or the resolver)
 * said. Redis starts each error reply with a code (WRONGPASS, NOAUTH, NOPERM, ...); some older
 * ones, and errors from inside a script, only have words: both are matched. */
#include "redis_errors.h"

#include <stdio.h>
#include <string.h>

typedef struct {
    const char *needle; /* found anywhere in the message */
    const char *why;    /* the cause, and the setting or server setting to fix */
} permanent_error;

static const permanent_error permanent[] = {
    {"WRONGPASS", "Redis refused the user or password (WRONGPASS): fix the credentials in "
                  "DBTHROTTLE_REDIS_URL"},
    {"invalid password", "Redis refused the password: fix it in DBTHROTTLE_REDIS_URL"},
    {"NOAUTH", "Redis requires a password and DBTHROTTLE_REDIS_URL gives none (NOAUTH): add "
               "it, redis://[user]:password@host"},
    {"without any password configured",
     "DBTHROTTLE_REDIS_URL gives a password but Redis has none configured: remove it from "
     "DBTHROTTLE_REDIS_URL or set one in Redis"},
    {"NOPERM", "the Redis user of DBTHROTTLE_REDIS_URL lacks a permission the scripts need "
               "(NOPERM): grant the worker ACL of docs/operations.md"},
    {"user executing the script can't",
     "the Redis user of DBTHROTTLE_REDIS_URL may not run a command or key the scripts use: "
     "grant the worker ACL of docs/operations.md"},
    {"DB index is out of range", "the database number in DBTHROTTLE_REDIS_URL does not exist "
                                 "in Redis (its `databases` setting): fix DBTHROTTLE_REDIS_URL"},
    {"invalid DB index", "the database number in DBTHROTTLE_REDIS_URL is not valid in this "
                         "Redis: fix DBTHROTTLE_REDIS_URL"},
    /* getaddrinfo's EAI_NONAME and EAI_NODATA (EAI_AGAIN, "Temporary failure in name
     * resolution", is a resolver that may come back: transient). */
    {"Name or service not known", "the host name in DBTHROTTLE_REDIS_URL does not resolve: fix "
                                  "DBTHROTTLE_REDIS_URL"},
    {"No address associated with hostname", "the host name in DBTHROTTLE_REDIS_URL has no "
                                            "address: fix DBTHROTTLE_REDIS_URL"},
    {"unknown command", "the server of DBTHROTTLE_REDIS_URL is not Redis, or too old for the "
                        "scripts (Redis 7.0 or newer): fix DBTHROTTLE_REDIS_URL or upgrade"},
    {"Protocol error", "the server of DBTHROTTLE_REDIS_URL does not speak the Redis protocol: "
                       "fix DBTHROTTLE_REDIS_URL"},
    /* What dbt_redis_connect found in INFO (its message says it all). */
    {"maxmemory-policy", NULL},
    {"older than 7.0", NULL},
};

bool dbt_redis_error_permanent(const char *err, char *why, size_t cap)
{
    if (!err)
        return false;
    for (size_t i = 0; i < sizeof permanent / sizeof *permanent; i++)
        if (strstr(err, permanent[i].needle)) {
            if (permanent[i].why) {
                snprintf(why, cap, "%s", permanent[i].why);
            } else {
                /* The connect's own message, after its "redis HOST:PORT: " prefix. */
                const char *own = strstr(err, permanent[i].needle);
                const char *start = err;
                for (const char *p = err; p < own; p++)
                    if (p[0] == ':' && p[1] == ' ')
                        start = p + 2;
                snprintf(why, cap, "%s", start);
            }
            return true;
        }
    return false;
}
