/* release.c - giving permits and places back to Redis: release.lua and cancel.lua, at once or
 * deferred through an outage, and dbt_release. */
#include "release.h"
#include "clock.h"
#include "handover.h"
#include "log.h"
#include "pool.h"
#include "script_call.h"
#include "trace.h"

#include <stdlib.h>
#include <string.h>

/* Withdraws a waiter that gave up. Runs cancel.lua synchronously: if a grant raced with the
 * withdrawal, the script gives that permit back and passes it on, so nothing is lost. */
bool dbt_cancel_id(dbt_pool *p, dbt_kind kind, const char *id, bool *returned)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    dbt_build_cancel(&call, &p->keys, kind, p->client->cfg, id);
    dbt_cancel_outcome outcome;
    redisReply *rep = dbt_pool_run(p, "cancel", &call, dbt_parse_cancel, &outcome, err);
    if (!rep)
        return false;
    *returned = outcome == DBT_CANCEL_RETURNED;
    freeReplyObject(rep);
    return true;
}

/* cancel.lua for id within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together, or kept and sent
 * when Redis answers again. True when Redis had granted it meanwhile (and passed it on). */
static bool cancel_or_defer(dbt_pool *p, dbt_kind kind, const char *id)
{
    bool returned = false;
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    if (!dbt_cancel_id(p, kind, id, &returned))
        dbt_defer_op(p, true, kind, id);
    dbt_redis_budget_end(b);
    return returned;
}

void dbt_send_cancel(dbt_pool *p, dbt_kind kind, const char *id)
{
    pthread_mutex_lock(&p->mu);
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    if (down)
        dbt_defer_op(p, true, kind, id);
    else
        (void)cancel_or_defer(p, kind, id);
}

void dbt_cancel_in_redis(dbt_pool *p, struct dbt_slot *s)
{
    if (cancel_or_defer(p, s->kind, s->id))
        dbt_trace(DBT_LOG_INFO, "grant_returned", s, -1, -1, -1, -1, "reason",
                  "granted as the waiter gave up; passed on");
}

/* ---- release ----------------------------------------------------------------------------- */

static void send_release_io(dbt_pool *p, dbt_kind kind, const char *id)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    dbt_build_release(&call, &p->keys, kind, p->client->cfg, id);
    char tag[DBT_REDIS_TAG_LEN];
    dbt_op_tag(tag, false, kind, id);
    if (!dbt_pool_send(p, "release", &call, tag, err))
        dbt_defer_op(p, false, kind, id);
}

bool dbt_send_at_exit(dbt_pool *p, bool cancel, dbt_kind kind, const char *id)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    if (cancel)
        dbt_build_cancel(&call, &p->keys, kind, p->client->cfg, id);
    else
        dbt_build_release(&call, &p->keys, kind, p->client->cfg, id);
    return dbt_pool_send(p, cancel ? "cancel" : "release", &call, NULL, err);
}

/* send_release_io within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together. */
void dbt_send_release(dbt_pool *p, dbt_kind kind, const char *id)
{
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    send_release_io(p, kind, id);
    dbt_redis_budget_end(b);
}

void dbt_release(dbt_permit *s)
{
    if (!s)
        return;
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    if (s->state == SLOT_RETURNED) {
        /* A kept permit the renewer already gave back (and traced). */
        pthread_mutex_unlock(&p->mu);
        dbt_free_slot(s);
        return;
    }
    if (s->parked) {
        s->parked = false;
        if (s->gen == p->gen)
            p->nparked--;
    }
    if (s->gen != p->gen) {
        /* A permit of the parent process: the child must neither use nor release it. */
        pthread_mutex_unlock(&p->mu);
        dbt_free_slot(s);
        return;
    }
    /* What the trace says of the permit, before it may move to another thread (handover.c):
     * then s becomes a place in the queue that the pool keeps, and is not ours to free (nor its
     * query text, which the trace then owns). */
    bool tracing = dbt_log_enabled(DBT_LOG_INFO);
    struct dbt_slot before;
    if (tracing) {
        dbt_trace_copy(&before, s);
        s->query = NULL;
    }
    bool offered = false;
    struct dbt_slot *to = dbt_handover_release(p, s, &offered);
    if (offered) {
        /* Another process of the host has it now (its waiting thread takes it from the
         * segment): nothing goes to Redis, and s is ours to forget. */
        dbt_unlink_slot(p, s);
        pthread_mutex_unlock(&p->mu);
        if (tracing) {
            dbt_trace(DBT_LOG_INFO, "release", &before, -1, dbt_now_us() - before.t_grant_us, -1,
                      -1, "to", "a waiting process of this host");
            free(before.query);
        }
        dbt_free_slot(s);
        return;
    }
    if (to) {
        pthread_mutex_unlock(&p->mu);
        dbt_slot_wake_later(to);
        if (tracing) {
            dbt_trace(DBT_LOG_INFO, "release", &before, -1, dbt_now_us() - before.t_grant_us, -1,
                      -1, "to", "a waiting thread of this process");
            free(before.query);
        }
        return;
    }
    if (tracing)
        s->query = before.query;
    dbt_unlink_slot(p, s);
    struct dbt_slot *idle_places[16];
    int nplaces = dbt_orphans_take_if_idle(p, s->kind, idle_places, 16);
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    if (!down)
        dbt_send_release(p, s->kind, s->id);
    else
        dbt_defer_op(p, false, s->kind, s->id);
    dbt_trace(DBT_LOG_INFO, "release", s, -1, dbt_now_us() - s->t_grant_us, -1, -1,
              s->lost ? "lease" : NULL, "lost");
    dbt_free_slot(s);
    for (int i = 0; i < nplaces; i++) { /* the process went idle: see dbt_orphans_take_if_idle */
        dbt_send_cancel(p, idle_places[i]->kind, idle_places[i]->id);
        dbt_free_slot(idle_places[i]);
    }
}

void dbt_flush_deferred(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->ndeferred;
    __typeof__(p->deferred[0]) *todo = n ? malloc((size_t)n * sizeof *todo) : NULL;
    if (todo) {
        memcpy(todo, p->deferred, (size_t)n * sizeof *todo);
        p->ndeferred = 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (!todo)
        return;
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    for (int i = 0; i < n; i++) { /* one that fails is kept again */
        bool returned;
        if (!todo[i].cancel)
            send_release_io(p, todo[i].kind, todo[i].id);
        else if (!dbt_cancel_id(p, todo[i].kind, todo[i].id, &returned))
            dbt_defer_op(p, true, todo[i].kind, todo[i].id);
    }
    dbt_redis_budget_end(b);
    free(todo);
    if (dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("releases", n)};
        dbt_log(DBT_LOG_INFO, "deferred_releases_sent", f, 2);
    }
}
