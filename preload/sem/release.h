/* release.h - giving permits and places back to Redis (release.c). All without p->mu. */
#ifndef DBT_RELEASE_H
#define DBT_RELEASE_H

#include "pool_types.h"

/* release.lua for id within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together; deferred if it
 * cannot be sent. */
void dbt_send_release(dbt_pool *p, dbt_kind kind, const char *id, int64_t held_ms);
/* Sends cancel.lua for id: true when Redis answered (*returned: it had granted it meanwhile,
 * and passed it on). gave_up: its waiter gave up (counted as cancelled), else only a place not
 * needed any more (DBT_OWED_WITHDRAW). */
bool dbt_cancel_id(dbt_pool *p, dbt_kind kind, const char *id, bool gave_up, bool *returned);
/* Withdraws id from the queue, or gives it back if Redis granted it (cancel.lua), within one
 * Redis timeout; kept and sent later if Redis cannot be reached. what: DBT_OWED_CANCEL or
 * DBT_OWED_WITHDRAW. */
void dbt_send_cancel(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id);
/* cancel.lua for slot s, whose waiter gave up, within one Redis timeout, or deferred if it
 * fails; traces a grant it gave back (one Redis had granted as its waiter gave up). */
void dbt_cancel_in_redis(dbt_pool *p, struct dbt_slot *s);
/* At exit, within the caller's budget (one DBTHROTTLE_REDIS_TIMEOUT for the whole exit): ops[n]
 * (cap at most) written without waiting, then every reply owed on the pool's idle connections
 * read; what failed, and what p->deferred holds then, is sent once more. Tried whatever the
 * outage backoff says: Redis may be back since the call that set it. Uses ops as room. */
void dbt_settle_at_exit(dbt_pool *p, dbt_owed_op *ops, int n, int cap);
/* Sends the releases and cancels kept during an outage; each stays owed until written. */
void dbt_flush_deferred(dbt_pool *p);

#endif
