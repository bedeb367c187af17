/* script_run.c - a built script call run on a connection the caller holds (see script_run.h):
 * the command's, the tests', and each try of the pool's own calls (script_call.c). */
#include "script_run.h"
#include "clock.h"

#include <stdio.h>

void dbt_script_bind_server(dbt_script_call *c, const dbt_redis *r)
{
    dbt_script_bind_era(c, r->run_id, r->started_ms);
    dbt_script_bind_clock(c, r->run_id, r->clock_ahead_ms, r->clock_at_us, dbt_now_us());
    /* Copied into the call: the connection may be gone by its next try (an ASK's one-off
     * connection, one given up after MOVED), and a try on another connection must not carry it. */
    if (r->route.adopt_token[0] || c->args[DBT_ARG_ADOPT] == c->adopt) {
        snprintf(c->adopt, sizeof c->adopt, "%s", r->route.adopt_token);
        c->args[DBT_ARG_ADOPT] = c->adopt;
    }
}

redisReply *dbt_script_run(dbt_redis *r, dbt_script_call *c, dbt_reply_parser parse, void *out,
                           char *err)
{
    dbt_script_bind_server(c, r);
    redisReply *rep = dbt_redis_eval(r, c->script, c->nkeys, c->keys, c->nargs, c->args, err);
    if (rep && !parse(rep, out, err)) {
        freeReplyObject(rep);
        rep = NULL;
    }
    return rep;
}
