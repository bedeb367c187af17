/* redis_errors.h - which Redis errors are configuration errors (permanent) and which pass with
 * time (transient): the table of docs/configuration.md, "Redis errors". */
#ifndef DBT_REDIS_ERRORS_H
#define DBT_REDIS_ERRORS_H

#include <stdbool.h>
#include <stddef.h>

/* Room for the description of a permanent error (struct dbt_pool's misconfig). */
#define DBT_MISCONFIG_LEN 256

/* True when err, a message of a dbt_redis_* call (redis_conn.h), says the configuration is wrong:
 * authentication or authorisation refused, a DB index out of range, a host name that does not
 * resolve, a server that is not Redis or too old for the scripts, or one that may evict the
 * pool's keys. Then why gets one line (at most cap bytes) naming the cause and what to fix. Every
 * other error (a refused, reset or timed-out connection, LOADING, BUSY, a restart, anything not
 * recognised) is transient: false, why untouched. Pure. */
bool dbt_redis_error_permanent(const char *err, char *why, size_t cap);

#endif
