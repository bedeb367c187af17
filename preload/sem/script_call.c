/* script_call.c - one way to run a script call, for every caller (see script_call.h). */
#include "script_call.h"
#include "clock.h"
#include "cluster.h"
#include "listener.h"
#include "pool.h"
#include "renewer.h"

#include <errno.h>
#include <stdio.h>
#include <time.h>

/* c's era arguments become those of r's server (dbt_script_bind_era), and a slot r's node took
 * over whole names the server it came from (cluster.c's adopt token: no quarantine for it). */
static void bind_server(dbt_script_call *c, const dbt_redis *r)
{
    dbt_script_bind_era(c, r->run_id, r->started_ms);
    dbt_script_bind_clock(c, r->run_id, r->clock_ahead_ms, r->clock_at_us, dbt_now_us());
    /* Copied into the call: the connection may be gone by its next try (an ASK's one-off
     * connection, one given up after MOVED), and a try on another connection must not carry it. */
    if (r->adopt_token[0] || c->args[DBT_ARG_ADOPT] == c->adopt) {
        snprintf(c->adopt, sizeof c->adopt, "%s", r->adopt_token);
        c->args[DBT_ARG_ADOPT] = c->adopt;
    }
}

redisReply *dbt_script_run(dbt_redis *r, dbt_script_call *c, dbt_reply_parser parse, void *out,
                           char *err)
{
    bind_server(c, r);
    redisReply *rep = dbt_redis_eval(r, c->script, c->nkeys, c->keys, c->nargs, c->args, err);
    if (rep && !parse(rep, out, err)) {
        freeReplyObject(rep);
        rep = NULL;
    }
    return rep;
}

/* ---- Redis Cluster redirections, for every script call of the library -------------------- */

/* How long TRYAGAIN (a slot being migrated) or CLUSTERDOWN waits before the call is tried again. */
#define REDIRECT_PAUSE_MS 10

/* ASK: this one call goes to the node that imports the slot, after ASKING, on a connection of its
 * own (the pool's connections stay with the slot's owner until a MOVED says otherwise). */
static redisReply *run_asking(dbt_pool *p, const dbt_cluster_node *to, const char *from_run_id,
                              dbt_script_call *c, dbt_reply_parser parse, void *out, char *err)
{
    dbt_endpoint ep = {.host = to->host, .port = to->port};
    dbt_redis *r = dbt_redis_connect_at(p->client->cfg, &ep, err);
    if (!r)
        return NULL;
    /* The node that said ASK is the slot's owner, still a primary, migrating it: the keys that
     * reached the importing node came whole, with that owner's era, so they are adopted rather
     * than taken for a failover (a quarantine for every call of a slow migration). */
    snprintf(r->adopt_token, sizeof r->adopt_token, "%s", from_run_id);
    const char *argv[] = {"ASKING"};
    redisReply *ok = dbt_redis_command(r, 1, argv, NULL, err);
    redisReply *rep = ok ? dbt_script_run(r, c, parse, out, err) : NULL;
    if (ok)
        freeReplyObject(ok);
    dbt_redis_free(r);
    return rep;
}

/* Whether a call that failed with err is tried again, within one DBTHROTTLE_REDIS_TIMEOUT from
 * `until_us` back: once after MOVED (the map now names the new node, and the pool's connections
 * to the old one are dropped as they come: dbt_redis_stale), after a short pause on TRYAGAIN and
 * CLUSTERDOWN (both pass: a migration's last keys, a failover), and at once to the named node on
 * ASK (*ask set). */
static bool redirected(dbt_pool *p, const char *err, int *moves, int64_t until_us,
                       dbt_cluster_node *ask, bool *asking)
{
    *asking = false;
    dbt_redirect k = dbt_cluster_redirect_of(err, NULL, ask);
    int64_t left_us = until_us - dbt_now_us();
    if (k == DBT_REDIR_NONE || left_us <= 0)
        return false;
    if (k == DBT_REDIR_MOVED) {
        if ((*moves)++ > 0)
            return false;
        /* The wake list moved with the slot: the listener follows it now. */
        pthread_mutex_lock(&p->mu);
        dbt_listener_moved(p);
        pthread_mutex_unlock(&p->mu);
        return true;
    }
    if (k == DBT_REDIR_ASK)
        return *asking = true;
    int64_t pause_us = REDIRECT_PAUSE_MS * 1000 < left_us ? REDIRECT_PAUSE_MS * 1000 : left_us;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)pause_us * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
    return dbt_now_us() < until_us;
}

redisReply *dbt_pool_run(dbt_pool *p, const char *what, dbt_script_call *c, dbt_reply_parser parse,
                         void *out, char *err)
{
    int64_t until_us = dbt_now_us() + p->client->cfg->redis_timeout_ms * 1000;
    int moves = 0;
    redisReply *rep = NULL;
    for (;;) {
        dbt_redis *r = dbt_pool_get_conn(p, err);
        if (r)
            dbt_pool_era_prev(p, c->era_prev);
        rep = r ? dbt_script_run(r, c, parse, out, err) : NULL;
        char from_run_id[sizeof r->run_id] = "";
        if (r)
            snprintf(from_run_id, sizeof from_run_id, "%s", r->run_id);
        dbt_pool_put_conn(p, r);
        dbt_cluster_node ask;
        bool asking;
        if (rep || !redirected(p, err, &moves, until_us, &ask, &asking))
            break;
        if (!asking)
            continue;
        rep = run_asking(p, &ask, from_run_id, c, parse, out, err);
        if (rep || !redirected(p, err, &moves, until_us, &ask, &asking))
            break;
    }
    if (!rep)
        dbt_pool_note_error(p, what, err);
    return rep;
}

bool dbt_pool_send(dbt_pool *p, const char *what, dbt_script_call *c, const char *tag, char *err)
{
    dbt_redis *r = dbt_pool_get_conn(p, err);
    if (r) {
        dbt_pool_era_prev(p, c->era_prev);
        bind_server(c, r);
    }
    bool ok =
        r && dbt_redis_eval_nowait(r, c->script, c->nkeys, c->keys, c->nargs, c->args, tag, err);
    dbt_pool_put_conn(p, r);
    if (!ok)
        dbt_pool_note_error(p, what, err);
    else if (tag)
        dbt_renewer_drain_soon(p); /* its reply is read soon, even if the process goes idle */
    return ok;
}
