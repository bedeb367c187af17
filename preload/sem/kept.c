/* kept.c - permits kept between commands (DBTHROTTLE_CACHE_PERMITS): keeping, taking back, and
 * the renewer giving back those due. */
#include "kept.h"
#include "clock.h"
#include "fork.h"
#include "handover.h"
#include "listener.h"
#include "log.h"
#include "pool.h"
#include "release.h"
#include "sample.h"
#include "sharing.h"
#include "trace.h"

#include <string.h>

/* ---- kept permits (DBTHROTTLE_CACHE_PERMITS) ------------------------------------------------ */

/* Whether this thread's last park (unpark) went to the host's shelf: its next one looks at the
 * segment's file before p->mu (dbt_sharing_precheck) only then. A look that no shelf call uses
 * is a system call for nothing (16 processes of one host at a limit of 4, contended, keep
 * nothing: 8% fewer transactions with it on every call); a shelf call not foreseen looks under
 * p->mu, as before. */
static __thread bool park_shelved, unpark_shelved;

/* p->mu held: whether a kept permit is due back at once because somebody queued. One on the
 * host's shelf stays while the host is sole (everybody queued is the host's: its places kept
 * for its next waits); see dbt_sharing_shelf_keepable. `memo` (may be NULL) keeps the shelf's
 * answer for the shape last asked, so that a pass over the parked slots locks the segment once
 * per shape, not once per slot. */
typedef struct {
    bool set;
    dbt_share_shape shape; /* the shape answered for (a copy: the pass may let slots go) */
    bool contended;
} shelf_memo;

static bool kept_contended(dbt_pool *p, const struct dbt_slot *s, bool shelf, shelf_memo *memo)
{
    /* Off the shelf, a permit another process of the host made (taken back from the shelf when
     * the segment went: a live lease change) is due back at once: its recall comes to its maker's
     * list and the group's, and this process listens on neither now (listener.c). */
    if (!shelf && !dbt_sharing_id_ours(p, s->id))
        return true;
    if (!shelf)
        return p->queue[s->kind].keep.contended;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    if (memo && memo->set && memo->shape.kind == shape.kind && memo->shape.limit == shape.limit &&
        memo->shape.weight == shape.weight && strcmp(memo->shape.klass, shape.klass) == 0)
        return memo->contended;
    bool contended = !dbt_sharing_shelf_keepable(p, s);
    if (memo)
        *memo = (shelf_memo){.set = true, .shape = shape, .contended = contended};
    return contended;
}

bool dbt_permit_park(dbt_permit *s)
{
    if (!s || !s->pool->client->cfg->cache_permits)
        return false; /* caching off: the common query path pays no lock for asking */
    dbt_pool *p = s->pool;
    if (park_shelved)
        dbt_sharing_precheck(p); /* the shelf's segment, looked at before p->mu: hostshare.h */
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us();
    /* Attached to the host's segment, a permit of the host's group is kept on the host's shelf,
     * where any process of the host takes it (sharing.c), and Redis pushes its recall to the
     * group's list, which the host's listeners pop. Otherwise a permit another process of the
     * host made and passed here is not kept: Redis pushes the revoke that would give it back to
     * its maker, not to us. */
    bool shelf = p->share && dbt_sharing_id_grouped(p, s->id);
    dbt_keep_facts f = {.cache_on = true,
                        .held = s->state == SLOT_HELD,
                        .already_kept = s->parked,
                        .current_gen = s->gen == p->gen,
                        /* the shelf's own rule, under its lock: dbt_share_shelve */
                        .contended = !shelf && p->queue[s->kind].keep.contended,
                        .redis_down = p->down_until_us > now,
                        .made_here = shelf || dbt_sharing_id_ours(p, s->id),
                        .over_limit = s->over_limit,
                        .lease = dbt_slot_lease(p, s, now)};
    dbt_permit_route r = dbt_core_keep(&f);
    if (r.mark_unrenewed)
        (void)dbt_slot_expire_unrenewed(p, s, now); /* marks it lost, says why */
    /* (The shelf refuses while the host's kind is contended: one lock for both.) */
    park_shelved = r.to == DBT_ROUTE_WAITER && shelf;
    bool keep = r.to == DBT_ROUTE_WAITER && (!shelf || dbt_sharing_shelve(p, s));
    if (keep) {
        dbt_sample_end(p, s, now); /* its command ended: kept for the next */
        s->parked = true;
        s->parked_us = now;
        s->doing_since_us = now;
        p->nparked++;
        /* The renewer gives it back after DBTHROTTLE_CACHE_IDLE (it listens for a waiter's
         * arrival already: it does while the process holds permits). Woken only when it would
         * sleep past that: once per idle period at most, not once per command. */
        int64_t back = now + p->client->cfg->cache_idle_ms * 1000;
        if (!p->thread_started)
            dbt_pool_start_bg(p);
        else if (p->bg_until_us > back)
            dbt_pool_wake_bg(p);
    }
    pthread_mutex_unlock(&p->mu);
    dbt_sharing_precheck_end();
    if (keep)
        dbt_trace(DBT_LOG_DEBUG, "keep", s, -1, -1, -1, -1, NULL, NULL);
    return keep;
}

bool dbt_permit_unpark(dbt_permit **slot)
{
    dbt_permit *s = *slot;
    if (!s)
        return false;
    dbt_pool *p = s->pool;
    if (unpark_shelved)
        dbt_sharing_precheck(p); /* as in dbt_permit_park */
    pthread_mutex_lock(&p->mu);
    bool ours = s->state == SLOT_HELD && s->parked && s->gen == p->gen;
    bool taken = false; /* from the shelf by another process of the host: its permit now */
    bool shelf = s->shelf != 0;
    unpark_shelved = ours && s->shelf;
    if (ours && s->shelf && !dbt_sharing_unshelve_own(p, s)) {
        ours = false;
        taken = true;
        dbt_pool_note_kept_hold(p, s);
    }
    dbt_reuse_facts f = {.ours = ours,
                         .contended = ours && kept_contended(p, s, shelf, NULL),
                         .message_waiting = ours && dbt_listener_unread(p),
                         .lease = dbt_slot_lease(p, s, dbt_now_us())};
    bool reuse = dbt_core_reuse(&f);
    if (s->parked) {
        s->parked = false;
        s->doing_since_us = dbt_now_us();
        if (s->gen == p->gen)
            p->nparked--;
    }
    if (taken) {
        dbt_unlink_slot(p, s);
        s->state = SLOT_RETURNED; /* freed below, never released: not ours */
    }
    pthread_mutex_unlock(&p->mu);
    dbt_sharing_precheck_end();
    if (reuse) {
        int64_t now = dbt_now_us();
        /* a kept permit: within the limit */
        bool shadow = dbt_pool_shadow(p, s->kind);
        dbt_sample_begin(p, s, shadow, now, 0, now, shadow ? DBT_SAMPLE_RAN : DBT_SAMPLE_LOCAL);
        dbt_trace(DBT_LOG_DEBUG, "reuse", s, -1, -1, -1, -1, NULL, NULL);
        return true;
    }
    /* Given back meanwhile (a waiter came, or it sat idle too long), or the parent's; or ours,
     * and due back now (a waiter queued): given back here, and the command asks anew. */
    dbt_release(s);
    *slot = NULL;
    return false;
}

int64_t dbt_parked_due_us(dbt_pool *p)
{
    if (p->nparked == 0)
        return -1;
    int64_t idle = p->client->cfg->cache_idle_ms * 1000, due = -1;
    shelf_memo memo = {.set = false};
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->parked) {
            int64_t at = dbt_core_kept_due_us(kept_contended(p, s, s->shelf != 0, &memo),
                                              s->parked_us, idle);
            if (due < 0 || at < due)
                due = at;
        }
    return due;
}

void dbt_return_parked(dbt_pool *p)
{
    enum { BATCH = 64 };
    struct dbt_slot copies[BATCH];
    const char *why[BATCH];
    int n = 0;
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us(), idle = p->client->cfg->cache_idle_ms * 1000;
    shelf_memo memo = {.set = false};
    for (struct dbt_slot *s = p->slots, *next; s && n < BATCH; s = next) {
        next = s->next;
        bool contended = s->parked && kept_contended(p, s, s->shelf != 0, &memo);
        if (!s->parked || dbt_core_kept_due_us(contended, s->parked_us, idle) > now)
            continue;
        if (p->ninflight >= (int)(sizeof p->inflight / sizeof p->inflight[0]))
            break;
        if (s->shelf && !dbt_sharing_unshelve_own(p, s)) {
            /* Another process of the host took it off the shelf: its permit now. */
            dbt_pool_note_kept_hold(p, s);
            s->parked = false;
            p->nparked--;
            dbt_unlink_slot(p, s);
            s->state = SLOT_RETURNED; /* its owner frees it */
            continue;
        }
        /* To another process of the host, if one of its threads waited longest: no Redis. */
        if (dbt_handover_offer_host(p, s)) {
            dbt_pool_note_hold(p, s->kind, s->klass, (now - s->t_grant_us) / 1000);
            s->parked = false;
            p->nparked--;
            dbt_unlink_slot(p, s);
            s->state = SLOT_RETURNED; /* its owner frees it */
            dbt_orphans_idle_from(p, s, now);
            continue;
        }
        dbt_sharing_gave_back(p, s->kind, s->id, s->lost);
        p->inflight[p->ninflight].what = DBT_OWED_RELEASE;
        p->inflight[p->ninflight].kind = s->kind;
        p->inflight[p->ninflight].held_ms = (now - s->t_grant_us) / 1000;
        memcpy(p->inflight[p->ninflight].id, s->id, sizeof s->id);
        p->ninflight++;
        why[n] = contended ? "a waiter queued" : "kept idle for DBTHROTTLE_CACHE_IDLE";
        /* What the trace and the release need, copied: once RETURNED, the owner may free s. */
        dbt_trace_copy(&copies[n], s);
        copies[n].query = NULL;
        n++;
        s->parked = false;
        p->nparked--;
        dbt_unlink_slot(p, s); /* no longer renewed, nor counted as held */
        s->state = SLOT_RETURNED;
    }
    /* The process went idle of a kind whose permits these were: its places kept for a next wait
     * are withdrawn before the releases, which would grant the oldest of them, to nobody
     * (release.c does the same). */
    struct dbt_slot *idle_places[16];
    int nplaces = 0;
    for (int i = 0; i < n && nplaces < 16; i++)
        nplaces += dbt_orphans_take_if_idle(p, copies[i].kind, idle_places + nplaces, 16 - nplaces);
    bool down = p->down_until_us > now;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < nplaces; i++) {
        dbt_send_cancel(p, DBT_OWED_WITHDRAW, idle_places[i]->kind, idle_places[i]->id);
        dbt_free_slot(idle_places[i]);
    }
    for (int i = 0; i < n; i++) {
        int64_t held_ms = (now - copies[i].t_grant_us) / 1000;
        if (!down)
            dbt_send_release(p, copies[i].kind, copies[i].id, held_ms);
        else
            dbt_defer_op(p, DBT_OWED_RELEASE, copies[i].kind, copies[i].id, held_ms);
        dbt_trace(DBT_LOG_INFO, "release", &copies[i], -1, dbt_now_us() - copies[i].t_grant_us, -1,
                  -1, "reason", why[i]);
    }
    pthread_mutex_lock(&p->mu);
    p->ninflight = 0; /* only the renewer adds to it */
    pthread_mutex_unlock(&p->mu);
}

void dbt_shelf_settle_at_exit(dbt_pool *p)
{
    for (struct dbt_slot *s = p->slots, *next; s; s = next) {
        next = s->next;
        if (!s->shelf || s->gen != p->gen || dbt_sharing_unshelve_own(p, s))
            continue;
        dbt_pool_note_kept_hold(p, s);
        if (s->parked) {
            s->parked = false;
            p->nparked--;
        }
        dbt_unlink_slot(p, s);
        s->state = SLOT_RETURNED; /* its owner frees it */
    }
}

bool dbt_shelf_recall_due(const dbt_pool *p)
{
    for (int k = 0; k < DBT_NKINDS; k++)
        if (p->shelf_recall[k])
            return true;
    return false;
}

void dbt_return_shelf(dbt_pool *p)
{
    enum { BATCH = 64 };
    dbt_share_permit ids[BATCH];
    struct dbt_slot *own[BATCH];
    dbt_kind kinds[BATCH];
    int n = 0;
    pthread_mutex_lock(&p->mu);
    for (int k = 0; k < DBT_NKINDS && n < BATCH; k++) {
        if (!p->shelf_recall[k])
            continue;
        p->shelf_recall[k] = false;
        int got = dbt_sharing_shelf_take_kind(p, (dbt_kind)k, ids + n, own + n, BATCH - n);
        for (int i = n; i < n + got; i++) {
            kinds[i] = (dbt_kind)k;
            dbt_sharing_gave_back(p, (dbt_kind)k, ids[i].id, false);
            struct dbt_slot *s = own[i];
            if (s) { /* this process' own: off its lists as dbt_return_parked does */
                s->shelf = 0;
                if (s->parked) {
                    s->parked = false;
                    p->nparked--;
                }
                dbt_unlink_slot(p, s);
                s->state = SLOT_RETURNED; /* its owner frees it */
            }
        }
        n += got;
    }
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n; i++) {
        /* Releasing an id twice changes nothing: a shelver that exits meanwhile may too. (Its
         * hold: from the grant Redis last heard of, as no process holds it now.) */
        if (!down)
            dbt_send_release(p, kinds[i], ids[i].id, -1);
        else
            dbt_defer_op(p, DBT_OWED_RELEASE, kinds[i], ids[i].id, -1);
    }
    if (n > 0 && dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("permits", n),
                         DBT_S("reason", "a waiter queued: the host's kept permits go back")};
        dbt_log(DBT_LOG_INFO, "shelf_returned", f, 3);
    }
}

/* In a fork()ed child: no permit kept, nothing being given back (the parent's). */
static void after_fork(dbt_pool *p)
{
    p->ninflight = 0;
    p->nparked = 0;
    memset(p->shelf_recall, 0, sizeof p->shelf_recall);
    dbt_queue_event fork = {.type = DBT_QEV_FORK};
    for (int k = 0; k < DBT_NKINDS; k++)
        (void)dbt_queue_step(&p->queue[k], &fork); /* what it knew of the queues too */
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
