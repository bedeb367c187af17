/* script_call.c - a script call on a pool's connections (see script_call.h), each try run by
 * script_run.c. */
#include "script_call.h"
#include "pool.h"

/* ---- a script call on the pool's connections, routed (route.h) ---------------------------- */

typedef struct {
    dbt_pool *p;
    dbt_script_call *c;
    dbt_reply_parser parse;
    void *out;
} pool_call;

static redisReply *run_call(dbt_redis *r, void *arg, char *err)
{
    pool_call *x = arg;
    return dbt_script_run(r, x->c, x->parse, x->out, err);
}

static dbt_redis *get_conn(void *ctx, char *err)
{
    pool_call *x = ctx;
    dbt_redis *r = dbt_pool_get_conn(x->p, err);
    if (r)
        dbt_pool_era_prev(x->p, x->c->era_prev);
    return r;
}

static void put_conn(void *ctx, dbt_redis *r)
{
    dbt_pool_put_conn(((pool_call *)ctx)->p, r);
}

/* The wake list moved with the slot: the listener follows it now. */
static void slot_moved(void *ctx)
{
    dbt_pool *p = ((pool_call *)ctx)->p;
    pthread_mutex_lock(&p->mu);
    dbt_listener_moved(p);
    pthread_mutex_unlock(&p->mu);
}

static __thread bool acquire_stalled; /* dbt_pool_take_relay_stall */

bool dbt_pool_take_relay_stall(void)
{
    bool s = acquire_stalled;
    acquire_stalled = false;
    return s;
}

redisReply *dbt_pool_run(dbt_pool *p, const char *what, dbt_script_call *c, dbt_reply_parser parse,
                         void *out, char *err)
{
    pool_call x = {.p = p, .c = c, .parse = parse, .out = out};
    dbt_route_conns conns = {.get = get_conn, .put = put_conn, .moved = slot_moved, .ctx = &x};
    acquire_stalled = false;
    (void)dbt_route_take_relay_stall();
    redisReply *rep = dbt_route_run(p->client->cfg, &conns, run_call, &x, err);
    if (!rep && dbt_route_take_relay_stall()) {
        /* The host's relay stalled (its speaker stopped?): not an outage of Redis. Connections
         * now go to Redis directly. An acquire sent twice would queue its id twice: the caller
         * queues anew under another id; any other script is harmless twice, and sent again. */
        if (c->script == &dbt_script_acquire) {
            acquire_stalled = true;
            return NULL;
        }
        int64_t b = dbt_redis_budget_anew(p->client->cfg->redis_timeout_ms);
        rep = dbt_route_run(p->client->cfg, &conns, run_call, &x, err);
        dbt_redis_budget_end(b);
        (void)dbt_route_take_relay_stall();
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
        dbt_script_bind_server(c, r);
    }
    bool ok =
        r && dbt_redis_eval_nowait(r, c->script, c->nkeys, c->keys, c->nargs, c->args, tag, err);
    if (!ok && r && dbt_redis_undelivered(r)) {
        /* The host's relay ended before it read it: once more, on a new connection. */
        dbt_pool_put_conn(p, r);
        if ((r = dbt_pool_get_conn(p, err)) != NULL) {
            dbt_pool_era_prev(p, c->era_prev);
            dbt_script_bind_server(c, r);
            ok =
                dbt_redis_eval_nowait(r, c->script, c->nkeys, c->keys, c->nargs, c->args, tag, err);
        }
    }
    dbt_pool_put_conn(p, r);
    if (!ok)
        dbt_pool_note_error(p, what, err);
    else if (tag)
        dbt_pool_drain_soon(p); /* its reply is read soon, even if the process goes idle */
    return ok;
}
