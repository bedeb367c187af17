/* route.h - where a connection to the configured Redis goes, and the one policy that follows
 * Redis Cluster's redirections, for the library and the dbthrottle command alike.
 *
 * The server is the URL's, the master its sentinels name (sentinel.h), or the primary that
 * serves a pool's hash slot (cluster.h). redis_conn.h below knows none of this: this file sets
 * each connection's watch and route notes, and checks them before a connection is used again.
 * The names callers knew before (dbt_redis_connect, _connect_for, _stale, _outdated) are kept. */
#ifndef DBT_ROUTE_H
#define DBT_ROUTE_H

#include "cluster.h"
#include "redis_conn.h"

#include <stdbool.h>
#include <stdint.h>

/* Connects to cfg's Redis (the URL's server, or its Sentinel's master), selects the db, loads the
 * scripts and reads INFO (see server_problem). Returns NULL with a one-line message (without the
 * password) in err; dbt_redis_error_permanent (redis_errors.h) tells a configuration error from
 * an outage by it. */
dbt_redis *dbt_redis_connect(const dbt_config *cfg, char *err);

/* The same for the keys of one pool: `route` is the pool's key base (dbt_keys.base, which
 * carries its {pool} hash tag). With Redis Cluster the connection goes to the primary that serves
 * the route's slot; else, as dbt_redis_connect (route NULL: always). */
dbt_redis *dbt_redis_connect_for(const dbt_config *cfg, const char *route, char *err);

/* A connection to the URL's server for commands written blind (dbt_redis_open_blind); NULL (err
 * set) behind Sentinel or with Redis Cluster, whose server only their answers name, and over TLS.
 */
dbt_redis *dbt_redis_connect_blind(const dbt_config *cfg, char *err);

/* True when the connection was made to a Sentinel master that has since changed or been found
 * wrong (a newer generation), or to the host's relay before it stalled (relay.h): pools drop it
 * rather than use it. */
bool dbt_redis_outdated(const dbt_redis *r);

/* Whether a connection to the host's relay broke in this thread since the last call by the
 * relay's fault, not Redis': its reply did not come in time and the speaker is stopped (this
 * process now connects directly for a while), or the relay closed it after reading the call
 * (its speaker ended: the next connection goes to the next speaker, or directly). Either way the
 * call may or may not have reached Redis. Clears it. */
bool dbt_route_take_relay_failure(void);

/* After a call that failed on r: whether to make it again, on a new connection, because the host's
 * relay reset r before reading it (dbt_redis_undelivered: Redis never saw it, so any call may go
 * again). At most 3 times per call (*resends counts them, 0 at its start); before the third,
 * the relay is avoided for a while (dbt_relay_avoid): a new connection for it goes to Redis
 * directly (an idle one of the pool, to the next speaker, may still serve it). */
bool dbt_route_resend_undelivered(const dbt_redis *r, int *resends);

/* True when the connection cannot be used: broken, made to a Sentinel master that has changed
 * since (dbt_redis_outdated), to a Cluster node that no longer serves its slot (the replies it
 * still owes become failed: dbt_redis_take_failed), or (with no reply owed) closed by the server
 * while it sat idle (dbt_redis_closed). A stale connection is marked broken. */
bool dbt_redis_stale(dbt_redis *r);

/* ---- running a call where its keys are ----------------------------------------------------- */

/* One call (a script's, say) on a connection: its reply, or NULL with a message in err. */
typedef redisReply *(*dbt_route_op)(dbt_redis *r, void *arg, char *err);

/* Where a routed call takes its connections, and whom it tells that a slot moved. */
typedef struct {
    /* A connection to the server of the call's keys (a pool's, or one of its own): NULL with a
     * message in err. */
    dbt_redis *(*get)(void *ctx, char *err);
    /* Given back after each try, broken or not (NULL when get failed: nothing to do). */
    void (*put)(void *ctx, dbt_redis *r);
    /* A MOVED is followed: the slot is served by another node now. NULL: no one to tell. */
    void (*moved)(void *ctx);
    void *ctx;
} dbt_route_conns;

/* Runs op on a connection of conns and follows Redis Cluster's redirections, all within one
 * DBTHROTTLE_REDIS_TIMEOUT from now: once after MOVED (the map names the new node now, and
 * connections to the old one are dropped as they come: dbt_redis_stale); at once to the node an
 * ASK names, after ASKING, on a connection of its own (the call adopts the era of the node that
 * said ASK: the slot is migrating from it whole); after a 10 ms pause on TRYAGAIN and CLUSTERDOWN
 * (a migration's last keys, a failover). Returns op's reply, or NULL with the last error. */
redisReply *dbt_route_run(const dbt_config *cfg, const dbt_route_conns *conns, dbt_route_op op,
                          void *arg, char *err);

/* dbt_route_run for a caller that keeps no connection per pool (the dbthrottle command): on r,
 * or, when cfg routes by slot, on a connection of its own to the primary that serves `route`'s
 * slot (dbt_redis_connect_for), made for each try. */
redisReply *dbt_route_run_for(const dbt_config *cfg, dbt_redis *r, const char *route,
                              dbt_route_op op, void *arg, char *err);

#endif
