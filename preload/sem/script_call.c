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

static __thread bool acquire_relay_failed; /* dbt_pool_take_relay_failure */
static __thread char acquire_relay_err[DBT_ERRLEN];

bool dbt_pool_take_relay_failure(char *err)
{
    bool s = acquire_relay_failed;
    acquire_relay_failed = false;
    if (s)
        snprintf(err, DBT_ERRLEN, "%s", acquire_relay_err);
    return s;
}

redisReply *dbt_pool_run(dbt_pool *p, const char *what, dbt_script_call *c, dbt_reply_parser parse,
                         void *out, char *err)
{
    pool_call x = {.p = p, .c = c, .parse = parse, .out = out};
    dbt_route_conns conns = {.get = get_conn, .put = put_conn, .moved = slot_moved, .ctx = &x};
    acquire_relay_failed = false;
    (void)dbt_route_take_relay_failure();
    (void)dbt_redis_take_unsent();
    redisReply *rep = dbt_route_run(p->client->cfg, &conns, run_call, &x, err);
    /* Its time ran out before it was sent, while this process was stopped or not scheduled:
     * not Redis' outage either (dbt_redis_take_unsent). A renewal is not sent late (it was built
     * before: the renewer's next round, within 100 ms, names what holds now); the rest as after a
     * relay's failure. */
    bool unsent = !rep && dbt_redis_take_unsent();
    if (unsent && (c->script == &dbt_script_renew || c->script == &dbt_script_sample))
        return NULL;
    if (!rep && (unsent || dbt_route_take_relay_failure())) {
        /* The host's relay failed (its speaker stopped, or ended after reading the call): not an
         * outage of Redis. Connections now go to Redis directly, or to the next speaker. An
         * acquire sent twice would queue its id twice: the caller queues anew under another id;
         * any other script is harmless twice, and sent again, with a budget of its own. */
        if (c->script == &dbt_script_acquire) {
            acquire_relay_failed = true;
            snprintf(acquire_relay_err, sizeof acquire_relay_err, "%s", err);
            return NULL;
        }
        int64_t b = dbt_redis_budget_anew(p->client->cfg->redis_timeout_ms);
        rep = dbt_route_run(p->client->cfg, &conns, run_call, &x, err);
        dbt_redis_budget_end(b);
        (void)dbt_route_take_relay_failure();
    }
    /* Shadow mode's sample is not the semaphore: its failure is counted by sample.c (holds not
     * sampled), never taken for an outage of Redis, which would run or refuse the pool's
     * commands for a second (the pool's own calls find a real one). */
    if (!rep && c->script != &dbt_script_sample)
        dbt_pool_note_error(p, what, err);
    return rep;
}

/* c written on one of the pool's connections, its reply left unread: false (err set) if not. */
static bool send_once(dbt_pool *p, dbt_script_call *c, const char *tag, dbt_redis **r, char *err)
{
    if ((*r = dbt_pool_get_conn(p, err)) == NULL)
        return false;
    dbt_pool_era_prev(p, c->era_prev);
    dbt_script_bind_server(c, *r);
    return dbt_redis_eval_nowait(*r, c->script, c->nkeys, c->keys, c->nargs, c->args, tag, err);
}

bool dbt_pool_send(dbt_pool *p, const char *what, dbt_script_call *c, const char *tag, char *err)
{
    dbt_redis *r = NULL;
    int resends = 0;
    bool ok, again;
    (void)dbt_route_take_relay_failure();
    (void)dbt_redis_take_unsent();
    do {
        /* The host's relay ended before it read it: again, on a new connection. */
        ok = send_once(p, c, tag, &r, err);
        again = !ok && dbt_route_resend_undelivered(r, &resends);
        dbt_pool_put_conn(p, r);
    } while (again);
    /* (Its time ran out before it was sent, this process stopped or not scheduled: once more
     * too, and no outage noted.) */
    if (!ok && (dbt_redis_take_unsent() || dbt_route_take_relay_failure())) {
        /* The host's relay failed on the way (a pending reply of the connection, or the connect,
         * met its stopped speaker, or its end): not an outage of Redis. Once more, with a budget
         * of its own, directly or through the next speaker: a release or a cancel twice is
         * harmless. */
        int64_t b = dbt_redis_budget_anew(p->client->cfg->redis_timeout_ms);
        ok = send_once(p, c, tag, &r, err);
        dbt_pool_put_conn(p, r);
        dbt_redis_budget_end(b);
        (void)dbt_route_take_relay_failure();
    }
    if (!ok)
        dbt_pool_note_error(p, what, err);
    else if (tag)
        dbt_pool_drain_soon(p); /* its reply is read soon, even if the process goes idle */
    return ok;
}
