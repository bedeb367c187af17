/* script_call.c - one way to run a script call, for every caller (see script_call.h). */
#include "script_call.h"
#include "pool.h"
#include "renewer.h"

#include <stdio.h>

redisReply *dbt_script_run(dbt_redis *r, dbt_script_call *c, dbt_reply_parser parse, void *out,
                           char *err)
{
    dbt_script_bind_era(c, r->run_id, r->started_ms);
    redisReply *rep = dbt_redis_eval(r, c->script, c->nkeys, c->keys, c->nargs, c->args, err);
    if (rep && !parse(rep, out, err)) {
        freeReplyObject(rep);
        rep = NULL;
    }
    return rep;
}

redisReply *dbt_pool_run(dbt_pool *p, const char *what, dbt_script_call *c, dbt_reply_parser parse,
                         void *out, char *err)
{
    dbt_redis *r = dbt_pool_get_conn(p, err);
    if (r)
        dbt_pool_era_prev(p, c->era_prev);
    redisReply *rep = r ? dbt_script_run(r, c, parse, out, err) : NULL;
    dbt_pool_put_conn(p, r);
    if (!rep)
        dbt_pool_note_error(p, what, err);
    return rep;
}

bool dbt_pool_send(dbt_pool *p, const char *what, dbt_script_call *c, const char *tag, char *err)
{
    dbt_redis *r = dbt_pool_get_conn(p, err);
    if (r) {
        dbt_pool_era_prev(p, c->era_prev);
        dbt_script_bind_era(c, r->run_id, r->started_ms);
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
