/* renewer.c - a pool's background thread: renews the process' leases every lease/3, in one
 * Redis round trip per pool, and so keeps the queue live (renew.lua reaps expired holders and
 * grants their permits even when nobody releases).
 *
 * It starts when the process first uses the pool (or announces itself, disabled). While the
 * process neither waits nor holds, it only sends the process' record once a lease (registry.c):
 * an idle pool costs one small script per lease. Grants are not its job:
 * waiting threads take turns listening for them (listener.c). Kept permits are (see
 * DBTHROTTLE_CACHE_PERMITS): it gives them back when a waiter's arrival is pushed, or when they
 * sat unused for DBTHROTTLE_CACHE_IDLE, and while the process holds permits it may keep and no
 * thread of it waits, it is the one that listens for that push. */
#include "renewer.h"
#include "clock.h"
#include "conns.h"
#include "fork.h"
#include "handover.h"
#include "kept.h"
#include "lapse.h"
#include "lease.h"
#include "listener.h"
#include "live.h"
#include "log.h"
#include "pool.h"
#include "registry.h"
#include "release.h"
#include "sample.h"
#include "script_call.h"
#include "sharing.h"
#include "summary.h"

#include <errno.h>
#include <inttypes.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* How long after the last orphan was made the renewer sleeps no longer than DBT_ORPHAN_IDLE_US. */
#define ORPHANS_RECENT_US INT64_C(1000000)

/* The renewal at a quarantine's end comes this long after it, so that Redis (whose clock the
 * reply's "ms left" was counted by) has surely ended it. */
#define QUARANTINE_MARGIN_US INT64_C(30000)

/* A third of the shortest lease a permit or place of the pool may carry (lease.c). */
static int64_t renew_period_us(const dbt_pool *p)
{
    return dbt_lease_shortest_us(p, dbt_now_us()) / 3;
}

/* The renewer means to be back in its loop at `plan` (at the latest a renewal period or a Redis
 * call's timeout after it, with a margin, unless this process stalls). p->mu held. */
static void plan_back(dbt_pool *p, int64_t plan, int64_t now)
{
    if (plan < now)
        plan = now;
    p->bg_plan_us = plan;
    p->bg_back_by_us = plan + dbt_renewer_late_us(p);
}

/* Holders whose lease has surely run out in Redis (no renewal for a whole lease) are lost.
 * Call with p->mu held. */
static void expire_unrenewed(dbt_pool *p, int64_t now)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        dbt_slot_expire_unrenewed(p, s, now);
}

/* A connection that holds a permit idle inside a transaction keeps others waiting: say so once
 * per stretch. Call with p->mu held. */
static void warn_idle_in_tx(dbt_pool *p, int64_t now)
{
    int64_t limit = p->client->cfg->idle_in_tx_warn_ms;
    if (limit < 0)
        return;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_HELD && s->idle_since_us && !s->idle_warned &&
            now - s->idle_since_us > limit * 1000) {
            s->idle_warned = true;
            dbt_field f[] = {DBT_S("pool", p->name),
                             DBT_S("kind", dbt_kind_name(s->kind)),
                             DBT_S("permit", s->id),
                             DBT_S("conn", s->conn[0] ? s->conn : "-"),
                             DBT_MS("idle_ms", (double)(now - s->idle_since_us) / 1000.0),
                             DBT_S("effect", "holds a permit while idle in a transaction")};
            dbt_log(DBT_LOG_WARN, "idle_in_transaction", f, sizeof f / sizeof *f);
        }
}

/* When a holder's doing that Redis does not show yet (a change of state, or the holder after a
 * pass) will have lasted DBT_DOING_REPORT_US: the renewal that shows it is made then, not a
 * renewal period later (status showed a holder idle in a transaction as running for up to
 * lease/3). -1: Redis shows every holder as it is; whether any held query permit may change
 * state meanwhile in *changing. The holders a renewal names (renew's test), no other. p->mu
 * held. */
static int64_t doing_report_due(dbt_pool *p, bool *changing)
{
    int64_t due = -1;
    *changing = false;
    for (const struct dbt_slot *s = p->slots; s; s = s->next) {
        if (s->state != SLOT_HELD || s->lost)
            continue;
        char now_doing = dbt_slot_doing(s);
        *changing = *changing || s->kind == DBT_KIND_QUERY;
        /* A holder Redis does not name (a pass) from when it got the permit, whatever it did
         * since; a state Redis does not show from when it began. */
        int64_t since = s->doing_sent == '\0' ? s->t_grant_us
                        : now_doing != DBT_DOING_UNCHANGED && now_doing != s->doing_sent
                            ? s->doing_since_us
                            : -1;
        if (since >= 0 && (due < 0 || since + DBT_DOING_REPORT_US < due))
            due = since + DBT_DOING_REPORT_US;
    }
    /* a connection opened, closed or changed state (conns.c): dbthrottle clients shows it as
     * soon, and a busy one is looked at again within DBT_DOING_REPORT_US */
    bool conns_busy;
    dbt_conns_look(p, dbt_now_us(), &conns_busy);
    *changing = *changing || conns_busy;
    if (p->known_changed && (due < 0 || p->known_changed_us + DBT_DOING_REPORT_US < due))
        due = p->known_changed_us + DBT_DOING_REPORT_US;
    if (p->record_changed_us && (due < 0 || p->record_changed_us < due))
        due = p->record_changed_us;
    return due;
}

static bool push_id(dbt_id_list *l, const char *id)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 16;
        char **ids = realloc(l->ids, (size_t)cap * sizeof *ids);
        if (!ids)
            return false;
        l->ids = ids;
        l->cap = cap;
    }
    l->ids[l->n] = strdup(id);
    if (!l->ids[l->n])
        return false;
    l->n++;
    return true;
}

/* What a held permit does now, for its holder's entry in Redis (dbt_format_doing): kept between
 * commands, idle in a transaction, or running one; a connection permit's state is left as it was
 * granted. With p->mu held. */
static bool push_doing(dbt_id_list *l, struct dbt_slot *s)
{
    char doing[DBT_DOING_LEN], who[DBT_WHO_LEN];
    char state = dbt_slot_doing(s);
    /* Always who holds it now: Redis rewrites its entry only when it differs, after the permit
     * moved to another connection (local handover) or process (host-level sharing). */
    dbt_format_who(s->pool->client->host, (long)getpid(), s->conn, who, sizeof who);
    dbt_format_doing(state, s->session, who, (dbt_now_us() - s->t_grant_us) / 1000, doing,
                     sizeof doing);
    s->doing_sent = state; /* a renewal that fails: sent again with the next, a period later */
    return push_id(l, doing);
}

static void free_ids(dbt_id_list *l)
{
    for (int i = 0; i < l->n; i++)
        free(l->ids[i]);
    free(l->ids);
}

/* dbthrottle evict --cancel, and closed mode's lapsing leases (lapse.c): the interposer cancels
 * the command running on the connection. */
static void (*cancel_hook)(const char *conn, const char *event);

void dbt_on_evict_cancel(void (*cancel)(const char *conn, const char *event))
{
    cancel_hook = cancel;
}

/* Cancels the commands of `c`'s connections. Called with p->mu held; lets it go meanwhile. */
static void send_cancels(dbt_pool *p, const dbt_cancels *c)
{
    if (c->n == 0 || !cancel_hook)
        return;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < c->n; i++)
        cancel_hook(c->conn[i], c->event[i]);
    pthread_mutex_lock(&p->mu);
}

/* A permit the operator evicted (dbthrottle evict): said so, not taken for a lost lease. */
static void mark_evicted(dbt_pool *p, struct dbt_slot *s, bool cancel, dbt_cancels *out)
{
    s->lost = true;
    p->st.leases_lost++;
    dbt_field f[] = {DBT_S("pool", p->name), DBT_S("kind", dbt_kind_name(s->kind)),
                     DBT_S("permit", s->id), DBT_S("conn", s->conn[0] ? s->conn : "-"),
                     DBT_S("effect", cancel
                                         ? "its command is cancelled; the next one acquires again"
                                         : "the next command acquires again")};
    dbt_log(DBT_LOG_WARN, "evicted", f, sizeof f / sizeof *f);
    if (cancel && s->conn[0] && out->n < DBT_MAX_CANCELS) {
        snprintf(out->conn[out->n], sizeof out->conn[0], "%s", s->conn);
        out->event[out->n++] = "evict_cancel";
    }
}

/* What the core decides of one slot it names, from how it is now. */
static dbt_slot_facts slot_facts(const struct dbt_slot *s)
{
    return (dbt_slot_facts){.found = s != NULL,
                            .held = s && s->state == SLOT_HELD,
                            .queued = s && s->state == SLOT_QUEUED,
                            .orphan = s && s->orphan,
                            .lost = s && s->lost};
}

/* Marks what renew.lua said Redis no longer has. Call with p->mu held. */
static void apply_lost(dbt_pool *p, const dbt_renew_reply *reply, dbt_cancels *cancels)
{
    for (size_t i = 0; i < reply->lost_holders.n; i++) {
        char mark;
        const char *id = dbt_renew_lost_holder(&reply->lost_holders, i, &mark);
        bool evicted = mark != 0;
        struct dbt_slot *s = dbt_find_slot(p, id);
        if (s)
            dbt_handover_foreign(p, s->kind, 0); /* evicted, or Redis lost it: ask Redis again */
        dbt_slot_facts f = slot_facts(s);
        dbt_gone_cause cause = !evicted                     ? DBT_GONE_BY_LOSS
                               : mark == DBT_EVICTED_CANCEL ? DBT_GONE_BY_EVICTION_CANCEL
                                                            : DBT_GONE_BY_EVICTION;
        switch (dbt_core_holder_gone(&f, cause)) {
        case DBT_GONE_EVICTED:
        case DBT_GONE_EVICTED_CANCEL:
            mark_evicted(p, s, cause == DBT_GONE_BY_EVICTION_CANCEL, cancels);
            break;
        case DBT_GONE_LOST:
            dbt_slot_mark_lost(p, s, DBT_LOG_ERROR,
                               "Redis no longer has it (expired or data lost)");
            s->lapsed = true;
            break;
        default:
            break;
        }
        /* Kept idle on the host's shelf, a permit Redis no longer counts would be taken there by
         * another process of the host, with no Redis call, and run beside its next holder until
         * that process' own renewal: off the shelf now (this process gives it back, lost). One
         * that another process took meanwhile is that one's, as in renew()'s loop. */
        if (s && s->lost && s->shelf && s->parked && !dbt_sharing_unshelve_own(p, s)) {
            s->parked = false;
            p->nparked--;
            dbt_unlink_slot(p, s);
            s->state = SLOT_RETURNED; /* its owner frees it */
        }
    }
    for (size_t i = 0; i < reply->lost_waiters.n; i++) {
        struct dbt_slot *s = dbt_find_slot(p, dbt_reply_id(&reply->lost_waiters, i));
        dbt_slot_facts f = slot_facts(s);
        switch (dbt_core_waiter_gone(&f)) {
        case DBT_GONE_GRANT_LAPSED:
            /* Granted since the renewal was sent, and gone from Redis by the time it ran: the
             * grant outlived its lease (this process was stopped, or cut off), was reaped and may
             * have gone to another. Its thread must not use it: it gives it back and queues. */
            dbt_slot_mark_lost(p, s, DBT_LOG_WARN, "granted, then expired before it was renewed");
            s->lapsed = true; /* a command it already runs is cancelled in closed mode (lapse.c) */
            dbt_slot_wake(s);
            break;
        case DBT_GONE_FORGET:
            dbt_unlink_slot(p, s); /* a place nobody waited on: forget it */
            dbt_free_slot(s);
            break;
        case DBT_GONE_REQUEUE:
            dbt_lw_remove(p, s);
            s->state = SLOT_REQUEUE;
            p->nqueued--;
            dbt_slot_wake(s);
            break;
        default:
            break;
        }
    }
    /* Redis forgot waiters (restarted, or a lease ran out): what it said of the queue is void. */
    if (reply->lost_waiters.n > 0)
        dbt_pool_forget_verdicts(p);
}

/* Waiters Redis has already granted: normally their pushed grant arrives first and this finds
 * them HELD; if that message was lost (a listener connection dropped with it unread), this
 * delivers the grant. Call with p->mu held. */
static void apply_granted(dbt_pool *p, const dbt_reply_ids *ids)
{
    for (size_t i = 0; i < ids->n; i++) {
        struct dbt_slot *s = dbt_find_slot(p, dbt_reply_id(ids, i));
        if (s && s->state == SLOT_QUEUED)
            dbt_handover_granted(p, s);
    }
}

/* The waits local handover granted since the last renewal, for the wait histogram, and the holds
 * that ended in a pass without Redis, for the hold histogram, as renew.lua reads them (taken out
 * of the pool: with p->mu held). */
typedef struct {
    dbt_local_hist hist[DBT_NKINDS], holds[DBT_NKINDS];
    char text[DBT_NKINDS][DBT_LOCAL_HIST_TEXT], holds_text[DBT_NKINDS][DBT_LOCAL_HIST_TEXT];
    const char *args[DBT_NKINDS], *holds_args[DBT_NKINDS];
} local_waits;

static void take_local_waits(dbt_pool *p, local_waits *w)
{
    memcpy(w->hist, p->unreported_hist, sizeof w->hist);
    memset(p->unreported_hist, 0, sizeof p->unreported_hist);
    memcpy(w->holds, p->unreported_holds, sizeof w->holds);
    memset(p->unreported_holds, 0, sizeof p->unreported_holds);
    for (int k = 0; k < DBT_NKINDS; k++) {
        if (!dbt_format_local_hist(&w->hist[k], w->text[k], sizeof w->text[k]))
            w->text[k][0] = '\0'; /* never at that size */
        if (!dbt_format_local_hist(&w->holds[k], w->holds_text[k], sizeof w->holds_text[k]))
            w->holds_text[k][0] = '\0';
        w->args[k] = w->text[k];
        w->holds_args[k] = w->holds_text[k];
    }
}

/* A renewal that failed: what it would have reported goes with the next. p->mu held. */
static void give_back_local_waits(dbt_pool *p, const local_waits *w)
{
    for (int k = 0; k < DBT_NKINDS; k++) {
        dbt_local_hist_merge(&p->unreported_hist[k], &w->hist[k]);
        dbt_local_hist_merge(&p->unreported_holds[k], &w->holds[k]);
    }
}

void dbt_report_local(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    dbt_local_counts local[DBT_NKINDS];
    memcpy(local, p->unreported, sizeof local);
    memset(p->unreported, 0, sizeof p->unreported);
    local_waits waits;
    take_local_waits(p, &waits);
    bool down = p->down_until_us > dbt_now_us();
    bool listed = p->reported;
    char record[DBT_RECORD_MAX];
    int64_t ttl;
    dbt_registry_record(p, record, &ttl);
    pthread_mutex_unlock(&p->mu);
    bool any = listed;
    for (int k = 0; k < DBT_NKINDS; k++)
        any = any || local[k].grants || local[k].queued || waits.holds[k].ntags;
    if (!any || down)
        return;
    char err[DBT_ERRLEN];
    const char *args[DBT_RENEW_NARGS_FIXED];
    dbt_script_call call; /* a renewal of no ids, for its counts, that takes the record away */
    dbt_build_renew(&call, &p->keys, p->client->cfg, NULL, local, args);
    dbt_lease_bind(p, &call, dbt_lease_us(p) / 1000);
    dbt_renew_add_record(&call, &p->keys, p->client->cid, record, ttl, true);
    dbt_renew_add_local_hist(&call, waits.args); /* after the doing args, of which it has none */
    dbt_renew_add_local_holds(&call, waits.holds_args);
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    (void)dbt_pool_send(p, "renew", &call, NULL, err);
    dbt_redis_budget_end(b);
}

/* Whether renew.lua's sole owner of a kind (the one owner whose places are the whole queue, or
 * NULL) is this host: its group, or the group with a shape's suffix. p->mu held, attached. */
static bool host_is_sole_owner(const dbt_pool *p, const char *owner)
{
    const char *g = dbt_share_group(p->share);
    size_t n = strlen(g);
    return owner && strncmp(owner, g, n) == 0 && (owner[n] == '\0' || owner[n] == '/');
}

/* Whether the id of a kind whose owner renew.lua says the share and holding of (the first, held
 * then queued, with a host group in its cid) is of the pool's group now. Else the reply's share
 * and count of the kind are none's (-1, 0: a process holding and waiting nothing of the kind, or
 * only under its plain cid) or another group's, and must not touch the group's view. p->mu
 * held. */
static bool names_group(const dbt_pool *p, const dbt_id_list lists[DBT_RENEW_LISTS])
{
    for (int l = 0; l < DBT_RENEW_LISTS; l++)
        for (int i = 0; i < lists[l].n; i++) {
            const char *id = lists[l].ids[i];
            const char *dot = strchr(id, '.'), *tilde = strchr(id, '~');
            if (tilde && (!dot || tilde < dot))
                return dbt_sharing_id_grouped(p, id);
        }
    return false;
}

/* What a renewal sent at `sent` found, applied with p->mu held. nmine: this process' waiters of
 * each kind that it renewed; named: whether it named an id of the group of the kind
 * (names_group). */
static void apply_renewal(dbt_pool *p, const dbt_renew_reply *reply, int64_t sent, int64_t lease_ms,
                          uint64_t round, const int nmine[DBT_NKINDS],
                          const dbt_share_view shares[DBT_NKINDS], const bool named[DBT_NKINDS],
                          dbt_cancels *cancels)
{
    /* What Redis no longer has first: a lease it did not renew must not look renewed. */
    apply_lost(p, reply, cancels);
    /* Places Redis had lost were queued again, behind whoever queued meanwhile: what it said of
     * the queue before is void. */
    if (reply->reasserted[DBT_KIND_QUERY] > 0 || reply->reasserted[DBT_KIND_CONN] > 0)
        dbt_pool_forget_verdicts(p);
    /* Only the ids it named (named_round): not a slot an acquire made held or queued after it was
     * built, whose lease Redis counts from that acquire's. Not a permit another process passed
     * here after the renewal was sent: it did not name it (its lease runs from its last renewal,
     * by whichever process). Nor an id renew() left out
     * as a whole lease old (a stale orphan place, or one taken over since): Redis did not renew
     * it, and may have forgotten it. */
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (((s->state == SLOT_HELD && !s->lost) || s->state == SLOT_QUEUED) &&
            s->named_round == round && s->t_renewed_us < sent &&
            sent - s->t_renewed_us <= s->lease_us && s->share_got_us <= sent) {
            dbt_lease_renewed(s, sent, lease_ms); /* what Redis renewed it with */
            /* Whoever takes it off the shelf goes on from this renewal; unless it re-asserted
             * ids of the kind (Redis had lost them): a kept permit then goes back (below), and
             * left as old as it was, nobody takes it meanwhile if that was longer than Q. */
            if (s->shelf && reply->reasserted[s->kind] == 0) /* said for the segment's lease */
                (void)dbt_sharing_shelf_check(p, s, dbt_lease_renewed_for(s, p->share_lease_us));
        }
    apply_granted(p, &reply->granted_waiters);
    for (int k = 0; k < DBT_NKINDS; k++) {
        /* Kept permits go back (the loop sees them due) when somebody waits, or the operator
         * drains the pool or holds it below what is held; and with more waiters than ours
         * (another process queued, even if its push went astray), permits go back through
         * Redis (pool_core.c). */
        dbt_queue_event ev = {.type = DBT_QEV_RENEWED,
                              .queue = reply->queue[k],
                              .mine = nmine[k],
                              .attached = p->share != NULL,
                              .host_sole_owner = p->share && reply->queue[k] > 0 &&
                                                 host_is_sole_owner(p, reply->sole_owner[k]),
                              .handover_allowed = reply->handover_allowed[k],
                              .reasserted = reply->reasserted[k] > 0};
        if (dbt_queue_step(&p->queue[k], &ev) & DBT_QACT_NOT_ALONE)
            dbt_handover_foreign(p, (dbt_kind)k, 0);
        /* The host's shelf too; a queue that is all the host's (Redis' sole owner is its group:
         * its places kept for its next waits) recalls nothing from it (docs/design.md, "Keeping
         * while the host is sole"). */
        dbt_queue_event shelf_ev = ev;
        if (ev.host_sole_owner)
            shelf_ev.queue = 0;
        dbt_sharing_keep_event(p, (dbt_kind)k, &shelf_ev);
        /* the group's share and holding as Redis counts them (docs/design.md, "Shares"); none
         * in force after a re-assertion, as for kept permits above: re-asserted late, the host's
         * permits may be above the limit, and passing them on locally would keep them there */
        dbt_shev sev = {.type = DBT_SHEV_RENEWED,
                        .share = reply->share[k],
                        .held = reply->held[k],
                        .handover_allowed = reply->handover_allowed[k] && reply->reasserted[k] == 0,
                        .events_sent = shares[k].events,
                        .grants_sent = shares[k].grants,
                        .ticket_sent = shares[k].ticket,
                        .named_none = !named[k],
                        .reasserted = reply->reasserted[k] > 0,
                        .now_us = dbt_now_us()};
        dbt_sharing_share_event(p, (dbt_kind)k, NULL, &sev);
    }
}

/* Waiters whose place no renewal was accepted for a whole lease: Redis may have reaped it, so
 * they give up (open or closed), and withdraw it once Redis answers. Call with p->mu held. */
static void expire_unrenewed_places(dbt_pool *p, int64_t now)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (dbt_core_place_expired(&(dbt_slot_facts){.found = true,
                                                     .queued = s->state == SLOT_QUEUED,
                                                     .orphan = s->orphan},
                                   now - s->t_renewed_us, s->lease_us)) {
            dbt_lw_remove(p, s);
            s->state = SLOT_DOWN;
            s->down_misconfigured = p->misconfig[0] != '\0';
            p->nqueued--;
            dbt_slot_wake(s);
        }
}

/* Places no renewal was accepted for during a whole lease are not named in a renewal: Redis may
 * have reaped them and forgotten them since (it remembers an expired id for two leases), and a
 * renewal naming an id that neither expired lately nor left is evidence that Redis lost data,
 * which quarantines the whole pool (renew.lua; docs/design.md, "Failover and data loss"). This
 * process was stopped (SIGSTOP, a VM freeze) or cut off meanwhile: that must cost it alone. Its
 * thread queues again under a new id, behind those who kept their places, and the old place is
 * withdrawn in case Redis still has it (a renewal it accepted whose reply was never read), so
 * that it is not granted to nobody. An orphan place is left to settle_orphans, which
 * withdraws it. Call with p->mu held. */
static void requeue_unrenewed_places(dbt_pool *p, int64_t now)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (dbt_core_place_expired(&(dbt_slot_facts){.found = true,
                                                     .queued = s->state == SLOT_QUEUED,
                                                     .orphan = s->orphan},
                                   now - s->t_renewed_us, s->lease_us)) {
            dbt_defer_op_held(p, DBT_OWED_WITHDRAW, s->kind, s->id, -1);
            dbt_lw_remove(p, s);
            s->state = SLOT_REQUEUE;
            s->unrenewed = true;
            p->nqueued--;
            dbt_slot_wake(s);
        }
}

/* A renewal sent at `sent` got no usable answer, with p->mu held. One slow or failed renewal
 * does not end the waits: each waiter's place is still valid in Redis until its lease runs out,
 * and a blip must not let every waiter run unthrottled at once (nor leave their places to be
 * granted to nobody). The listener's own connection tells the leader when it breaks. */
static void renewal_failed(dbt_pool *p, int64_t sent)
{
    int64_t now = dbt_now_us();
    /* Not Redis' failure if it took far longer than a Redis call may: this process was stopped
     * with the renewal in flight, and its time ran out meanwhile. */
    if (now - sent > dbt_renewer_late_us(p)) {
        p->stall_seen_us = now;
        p->stall_us = now - sent;
    } else {
        p->renew_failed_us = now;
    }
    expire_unrenewed(p, now);
    expire_unrenewed_places(p, now);
    /* Try again soon, then less often: 100 ms, 200, 400, 800, then every second (or sooner, at
     * the next regular renewal). A Redis that restarted or failed over is back within a few
     * hundred ms, and the holders' permits must be re-asserted in its quarantine while their
     * commands still run (docs/design.md, "Failover and data loss"); a Redis that stays away
     * costs this thread one attempt per second, never the application's threads. */
    int64_t period = renew_period_us(p);
    int shift = p->renew_failures < 4 ? p->renew_failures : 4;
    p->renew_failures++;
    int64_t delay = shift < 4 ? (INT64_C(100000) << shift) : INT64_C(1000000);
    if (delay < period)
        p->last_renew_us = now - period + delay;
}

/* One renewal round trip for both kinds. Called with p->mu held; releases it meanwhile. */
static void renew(dbt_pool *p)
{
    dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS] = {{{0}}};
    dbt_id_list doing[DBT_NKINDS] = {{0}}; /* per held id, in the same order */
    bool ok = true;
    /* A holder no renewal was accepted for during a whole lease is lost before it is named: a
     * renewal may re-assert what Redis lacks (docs/design.md, "Failover and data loss"), and
     * only a belief younger than a lease may be re-asserted (an older one's permit may have
     * expired and gone to another long since, beyond what Redis remembers of it). */
    dbt_pool_close_outdated(p);
    int64_t start = dbt_now_us();
    expire_unrenewed(p, start);
    requeue_unrenewed_places(p, start);
    p->renew_now = false;
    if (p->share)
        dbt_share_purge_dead(p->share); /* their registrations must not be offered permits */
    /* Permits of ours on the host's shelf that another process took: its to renew now. */
    for (struct dbt_slot *s = p->slots, *next; s; s = next) {
        next = s->next;
        if (s->shelf && s->parked && !dbt_sharing_shelf_check(p, s, -1))
            dbt_handover_drop_taken_shelved(p, s);
    }
    /* Until when this process may still believe in any lease it names (its last accepted
     * renewal's send + a lease: then it takes the lease for lost): Redis, which may run this
     * renewal late (stopped, with it in its socket), takes an id it lacks after that for a lease
     * that ran out, not for data lost (renew.lua). */
    int64_t believed_until = 0;
    /* The lease this round carries, and its number: its reply renews only the ids it named, with
     * that lease (a slot an acquire made held meanwhile was not named: Redis has it by its
     * acquire's lease). */
    int64_t lease_ms = dbt_lease_us(p) / 1000;
    uint64_t round = ++p->renew_round;
    for (struct dbt_slot *s = p->slots; s && ok; s = s->next) {
        bool named = false;
        if (s->state == SLOT_HELD && !s->lost)
            ok = named =
                push_id(&lists[s->kind][DBT_RENEW_HELD], s->id) && push_doing(&doing[s->kind], s);
        else if (s->state == SLOT_QUEUED && (!s->orphan || start - s->t_renewed_us <= s->lease_us))
            ok = named = push_id(&lists[s->kind][DBT_RENEW_QUEUED], s->id);
        if (named)
            s->named_round = round;
        if (named && s->t_renewed_us + s->lease_us > believed_until)
            believed_until = s->t_renewed_us + s->lease_us;
    }
    dbt_redis_clock clock = p->redis_clock;
    /* The ids were chosen by their age at `start` (with p->mu held since): its reply renews
     * them from then, so that none it named is left unrefreshed at the edge of its lease. */
    int64_t sent = start;
    p->last_renew_us = p->last_report_us = sent;
    p->renew_in_flight_us = sent;
    /* The process' record rides on the renewal (registry.c); a process that exits takes it away
     * even if this renewal arrives after its farewell. */
    char record[DBT_RECORD_MAX];
    int64_t record_ttl;
    dbt_registry_record(p, record, &record_ttl);
    p->record_changed_us = 0;
    bool goodbye = p->exiting;
    /* its connections beside the record (conns.c); none said when they cannot be put in words */
    long long live_version = dbt_live_version(p);
    char *clients = malloc(DBT_CLIENTS_MAX);
    if (clients && !dbt_conns_format(p, clients, DBT_CLIENTS_MAX)) {
        free(clients);
        clients = NULL;
    }
    dbt_local_counts local[DBT_NKINDS];
    memcpy(local, p->unreported, sizeof local);
    memset(p->unreported, 0, sizeof p->unreported);
    local_waits *waits = malloc(sizeof *waits);
    if (waits)
        take_local_waits(p, waits);
    ok = ok && waits;
    /* what the host's share view was as this renewal leaves (docs/design.md, "Shares") */
    dbt_share_view shares[DBT_NKINDS];
    bool named[DBT_NKINDS];
    for (int k = 0; k < DBT_NKINDS; k++) {
        dbt_sharing_share_view(p, (dbt_kind)k, &shares[k]);
        named[k] = ok && names_group(p, lists[k]);
    }
    /* Acquires of ours in flight may be queued in Redis by the time it runs this renewal: they
     * count as ours in the queue, or the renewal ends a sole state their own replies just set
     * (seen under load: 5 threads queueing as the first renewal left, and the process then sent
     * every permit back to Redis). */
    int pending[DBT_NKINDS] = {0};
    for (const struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_PENDING && s->kind < DBT_NKINDS && s->gen == p->gen)
            pending[s->kind]++;
    pthread_mutex_unlock(&p->mu);

    char err[DBT_ERRLEN];
    redisReply *rep = NULL;
    dbt_renew_reply reply;
    int total = 0, nmine[DBT_NKINDS];
    for (int k = 0; k < DBT_NKINDS; k++) {
        total += lists[k][DBT_RENEW_HELD].n + lists[k][DBT_RENEW_QUEUED].n;
        nmine[k] = lists[k][DBT_RENEW_QUEUED].n + pending[k];
    }
    const char **args = ok ? malloc((size_t)dbt_renew_nargs(lists) * sizeof *args) : NULL;
    if (args) {
        dbt_script_call call;
        dbt_build_renew(&call, &p->keys, p->client->cfg, lists, local, args);
        dbt_lease_bind(p, &call, lease_ms);
        dbt_renew_add_record(&call, &p->keys, p->client->cid, record, record_ttl, goodbye);
        if (clients)
            dbt_renew_add_clients(&call, clients);
        for (int k = 0; k < DBT_NKINDS; k++)
            dbt_renew_add_doing(&call, doing[k].ids, doing[k].n);
        dbt_renew_add_local_hist(&call, waits->args);
        dbt_renew_add_until(&call, believed_until, &clock);
        dbt_renew_add_local_holds(&call, waits->holds_args);
        dbt_renew_add_live(&call, live_version);
        rep = dbt_pool_run(p, "renew", &call, dbt_parse_renew, &reply, err);
        if (rep && total > 0) /* it checked the era of both kinds */
            dbt_pool_era_seen(p, call.era_token);
        if (rep && reply.now_ms > 0 && call.era_token[0]) {
            /* Redis read its clock after the send: an upper bound of how far it is ahead */
            snprintf(clock.run_id, sizeof clock.run_id, "%s", call.era_token);
            clock.ahead_ms = reply.now_ms - sent / 1000;
            clock.at_us = sent;
        }
    } else {
        dbt_pool_note_error(p, "renew", "out of memory");
    }
    free(args);
    for (int k = 0; k < DBT_NKINDS; k++) {
        for (int j = 0; j < DBT_RENEW_LISTS; j++)
            free_ids(&lists[k][j]);
        free_ids(&doing[k]);
    }

    if (rep) {
        dbt_pool_note_ok(p, sent);
        for (int k = 0; k < DBT_NKINDS; k++)
            dbt_pool_note_quarantine(p, (dbt_kind)k, reply.quarantine_ms[k], reply.why[k]);
    }
    pthread_mutex_lock(&p->mu);
    p->renew_in_flight_us = 0;
    if (clock.at_us > p->redis_clock.at_us)
        p->redis_clock = clock;
    if (!rep) /* counted at the next renewal instead */
        for (int k = 0; k < DBT_NKINDS; k++) {
            p->unreported[k].grants += local[k].grants;
            p->unreported[k].queued += local[k].queued;
            p->unreported[k].wait_us += local[k].wait_us;
        }
    if (!rep && waits)
        give_back_local_waits(p, waits);
    free(waits);
    free(clients);
    dbt_cancels cancels = {.n = 0};
    char *live = NULL;
    if (rep) {
        p->renew_failures = 0;
        p->reported = !goodbye;
        apply_renewal(p, &reply, sent, lease_ms, round, nmine, shares, named, &cancels);
        if (reply.live)
            live = strdup(reply.live); /* applied below, without the lock */
        freeReplyObject(rep);
    } else {
        renewal_failed(p, sent);
        /* The renewal took up to a Redis timeout: a lease may now lapse before the next. */
        (void)dbt_lapse_take_due(p, dbt_now_us(), cancel_hook != NULL, &cancels);
    }
    send_cancels(p, &cancels);
    if (live) { /* the pool's live settings changed (live.c) */
        pthread_mutex_unlock(&p->mu);
        int64_t lease_was = dbt_lease_us(p);
        dbt_live_apply(p, live);
        if (dbt_lease_us(p) != lease_was) /* the segment of the old lease goes (sharing.c) */
            dbt_handover_leave_segment(p);
        pthread_mutex_lock(&p->mu);
        free(live);
    }
    dbt_live_heard(p); /* a first command waits for this (dbt_pool_await_live) */
}

static void timed_park(dbt_pool *p, int64_t until_us)
{
    plan_back(p, until_us, dbt_now_us());
    dbt_cond_wait_until(&p->bg_cv, &p->mu, until_us);
}

/* The renewer's own eventfd, for dbt_listen. p->mu held. False when it cannot have one (then it
 * gives kept permits back by DBTHROTTLE_CACHE_IDLE only). */
static bool listen_ready(dbt_pool *p)
{
    if (!p->bg_slot) {
        struct dbt_slot *s = calloc(1, sizeof *s);
        if (!s)
            return false;
        s->pool = p;
        s->state = SLOT_PENDING; /* never HELD: dbt_listen returns on any message */
        s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->efd < 0) {
            free(s);
            return false;
        }
        p->bg_slot = s;
    }
    return true;
}

/* Permits are kept and no thread waits: listen until `until` (or a wake) for the push that says
 * a waiter queued. Called with p->mu held; returns with it. */
static void listen_for_revokes(dbt_pool *p, int64_t until)
{
    plan_back(p, until, dbt_now_us());
    p->leader_active = p->bg_leading = true;
    pthread_mutex_unlock(&p->mu);
    dbt_acquire_opts none = {.limit = 1};
    /* Each (re)connection of the listener takes one DBTHROTTLE_REDIS_TIMEOUT at most, all its
     * steps together (listener.c, ready_listener): the renewals and the kept permits' return
     * wait on this thread (a Redis that accepts connections but does not answer, as under
     * CLIENT PAUSE, held it up for the whole pause when each step had the whole timeout). */
    (void)dbt_listen(p, p->bg_slot, until, &none);
    pthread_mutex_lock(&p->mu);
    p->leader_active = p->bg_leading = false;
    if (p->nqueued > 0)
        dbt_listener_pass(p); /* a thread began to wait meanwhile: the role is its */
}

/* BLPOPs in flight that name the host's list wake:<G>, and no thread of ours waits to read their
 * replies (its waits ended before the BLPOPs did: they last up to 30 s): an "f" one of them pops
 * must still reach the segment, or the host's other processes go on passing permits among
 * themselves while another host waits. p->mu held. */
static bool blpops_unread(const dbt_pool *p)
{
    return p->group[0] && p->blpop_in_flight > 0 && p->nwait_threads == 0 && !p->leader_active &&
           !p->listener_reset;
}

/* Reads those replies until `until` (or a wake), sending no new BLPOP. p->mu held. */
static void read_blpops(dbt_pool *p, int64_t until)
{
    p->bg_reads_only = true;
    listen_for_revokes(p, until);
    p->bg_reads_only = false;
}

/* Gives back the orphans that are due (handover.c says which: dbt_orphans_take_due): each place
 * withdrawn by cancel.lua, which gives a permit back too when Redis granted the place meanwhile
 * (one call does for both); a permit the host's segment took is only freed. Called with p->mu
 * held; lets it go for the Redis calls. */
static void settle_orphans(dbt_pool *p)
{
    enum { BATCH = 64 };
    struct dbt_slot *todo[BATCH];
    bool send[BATCH];
    int n = dbt_orphans_take_due(p, todo, send, BATCH);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n; i++) {
        if (send[i])
            dbt_send_cancel(p, DBT_OWED_WITHDRAW, todo[i]->kind, todo[i]->id);
        dbt_free_slot(todo[i]);
    }
    pthread_mutex_lock(&p->mu);
    p->ninflight = 0; /* only the renewer adds to it */
}

/* What dbt_renewer_ensure hands its new thread: the pool, and a semaphore the thread posts once it
 * runs our code. */
typedef struct {
    dbt_pool *pool;
    sem_t running;
} thread_start;

/* The renewer runs its loop again at `now`: later than it could have unless stalled (after a
 * park, its end and a margin; after a round of Redis calls, the time they may take), so this
 * process was stopped or not scheduled meanwhile, which the leases it loses must say
 * (dbt_slot_expire_unrenewed), not blame Redis. Then plans the next round. p->mu held. */
static void note_ran(dbt_pool *p, int64_t now)
{
    if (p->bg_back_by_us && now > p->bg_back_by_us) {
        p->stall_seen_us = now;
        p->stall_us = now - p->bg_plan_us;
    }
    plan_back(p, now, now);
}

/* One chunk of shadow mode's sample, within a Redis timeout of its own. p->mu held on entry and
 * exit, not across the call. */
static void send_sample_chunk(dbt_pool *p)
{
    pthread_mutex_unlock(&p->mu);
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    (void)dbt_sample_send(p);
    dbt_redis_budget_end(b);
    pthread_mutex_lock(&p->mu);
}

/* When shadow mode's sample is to be sent (-1: nothing to send): not while Redis is away. p->mu
 * held. */
static int64_t sample_due_us(const dbt_pool *p)
{
    int64_t due = dbt_sample_due_us(p);
    if (due >= 0 && due < p->down_until_us)
        due = p->down_until_us;
    return due;
}

static void *thread_main(void *arg)
{
    thread_start *start = arg;
    dbt_pool *p = start->pool;
    sem_post(&start->running); /* before taking p->mu, which our creator holds */
    /* The parked commands whose grants this thread hears are sent from it (pool.h). */
    dbt_deliver_thread_is_ours();
    pthread_mutex_lock(&p->mu);
    bool idle = true;
    int64_t share_polled_us = 0;
    while (!p->stop) {
        note_ran(p, dbt_now_us());
        /* First, before any Redis call (each may take a whole DBTHROTTLE_REDIS_TIMEOUT): closed
         * mode's commands whose lease may lapse before a renewal could confirm it. */
        dbt_cancels lapsing = {.n = 0};
        int64_t lapse_due = dbt_lapse_take_due(p, dbt_now_us(), cancel_hook != NULL, &lapsing);
        if (lapsing.n > 0) {
            send_cancels(p, &lapsing);
            continue;
        }
        if (dbt_summary_periodic(p)) /* DBTHROTTLE_LOG_STATS */
            continue;
        if (p->ndeferred > 0 && p->down_until_us <= dbt_now_us()) {
            /* Redis answers again (or never failed): tell it what was given back meanwhile. */
            pthread_mutex_unlock(&p->mu);
            dbt_flush_deferred(p);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        /* Shadow mode's sample: one chunk per pass, after what leases and waiters need (below). */
        int64_t sample_due = sample_due_us(p);
        if (dbt_shelf_recall_due(p)) {
            /* Another host waits: the host's kept permits go back, whoever kept them. */
            pthread_mutex_unlock(&p->mu);
            dbt_return_shelf(p);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        if (p->drain_due_us && p->drain_due_us <= dbt_now_us()) {
            p->drain_due_us = 0;
            int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
            dbt_pool_drain_idle(p);
            dbt_redis_budget_end(b);
            continue;
        }
        if (p->nqueued == 0 && p->nheld == 0 && p->ndeferred == 0 && !p->drain_due_us) {
            /* Nothing to renew: only the process' record, once a lease (its heartbeat, so that
             * dbthrottle status lists an idle or disabled process too), or a second after a
             * heartbeat that failed. Nothing to re-assert either. */
            idle = true;
            p->renew_now = false;
            /* (renew_at_us is kept: an acquire notes the quarantine its reply reports, and wakes
             * this thread, before its slot counts as queued; the pump at the quarantine's end is
             * then still due once it does.) */
            int64_t beat = p->last_report_us + dbt_registry_heartbeat_us(p);
            /* a connection opened, closed or changed state meanwhile (conns.c) is reported
             * within a second; one the last report showed busy is looked at again as soon */
            bool conns_busy;
            dbt_conns_look(p, dbt_now_us(), &conns_busy);
            if (p->known_changed && p->known_changed_us + DBT_DOING_REPORT_US < beat)
                beat = p->known_changed_us + DBT_DOING_REPORT_US;
            if (conns_busy && dbt_now_us() + DBT_DOING_REPORT_US < beat)
                beat = dbt_now_us() + DBT_DOING_REPORT_US;
            if (p->record_changed_us && p->record_changed_us < beat)
                beat = p->record_changed_us;
            if (p->down_until_us > 0 && p->down_until_us < beat)
                beat = p->down_until_us;
            if (!p->last_report_us || dbt_now_us() >= beat) {
                int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
                renew(p);
                dbt_redis_budget_end(b);
                continue;
            }
            if (sample_due >= 0 && sample_due <= dbt_now_us()) {
                send_sample_chunk(p);
                continue;
            }
            int64_t wake = sample_due >= 0 && sample_due < beat ? sample_due : beat;
            if (blpops_unread(p) && p->down_until_us <= dbt_now_us() && listen_ready(p)) {
                read_blpops(p, dbt_summary_sooner(p, wake));
                continue;
            }
            p->bg_idle = true;
            p->bg_until_us = dbt_summary_sooner(p, wake);
            timed_park(p, p->bg_until_us);
            p->bg_until_us = 0;
            p->bg_idle = false;
            continue;
        }
        int64_t now = dbt_now_us(), period = renew_period_us(p);
        if (dbt_sharing_attach_due(p, now)) {
            /* The segment broke (or could not be had): let it go, and attach again later. */
            pthread_mutex_unlock(&p->mu);
            dbt_sharing_attach(p);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        if (idle) {
            /* Leases were just set by the acquire: the first renewal is due a period later. But
             * a process not listed yet (its first use of the pool) reports itself at once:
             * dbthrottle status must list it while it holds, not a renewal period later. */
            idle = false;
            p->last_renew_us = p->last_report_us ? now : now - period;
        }
        int64_t due = p->last_renew_us + period;
        int64_t back = dbt_parked_due_us(p);
        if (back >= 0 && back <= now) {
            pthread_mutex_unlock(&p->mu);
            dbt_return_parked(p);
            pthread_mutex_lock(&p->mu);
            continue;
        }
        if (back >= 0 && back < due)
            due = back; /* wake for it, and renew when the renewal is due (checked above) */
        int64_t orphans = dbt_orphans_due_us(p);
        if (orphans >= 0 && orphans <= now) {
            settle_orphans(p);
            continue;
        }
        if (orphans >= 0 && orphans < due)
            due = orphans;
        /* While orphans keep coming (each permit another process passes here leaves one, until
         * the next command adopts it), no sleep past the check of a new one: a thread that makes
         * one wakes this one only when it sleeps longer (handover.c), and that was every time, a
         * wake-up per permit passed. */
        if (p->orphan_made_us && now - p->orphan_made_us < ORPHANS_RECENT_US &&
            now + DBT_ORPHAN_IDLE_US < due)
            due = now + DBT_ORPHAN_IDLE_US;
        if (lapse_due >= 0 && lapse_due < due)
            due = lapse_due;
        if (sample_due >= 0 && sample_due < due)
            due = sample_due;
        if (dbt_sharing_registered(p)) {
            /* A permit offered to a waiter of ours whose wake was lost would wait for nobody:
             * taken on this timer too. */
            if (now >= share_polled_us + DBT_SHARE_POLL_US) {
                share_polled_us = now;
                pthread_mutex_unlock(&p->mu);
                dbt_handover_receive(p);
                pthread_mutex_lock(&p->mu);
                continue;
            }
            if (share_polled_us + DBT_SHARE_POLL_US < due)
                due = share_polled_us + DBT_SHARE_POLL_US;
        }
        if (p->ndeferred > 0 && p->down_until_us > now && p->down_until_us < due)
            due = p->down_until_us; /* what is owed goes as soon as Redis may answer again */
        if (p->drain_due_us && p->drain_due_us < due)
            due = p->drain_due_us;
        /* A quarantine ends: its waiters are granted by a renewal's pump, at once. Made whether
         * or not a thread of ours is queued now: an acquire notes the quarantine its reply
         * reports, and wakes this thread, before its slot counts as queued, and a renewer that
         * looked in between dropped the pump (here and in the idle branch above): a newcomer
         * queued in a quarantine waited for its first renewal, 2 s, not for the quarantine's end
         * (1109-1521 ms after it in releases_outlive_a_stall (restart), 1 run in 4 and in CI). */
        bool quarantine_over = p->renew_at_us && p->renew_at_us + QUARANTINE_MARGIN_US <= now;
        if (p->renew_at_us && p->renew_at_us + QUARANTINE_MARGIN_US < due)
            due = p->renew_at_us + QUARANTINE_MARGIN_US;
        /* Places kept for the next waiter, and no thread of ours waits: nobody else listens for
         * their grants (which must go back at once). */
        bool waiters = p->lw_head[DBT_KIND_QUERY] || p->lw_head[DBT_KIND_CONN];
        bool orphans_unheard = p->norphans > 0 && !waiters;
        /* Waiters and no thread of ours waiting (held.c parks an event loop's command): nobody
         * else listens for their grants, nor for permits other processes pass to them (which
         * would sit in the segment, renewed by nobody). */
        bool waits_unheard = waiters && p->nwait_threads == 0;
        int64_t tick = now + p->client->cfg->cache_idle_ms * 1000;
        if (p->client->cfg->cache_permits && p->nheld > 0 && tick < due)
            due = tick; /* a permit in use now may be kept soon: a park then needs no wake-up */
        /* What Redis shows of the holders, sent once it has lasted (doing_report_due); one such
         * renewal a DBT_DOING_REPORT_US at most. A state that changes while this thread sleeps
         * is looked at within one too: no wake-up per statement. */
        bool changing;
        int64_t doing_due = doing_report_due(p, &changing);
        if (doing_due >= 0 && doing_due < p->last_renew_us + DBT_DOING_REPORT_US)
            doing_due = p->last_renew_us + DBT_DOING_REPORT_US;
        if (doing_due >= 0 && doing_due <= now)
            p->renew_now = true;
        else if (doing_due >= 0 && doing_due < due)
            due = doing_due;
        if (changing && now + DBT_DOING_REPORT_US < due)
            due = now + DBT_DOING_REPORT_US;
        due = dbt_summary_sooner(p, due);
        if (now >= p->last_renew_us + period || p->renew_now || quarantine_over) {
            if (quarantine_over)
                p->renew_at_us = 0;
            /* One timeout for the round: a hung Redis must not hold the waiters' news back by
             * one timeout per idle connection. */
            int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
            renew(p);
            dbt_pool_drain_idle(p);
            dbt_redis_budget_end(b);
            warn_idle_in_tx(p, dbt_now_us());
        } else if (sample_due >= 0 && sample_due <= now) {
            send_sample_chunk(p);
        } else if (((p->client->cfg->cache_permits && p->nheld > 0 && p->nqueued == 0) ||
                    orphans_unheard || waits_unheard) &&
                   !p->leader_active && p->down_until_us <= now && listen_ready(p)) {
            /* Listening while permits are held, not only while kept: a connection that reuses
             * its permit back to back is kept only microseconds at a time, and must still learn
             * that somebody queued, to give it back at the end of its command. */
            p->bg_until_us = due;
            listen_for_revokes(p, due);
            p->bg_until_us = 0;
        } else if (blpops_unread(p) && p->down_until_us <= now && listen_ready(p)) {
            p->bg_until_us = due;
            read_blpops(p, due);
            p->bg_until_us = 0;
        } else {
            /* Holding and awaiting nothing (only a release's reply to read soon): woken by the
             * next grant as out of the idle wait, so that it listens for the revoke of a permit
             * about to be kept, rather than sleeping until the reply is due (a waiter of another
             * process then waited ~200 ms behind a kept idle permit). */
            p->bg_idle = p->nheld == 0 && p->nqueued == 0;
            p->bg_until_us = due;
            timed_park(p, due);
            p->bg_until_us = 0;
            p->bg_idle = false;
        }
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

void dbt_renewer_ensure(dbt_pool *p)
{
    if (p->thread_started) {
        /* Reading the replies of BLPOPs its waits left in flight, with nothing held
         * (blpops_unread): it renews nothing until one comes or its heartbeat, a lease away. A
         * permit is held now: out of that listen, to renew it (the listener keeps a BLPOP more than
         * its waiting threads in flight, so every wait leaves one). */
        if (p->bg_leading && p->bg_reads_only) {
            dbt_pool_wake_bg(p);
            return;
        }
        /* Woken only when its schedule changes: out of its idle wait (leases to renew now), or
         * when it would sleep past the next check of kept permits. Not once per acquire: that
         * was a futex wake and two thread switches per command. */
        if (p->bg_idle || (p->client->cfg->cache_permits &&
                           p->bg_until_us > dbt_now_us() + p->client->cfg->cache_idle_ms * 1000))
            pthread_cond_signal(&p->bg_cv);
        return;
    }
    /* Its eventfd now, not at its first listen: when that comes depends on the scheduler (the
     * first wait a cancel ends with a BLPOP of the host's list still in flight, the first kept
     * permit), and a descriptor that appears at a time nobody can predict looks like a leak to a
     * program that counts its own (cancel_ends_wait saw 12 -> 13 across ten cancels). One per
     * pool, made once; without one the renewer tries again where it listens. */
    (void)listen_ready(p);
    /* The thread takes none of the host program's signals: they belong to its own threads. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    p->stop = false;
    thread_start start = {.pool = p};
    sem_init(&start.running, 0, 0);
    p->thread_started = pthread_create(&p->thread, NULL, thread_main, &start) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    /* Wait until the thread runs our code: while it starts up, a sanitizer runtime allocates for it
     * (ASan before LLVM 17 has no fork handler for its allocator's locks), and a fork() the program
     * makes right after this acquire left the child stuck on a lock no thread of its would free.
     * glibc's own malloc is fork-safe; the wait costs one thread switch per pool. */
    while (p->thread_started && sem_wait(&start.running) != 0 && errno == EINTR) {
    }
    sem_destroy(&start.running);
    if (!p->thread_started) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("error", "cannot start a thread")};
        dbt_log(DBT_LOG_ERROR, "renewer_error", f, 2);
        dbt_fail_waiters(p);
    }
}

void dbt_renewer_stop(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    if (!p->thread_started) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    p->stop = true;
    dbt_pool_wake_bg(p);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->thread, NULL);
    pthread_mutex_lock(&p->mu);
    p->thread_started = false;
    pthread_mutex_unlock(&p->mu);
}

/* In a fork()ed child: no renewer thread (threads do not survive fork); it starts anew when
 * needed. */
static void after_fork(dbt_pool *p)
{
    dbt_cond_init_mono(&p->bg_cv);
    p->thread_started = false;
    p->stop = false;
    p->bg_idle = false;
    p->bg_until_us = 0;
    p->drain_due_us = 0;
    /* The renewer's eventfd is shared with the parent's: the child makes its own. */
    if (p->bg_slot) {
        close(p->bg_slot->efd);
        free(p->bg_slot);
        p->bg_slot = NULL;
    }
    p->bg_leading = p->bg_reads_only = false;
    p->last_report_us = 0; /* the child reports itself, under its own id, from its first use */
    p->reported = false;
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
