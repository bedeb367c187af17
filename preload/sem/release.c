/* release.c - giving permits and places back to Redis: release.lua and cancel.lua, at once or
 * deferred through an outage, and dbt_release. */
#include "release.h"
#include "clock.h"
#include "handover.h"
#include "lease.h"
#include "log.h"
#include "pool.h"
#include "sample.h"
#include "script_call.h"
#include "sharing.h"
#include "trace.h"

#include <stdlib.h>
#include <string.h>

/* Withdraws a waiter that gave up, or a place not needed. Runs cancel.lua synchronously: if a
 * grant raced with the withdrawal, the script gives that permit back and passes it on, so
 * nothing is lost. */
bool dbt_cancel_id(dbt_pool *p, dbt_kind kind, const char *id, bool gave_up, bool *returned)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    dbt_build_cancel(&call, &p->keys, kind, p->client->cfg, id, gave_up);
    dbt_lease_bind(p, &call, dbt_lease_us(p) / 1000);
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
static bool cancel_or_defer(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id)
{
    bool returned = false;
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    if (!dbt_cancel_id(p, kind, id, what == DBT_OWED_CANCEL, &returned))
        dbt_defer_op(p, what, kind, id, -1);
    dbt_redis_budget_end(b);
    return returned;
}

void dbt_send_cancel(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id)
{
    pthread_mutex_lock(&p->mu);
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    if (down)
        dbt_defer_op(p, what, kind, id, -1);
    else
        (void)cancel_or_defer(p, what, kind, id);
}

void dbt_cancel_in_redis(dbt_pool *p, struct dbt_slot *s)
{
    if (cancel_or_defer(p, DBT_OWED_CANCEL, s->kind, s->id))
        dbt_trace(DBT_LOG_INFO, "grant_returned", s, -1, -1, -1, -1, "reason",
                  "granted as the waiter gave up; passed on");
}

/* ---- release ----------------------------------------------------------------------------- */

/* The script call op makes: release.lua, or cancel.lua (counted or not as its waiter gave up). */
static void build_op(dbt_pool *p, const dbt_owed_op *op, dbt_script_call *call)
{
    if (op->what == DBT_OWED_RELEASE)
        dbt_build_release(call, &p->keys, op->kind, p->client->cfg, op->id, op->held_ms);
    else
        dbt_build_cancel(call, &p->keys, op->kind, p->client->cfg, op->id,
                         op->what == DBT_OWED_CANCEL);
    dbt_lease_bind(p, call, dbt_lease_us(p) / 1000);
}

/* op (release.lua, or cancel.lua) written without waiting for its reply; its tag makes a reply
 * that failed, or a connection that broke before it was read, owe it again (dbt_pool_put_conn).
 * False when it could not be written. */
static bool send_nowait(dbt_pool *p, const dbt_owed_op *op)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    build_op(p, op, &call);
    char tag[DBT_REDIS_TAG_LEN];
    dbt_op_tag(tag, op->what, op->kind, op->id);
    return dbt_pool_send(p, op->what == DBT_OWED_RELEASE ? "release" : "cancel", &call, tag, err);
}

static void send_release_io(dbt_pool *p, dbt_kind kind, const char *id, int64_t held_ms)
{
    dbt_owed_op op = {.what = DBT_OWED_RELEASE, .kind = kind, .held_ms = held_ms};
    snprintf(op.id, sizeof op.id, "%s", id);
    if (!send_nowait(p, &op))
        dbt_defer_op(p, DBT_OWED_RELEASE, kind, id, held_ms);
}

/* ops written blind on a connection of their own (dbt_redis_connect_blind), no reply awaited. A
 * Redis that answers nothing in time (stalled, or slower than DBTHROTTLE_REDIS_TIMEOUT) runs them
 * whenever it reads them, where a new connection of the pool's writes nothing before Redis has
 * answered its INFO and script loads: a process that exits in such an outage left its permits
 * and places to their leases (make chaos: the limit unused for 1.4 s after a slow Redis ended).
 * Sent without an era (as when INFO is refused): they may reach another server (a restart), where
 * a release or withdrawal of an id it lacks does nothing. Without p->mu. */
static void send_blind(dbt_pool *p, const dbt_owed_op *ops, int n)
{
    char err[DBT_ERRLEN];
    dbt_redis *r = n > 0 ? dbt_redis_connect_blind(p->client->cfg, err) : NULL;
    if (!r)
        return;
    int i = 0;
    for (; i < n; i++) {
        dbt_script_call call;
        build_op(p, &ops[i], &call);
        if (!dbt_redis_append_eval(r, call.script, call.nkeys, call.keys, call.nargs, call.args,
                                   err))
            break;
    }
    bool written = i > 0 && dbt_redis_flush(r, err);
    dbt_redis_free(r);
    if (written && dbt_log_enabled(DBT_LOG_DEBUG)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("ops", i)};
        dbt_log(DBT_LOG_DEBUG, "owed_written_blind", f, 2);
    }
}

void dbt_settle_at_exit(dbt_pool *p, dbt_owed_op *ops, int n, int cap)
{
    /* Redis failed this process' last call: first what is owed, written blind, so that it lands
     * even if no connection of the pool's can be made in time (the rounds below then confirm it,
     * or find nothing left to give back). */
    pthread_mutex_lock(&p->mu);
    bool outage = p->in_outage;
    pthread_mutex_unlock(&p->mu);
    if (outage)
        send_blind(p, ops, n);
    /* Twice at most: what the first round's replies said failed (a reset, OOM, a NOSCRIPT that
     * could not be repaired) is sent once more, with what other threads owed meanwhile. */
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < n; i++)
            if (!send_nowait(p, &ops[i]))
                return; /* Redis unreachable within the budget: the leases give the rest back */
        pthread_mutex_lock(&p->mu);
        /* Every reply read: each one landed, or is owed again (p->deferred). Written and left
         * unread, a command is lost if the socket closes with a late reply unread (a reset
         * drops what the kernel has not sent yet), or if its connection times out first. */
        dbt_pool_drain_idle(p);
        n = p->ndeferred < cap ? p->ndeferred : cap;
        memcpy(ops, p->deferred, (size_t)n * sizeof *ops);
        p->ndeferred = 0;
        pthread_mutex_unlock(&p->mu);
        if (n == 0)
            return;
    }
}

/* send_release_io within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together. */
void dbt_send_release(dbt_pool *p, dbt_kind kind, const char *id, int64_t held_ms)
{
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    send_release_io(p, kind, id, held_ms);
    dbt_redis_budget_end(b);
}

static void release_permit(dbt_permit *s)
{
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    if (s->gen == p->gen)
        dbt_sample_end(p, s, dbt_now_us()); /* its command's hold, for shadow mode's sample */
    if (s->state == SLOT_RETURNED) {
        /* A kept permit the renewer already gave back (and traced). */
        pthread_mutex_unlock(&p->mu);
        dbt_free_slot(s);
        return;
    }
    /* Kept on the host's shelf: another process of the host may have taken it, and then it is
     * that process' to give back, not ours (released here, it would run there unthrottled). */
    bool taken = s->gen == p->gen && s->shelf && !dbt_sharing_unshelve_own(p, s);
    if (s->parked) {
        s->parked = false;
        if (s->gen == p->gen)
            p->nparked--;
    }
    if (taken) {
        dbt_pool_note_kept_hold(p, s);
        dbt_unlink_slot(p, s);
        pthread_mutex_unlock(&p->mu);
        dbt_free_slot(s);
        return;
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
    bool tracing = dbt_trace_enabled(p, DBT_LOG_INFO);
    struct dbt_slot before;
    if (tracing) {
        dbt_trace_copy(&before, s);
        s->query = NULL;
    }
    /* This hold, for the hold histogram: Redis sees it in the release (release.lua's held_ms), or,
     * when the permit passes on without Redis, in the next renewal (pool.unreported_holds). */
    int64_t held_ms = (dbt_now_us() - s->t_grant_us) / 1000;
    dbt_kind kind = s->kind;
    char klass[sizeof s->klass];
    memcpy(klass, s->klass, sizeof klass);
    bool offered = false;
    struct dbt_slot *to = dbt_handover_release(p, s, &offered);
    if (offered || to)
        dbt_pool_note_hold(p, kind, klass, held_ms);
    if (offered) {
        /* Another process of the host has it now (its waiting thread takes it from the
         * segment): nothing goes to Redis, and s is ours to forget. */
        dbt_unlink_slot(p, s);
        dbt_orphans_idle_from(p, s, dbt_now_us());
        bool kept = dbt_recycle_slot(p, s);
        pthread_mutex_unlock(&p->mu);
        if (tracing) {
            dbt_trace(DBT_LOG_INFO, "release", &before, -1, dbt_now_us() - before.t_grant_us, -1,
                      -1, "to", "a waiting process of this host");
            free(before.query);
        }
        if (!kept)
            dbt_free_slot(s);
        return;
    }
    if (to) {
        /* A grant as fresh as the one given back (see stale_grant in acquire.c): the thread it
         * may be served in then makes no Redis call for it. */
        dbt_lease_facts lease = dbt_slot_lease(p, to, dbt_now_us());
        bool fresh = !dbt_lease_stale(&lease);
        pthread_mutex_unlock(&p->mu);
        dbt_slot_wake_later(to, fresh);
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
    dbt_sharing_gave_back(p, s->kind, s->id, s->lost); /* docs/design.md, "Shares" */
    struct dbt_slot *idle_places[16];
    int nplaces = dbt_orphans_take_if_idle(p, s->kind, idle_places, 16);
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    /* The process went idle (see dbt_orphans_take_if_idle): its places kept for a next wait are
     * withdrawn before the release, which would otherwise grant the oldest of them, to nobody (a
     * grant, its give-back, and the next waiter served a round trip later). */
    for (int i = 0; i < nplaces; i++) {
        dbt_send_cancel(p, DBT_OWED_WITHDRAW, idle_places[i]->kind, idle_places[i]->id);
        dbt_free_slot(idle_places[i]);
    }
    if (!down)
        dbt_send_release(p, s->kind, s->id, held_ms);
    else
        dbt_defer_op(p, DBT_OWED_RELEASE, s->kind, s->id, held_ms);
    dbt_trace(DBT_LOG_INFO, "release", s, -1, dbt_now_us() - s->t_grant_us, -1, -1,
              s->lost ? "lease" : NULL, "lost");
    dbt_retire_slot(p, s);
}

void dbt_release(dbt_permit *s)
{
    if (!s)
        return;
    /* Attached: the host's segment, which passing the permit on locks under p->mu up to 3 times
     * (shelf, offer, waiters), looked at now, before p->mu (hostshare.h). */
    dbt_sharing_precheck(s->pool);
    release_permit(s);
    dbt_sharing_precheck_end();
}

/* Takes one entry equal to op off p->deferred, if there is one. p->mu held. */
static void forget_owed(dbt_pool *p, const dbt_owed_op *op)
{
    for (int i = 0; i < p->ndeferred; i++) {
        const dbt_owed_op *d = &p->deferred[i];
        if (d->what == op->what && d->kind == op->kind && strcmp(d->id, op->id) == 0) {
            p->ndeferred--;
            memmove(&p->deferred[i], &p->deferred[i + 1],
                    (size_t)(p->ndeferred - i) * sizeof p->deferred[0]);
            return;
        }
    }
}

void dbt_flush_deferred(dbt_pool *p)
{
    /* Copied, not taken: each stays owed until it is written, so a process that exits while
     * this thread sends (its exit does not wait for it) sends it too (twice is harmless: the
     * second release or cancel of an id finds nothing). */
    pthread_mutex_lock(&p->mu);
    int n = p->ndeferred;
    dbt_owed_op *todo = n ? malloc((size_t)n * sizeof *todo) : NULL;
    bool *sent = n ? calloc((size_t)n, sizeof *sent) : NULL;
    if (todo && sent)
        memcpy(todo, p->deferred, (size_t)n * sizeof *todo);
    pthread_mutex_unlock(&p->mu);
    if (!todo || !sent) {
        free(todo);
        free(sent);
        return;
    }
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    for (int i = 0; i < n; i++) { /* one that fails stays owed */
        bool returned;
        sent[i] = todo[i].what == DBT_OWED_RELEASE
                      ? send_nowait(p, &todo[i])
                      : dbt_cancel_id(p, todo[i].kind, todo[i].id, todo[i].what == DBT_OWED_CANCEL,
                                      &returned);
    }
    dbt_redis_budget_end(b);
    int nsent = 0;
    pthread_mutex_lock(&p->mu);
    for (int i = 0; i < n; i++)
        if (sent[i]) {
            forget_owed(p, &todo[i]);
            nsent++;
        }
    pthread_mutex_unlock(&p->mu);
    free(todo);
    free(sent);
    if (nsent > 0 && dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("releases", nsent)};
        dbt_log(DBT_LOG_INFO, "deferred_releases_sent", f, 2);
    }
}
