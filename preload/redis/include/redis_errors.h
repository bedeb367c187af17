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
 * resolve (only while reached_before is false: once this pool has reached Redis, the name
 * vanishing is a restart behind container DNS), a server that is not Redis or too old for the
 * scripts, one that may evict the pool's keys, a cluster that splits a pool's keys over slots
 * (CROSSSLOT), or a key prefix shared with another application (WRONGTYPE). Only the error code
 * that starts Redis' reply (after the prefix dbt_redis_* adds) and hiredis' own messages in their
 * exact form are read. Then why gets one line (at most cap bytes) naming the cause and what to fix.
 * Every other error (a refused, reset or timed-out connection, LOADING, BUSY, a cluster's MOVED,
 * ASK, TRYAGAIN or CLUSTERDOWN, a restart, anything not recognised) is transient: false, why
 * untouched. Pure. */
bool dbt_redis_error_permanent(const char *err, bool reached_before, char *why, size_t cap);

/* The Redis error reply (or hiredis' message) in err, after the prefix dbt_redis_* adds
 * ("redis[ WHERE]: ", and at connect "AUTH failed: " or "SELECT N failed: "); NULL when err has
 * no such prefix. Pure. */
const char *dbt_redis_error_reply(const char *err);

#endif
