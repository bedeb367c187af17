/* route.c - where a connection goes, and Redis Cluster's redirections followed (see route.h). */
#include "route.h"
#include "route_step.h"

#include "clock.h"
#include "relay.h"
#include "sentinel.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

/* ---- what a connection's watch hears ------------------------------------------------------ */

/* A connection to a Sentinel-found master broke (an I/O error, a timeout, READONLY, closed by the
 * server): the master may be wrong now, and the next connect asks the sentinels again. */
static __thread bool relay_failed; /* dbt_route_take_relay_failure */

static void on_broken(dbt_redis *r)
{
    if (r->route.sentinel_gen)
        dbt_sentinel_master_failed(r->route.sentinel_gen);
    if (r->stalled || r->ended)
        relay_failed = true;
    dbt_relay_broken(r);
}

bool dbt_route_take_relay_failure(void)
{
    bool s = relay_failed;
    relay_failed = false;
    return s;
}

/* A MOVED: the map learns where the slot went, and the connection is given up (the pool's next
 * one goes to the new node). */
static bool on_misrouted(dbt_redis *r, const char *reply)
{
    return dbt_cluster_note_moved(reply, r->node_host, r->node_port);
}

static const dbt_redis_watch watch = {.broken = on_broken, .misrouted = on_misrouted};

/* ---- connecting -------------------------------------------------------------------------- */

/* A connection for the pool's keys (dbt_redis_ready) to ep, watched from its first command. */
static dbt_redis *connect_to(const dbt_config *cfg, const dbt_endpoint *ep, char *err)
{
    dbt_redis *r = dbt_redis_open(cfg, ep, cfg->redis.user, cfg->redis.password, err);
    if (r)
        r->watch = &watch;
    return dbt_redis_ready(cfg, r, err);
}

static dbt_endpoint url_endpoint(const dbt_config *cfg)
{
    dbt_endpoint ep = {.is_unix = cfg->redis.is_unix,
                       .host = cfg->redis.host,
                       .port = cfg->redis.port,
                       .path = cfg->redis.path};
    return ep;
}

dbt_redis *dbt_redis_connect(const dbt_config *cfg, char *err)
{
    return dbt_redis_connect_for(cfg, NULL, err);
}

/* Redis Cluster (cluster.c): the slot's primary, and the era token a migrated slot adopts. A
 * redis:// URL's server that says cluster_enabled:1 turns routing on; a connection it made to a
 * node that does not serve the route's slot is then made again, to the one that does. A Sentinel
 * URL names no server: its sentinels find the master, ROLE checked. */
dbt_redis *dbt_redis_connect_for(const dbt_config *cfg, const char *route, char *err)
{
    if (cfg->redis.nsentinels > 0) {
        uint64_t gen = 0;
        dbt_redis *r = dbt_sentinel_connect_master(cfg, &gen, err);
        if (r) {
            r->watch = &watch;
            r->route.sentinel_gen = gen;
        }
        return dbt_redis_ready(cfg, r, err);
    }
    int slot = route ? dbt_cluster_slot(route, strlen(route)) : -1;
    dbt_cluster_node node;
    bool routed = slot >= 0 && dbt_cluster_routing(cfg);
    if (routed && !dbt_cluster_node_for(cfg, slot, &node, err))
        return NULL;
    uint64_t gen = dbt_cluster_generation();
    dbt_endpoint ep = url_endpoint(cfg);
    if (routed)
        ep = (dbt_endpoint){.host = node.host, .port = node.port};
    int64_t relay_retry_us = 0;
    bool stalled = false;
    uint64_t relay_gen = dbt_relay_generation();
    dbt_redis *r = routed ? NULL : dbt_relay_connect(cfg, &relay_retry_us, &stalled, err);
    if (r) {
        r->watch = &watch;
        r->route.slot = slot;
        r->route.cluster_gen = gen;
        return r;
    }
    /* A relay found stopped while this connected spent the caller's time, not Redis': the direct
     * connection gets a budget of its own. */
    int64_t b = stalled ? dbt_redis_budget_anew(cfg->redis_timeout_ms) : 0;
    r = connect_to(cfg, &ep, err);
    if (stalled)
        dbt_redis_budget_end(b);
    if (r) {
        r->route.relay_retry_us = relay_retry_us;
        /* From before the connect: a change meanwhile (the share directory came) replaces it;
         * but for the stall just met, which would replace it at once. */
        r->route.relay_gen = stalled ? dbt_relay_generation() : relay_gen;
    }
    if (!r) {
        if (routed)
            dbt_cluster_node_failed(node.host, node.port);
        return NULL;
    }
    r->route.slot = slot;
    r->route.cluster_gen = gen;
    if (!routed && r->cluster_node && !cfg->redis.is_unix) {
        dbt_cluster_discovered();
        char merr[DBT_ERRLEN];
        routed = slot >= 0 && dbt_cluster_node_for(cfg, slot, &node, merr);
        if (routed && (node.port != r->node_port || strcmp(node.host, r->node_host) != 0)) {
            gen = dbt_cluster_generation();
            ep = (dbt_endpoint){.host = node.host, .port = node.port};
            dbt_redis_free(r);
            if (!(r = connect_to(cfg, &ep, err)))
                return NULL;
            r->route.slot = slot;
        }
        r->route.cluster_gen = gen;
    }
    if (routed)
        dbt_cluster_adopt_token(cfg, slot, r->route.adopt_token, sizeof r->route.adopt_token);
    return r;
}

dbt_redis *dbt_redis_connect_blind(const dbt_config *cfg, char *err)
{
    /* Behind Sentinel the master is known only from the sentinels' answers, and a Cluster's node
     * only from its slot map: nothing for a blind write to go to. */
    if (cfg->redis.nsentinels > 0 || dbt_cluster_routing(cfg)) {
        snprintf(err, DBT_ERRLEN, "redis: not behind Sentinel or Cluster");
        return NULL;
    }
    dbt_endpoint ep = url_endpoint(cfg);
    return dbt_redis_open_blind(cfg, &ep, cfg->redis.user, cfg->redis.password, err);
}

bool dbt_redis_outdated(const dbt_redis *r)
{
    return (r->route.sentinel_gen && r->route.sentinel_gen != dbt_sentinel_generation()) ||
           (r->relayed && r->route.relay_gen != dbt_relay_generation()) ||
           (r->route.relay_retry_us && (r->route.relay_gen != dbt_relay_generation() ||
                                        dbt_now_us() >= r->route.relay_retry_us));
}

bool dbt_redis_stale(dbt_redis *r)
{
    if (dbt_redis_broken(r))
        return true;
    if (dbt_redis_outdated(r)) {
        dbt_redis_give_up(r,
                          r->relayed                ? "the host's relay stalled or ended since"
                          : r->route.relay_retry_us ? "the host's relay may be used now"
                                                    : "the Sentinel master has changed since",
                          /* releases owed on it are sent again: twice is harmless */
                          r->relayed || r->route.relay_retry_us);
        return true;
    }
    /* Its node no longer serves the pool's slot: given up, and the releases whose replies are
     * still owed on it become owed operations (dbt_redis_take_failed), sent again to the new
     * node; dropped unread, they were neither landed nor owed, and each one's permit stayed held
     * for a whole lease. */
    uint64_t gen = dbt_cluster_generation();
    if (r->route.slot >= 0 && r->route.cluster_gen != gen) {
        if (!dbt_cluster_serves(r->route.slot, r->node_host, r->node_port)) {
            dbt_redis_give_up(r, "the cluster node no longer serves the pool's slot", true);
            return true;
        }
        r->route.cluster_gen = gen; /* checked against this map: no lock again until it changes */
    }
    return dbt_redis_closed(r);
}

/* ---- redirections ------------------------------------------------------------------------ */

/* How long TRYAGAIN (a slot being migrated) or CLUSTERDOWN waits before the call is tried again. */
#define REDIRECT_PAUSE_MS 10

dbt_route_step dbt_route_next(dbt_redirect k, int *moves, int64_t left_us)
{
    if (k == DBT_REDIR_NONE || left_us <= 0)
        return DBT_ROUTE_STOP;
    if (k == DBT_REDIR_MOVED)
        return (*moves)++ > 0 ? DBT_ROUTE_STOP : DBT_ROUTE_MOVED;
    if (k == DBT_REDIR_ASK)
        return DBT_ROUTE_ASK;
    return DBT_ROUTE_PAUSE;
}

/* Whether a call that failed with err is tried again (dbt_route_next), until `until_us`: after a
 * MOVED conns hears it, after TRYAGAIN or CLUSTERDOWN the pause is waited out here, and on ASK
 * *asking is set with the node in *ask. */
static bool redirected(const dbt_route_conns *conns, const char *err, int *moves, int64_t until_us,
                       dbt_cluster_node *ask, bool *asking)
{
    *asking = false;
    int64_t left_us = until_us - dbt_now_us();
    switch (dbt_route_next(dbt_cluster_redirect_of(err, NULL, ask), moves, left_us)) {
    case DBT_ROUTE_STOP:
        return false;
    case DBT_ROUTE_MOVED:
        /* The wake list moved with the slot: the caller's listener follows it now. */
        if (conns->moved)
            conns->moved(conns->ctx);
        return true;
    case DBT_ROUTE_ASK:
        return *asking = true;
    case DBT_ROUTE_PAUSE:
        break;
    }
    int64_t pause_us = REDIRECT_PAUSE_MS * 1000 < left_us ? REDIRECT_PAUSE_MS * 1000 : left_us;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)pause_us * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return dbt_now_us() < until_us;
}

/* ASK: this one call goes to the node that imports the slot, after ASKING, on a connection of its
 * own (the caller's connections stay with the slot's owner until a MOVED says otherwise). */
static redisReply *run_asking(const dbt_config *cfg, const dbt_cluster_node *to,
                              const char *from_run_id, dbt_route_op op, void *arg, char *err)
{
    dbt_endpoint ep = {.host = to->host, .port = to->port};
    dbt_redis *r = connect_to(cfg, &ep, err);
    if (!r)
        return NULL;
    /* The node that said ASK is the slot's owner, still a primary, migrating it: the keys that
     * reached the importing node came whole, with that owner's era, so they are adopted rather
     * than taken for a failover (a quarantine for every call of a slow migration). */
    snprintf(r->route.adopt_token, sizeof r->route.adopt_token, "%s", from_run_id);
    const char *argv[] = {"ASKING"};
    redisReply *ok = dbt_redis_command(r, 1, argv, NULL, err);
    redisReply *rep = ok ? op(r, arg, err) : NULL;
    if (ok)
        freeReplyObject(ok);
    dbt_redis_free(r);
    return rep;
}

/* Calls a relay reset unread (dbt_redis_undelivered) made again in one call, the last one
 * directly to Redis. When a host's processes end together, their speakers end one after another:
 * make test saw a cancel reset by two in a row (refused, in closed mode, for Redis' outage). */
#define UNDELIVERED_RESENDS 3

bool dbt_route_resend_undelivered(const dbt_redis *r, int *resends)
{
    if (!r || !dbt_redis_undelivered(r) || *resends >= UNDELIVERED_RESENDS)
        return false;
    if (++*resends == UNDELIVERED_RESENDS)
        dbt_relay_avoid(); /* not through the relay for a while: the last one goes to Redis */
    return true;
}

redisReply *dbt_route_run(const dbt_config *cfg, const dbt_route_conns *conns, dbt_route_op op,
                          void *arg, char *err)
{
    int64_t until_us = dbt_now_us() + cfg->redis_timeout_ms * 1000;
    int moves = 0, resends = 0;
    redisReply *rep = NULL;
    for (;;) {
        dbt_redis *r = conns->get(conns->ctx, err);
        rep = r ? op(r, arg, err) : NULL;
        /* The host's relay ended before it read the call: again, on a new connection (to the
         * next speaker, or to Redis). */
        bool again = !rep && dbt_route_resend_undelivered(r, &resends);
        char from_run_id[sizeof r->run_id] = "";
        if (r)
            snprintf(from_run_id, sizeof from_run_id, "%s", r->run_id);
        conns->put(conns->ctx, r);
        if (again)
            continue;
        dbt_cluster_node ask;
        bool asking;
        if (rep || !redirected(conns, err, &moves, until_us, &ask, &asking))
            break;
        if (!asking)
            continue;
        rep = run_asking(cfg, &ask, from_run_id, op, arg, err);
        if (rep || !redirected(conns, err, &moves, until_us, &ask, &asking))
            break;
    }
    return rep;
}

/* ---- for a caller that keeps no connection per pool ---------------------------------------- */

typedef struct {
    const dbt_config *cfg;
    const char *route;
} own_conns;

static dbt_redis *own_get(void *ctx, char *err)
{
    const own_conns *o = ctx;
    return dbt_redis_connect_for(o->cfg, o->route, err);
}

static void own_put(void *ctx, dbt_redis *r)
{
    (void)ctx;
    dbt_redis_free(r);
}

redisReply *dbt_route_run_for(const dbt_config *cfg, dbt_redis *r, const char *route,
                              dbt_route_op op, void *arg, char *err)
{
    if (!dbt_cluster_routing(cfg))
        return op(r, arg, err);
    own_conns o = {cfg, route};
    dbt_route_conns conns = {.get = own_get, .put = own_put, .moved = NULL, .ctx = &o};
    return dbt_route_run(cfg, &conns, op, arg, err);
}
