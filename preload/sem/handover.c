/* handover.c - local handover: passing a permit from one thread of the process to another
 * without a Redis round trip, while only this process' threads wait (DBTHROTTLE_LOCAL_HANDOVER).
 *
 * Redis counts permits, not threads: a holder id is this process' permit whichever of its threads
 * runs a command on it, and a queued id is this process' place in the queue. So when a thread gives
 * a permit back while another thread of the process waits, the permit (its id, its lease) can move
 * to the waiting thread here, in microseconds, and the waiting thread's place in the queue becomes
 * an "orphan": the pool keeps it, still queued and renewed, for the next thread that begins to
 * wait, which takes it over instead of queuing anew. In a process whose threads contend among
 * themselves (pgbench -c16 at a limit of 4, a threaded application server), Redis then sees no
 * command per query at all; the limit is untouched, since no id is ever added.
 *
 * Fairness across processes is kept: this is done only while this process' waiters are the whole
 * queue, which acquire.lua tells us when it queues one of ours ("sole"), and the first waiter of
 * another process to queue after that is pushed to us ("f<kind>:<ticket>"): from then on permits
 * go back to Redis and orphans are withdrawn, so the newcomer waits behind the threads that were
 * waiting when it came, not behind those that come after it. A push that went astray is caught by
 * the next renewal (renew.lua returns the queue lengths).
 *
 * Within the process, a permit always goes to the thread that has waited longest (the lw_ list),
 * whichever of its places Redis granted: taking over orphans scrambles the order of the places. */
#include "handover.h"
#include "clock.h"
#include "fork.h"
#include "lease.h"
#include "pool.h"
#include "sharing.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ORPHAN_IDLE_US DBT_ORPHAN_IDLE_US

bool dbt_passes_locally_now(dbt_pool *p, dbt_kind kind)
{
    /* Attached: the host's state (a broken segment says no), whatever the process' own. Within
     * its share as when sole: a place kept stays in Redis' queue, where it counts in the host's
     * demand (its share) and may be granted as any other, and the next waiter of the host takes
     * it over rather than queue anew (a cancel.lua and an acquire.lua per permit passed). */
    if (p->share)
        return dbt_share_may_pass(p->share, (int)kind);
    return p->queue[kind].sole.sole != 0;
}

/* The facts of s that the core decides a permit's move by and that cost nothing to gather
 * (dbt_core_may_pass); move_permit adds the others when the move may pass it on. p->mu held. */
static dbt_permit_facts cheap_facts(const dbt_pool *p, const struct dbt_slot *s)
{
    return (dbt_permit_facts){.handover_on = p->client->cfg->local_handover,
                              .exiting = p->exiting,
                              .current_gen = s->gen == p->gen,
                              .held = s->state == SLOT_HELD,
                              .orphan = s->orphan,
                              .attached = p->share != NULL,
                              .sole_here = p->queue[s->kind].sole.sole != 0,
                              .over_limit = s->over_limit,
                              .lease = {.lost = s->lost, .lease_us = s->lease_us}};
}

void dbt_lw_push(dbt_pool *p, struct dbt_slot *s)
{
    if (s->in_fifo || s->orphan)
        return;
    dbt_sharing_wait_begin(p, s); /* the host's other processes may pass it a permit */
    /* In the order the threads began to wait: nearly always at the tail. */
    struct dbt_slot *after = p->lw_tail[s->kind];
    while (after && after->t_request_us > s->t_request_us)
        after = after->lw_prev;
    s->in_fifo = true;
    s->lw_prev = after;
    s->lw_next = after ? after->lw_next : p->lw_head[s->kind];
    if (s->lw_next)
        s->lw_next->lw_prev = s;
    else
        p->lw_tail[s->kind] = s;
    if (after)
        after->lw_next = s;
    else
        p->lw_head[s->kind] = s;
}

/* s's registration in the host's segment ends; a permit offered to it meanwhile is the pool's. */
static void end_host_wait(dbt_pool *p, struct dbt_slot *s)
{
    dbt_share_permit offered;
    if (dbt_sharing_wait_end(p, s, &offered))
        dbt_handover_loose(p, s, offered.id, offered.renewed_us);
}

void dbt_lw_remove(dbt_pool *p, struct dbt_slot *s)
{
    end_host_wait(p, s);
    if (!s->in_fifo)
        return;
    if (s->lw_prev)
        s->lw_prev->lw_next = s->lw_next;
    else
        p->lw_head[s->kind] = s->lw_next;
    if (s->lw_next)
        s->lw_next->lw_prev = s->lw_prev;
    else
        p->lw_tail[s->kind] = s->lw_prev;
    s->lw_prev = s->lw_next = NULL;
    s->in_fifo = false;
}

void dbt_unlink_slot(dbt_pool *p, struct dbt_slot *s)
{
    dbt_lw_remove(p, s);
    if (s->orphan) {
        s->orphan = false;
        p->norphans--;
    }
    if (s->prev)
        s->prev->next = s->next;
    else if (p->slots == s)
        p->slots = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    if (s->state == SLOT_QUEUED || s->state == SLOT_CANCELLING)
        p->nqueued--;
    else if (s->state == SLOT_HELD)
        p->nheld--;
}

bool dbt_same_shape(const struct dbt_slot *a, const struct dbt_slot *b)
{
    return a->kind == b->kind && a->limit == b->limit && a->weight == b->weight &&
           strcmp(a->klass, b->klass) == 0;
}

/* The thread that has waited longest for a permit of the shape of `like`: a permit's id carries
 * its limit, class and weight, which Redis grants and counts by (a permit of another class would
 * leave its own class's count; a lighter one would put more units to work than Redis granted). */
static struct dbt_slot *oldest_waiter(dbt_pool *p, const struct dbt_slot *like)
{
    for (struct dbt_slot *w = p->lw_head[like->kind]; w; w = w->lw_next)
        if (w->state == SLOT_QUEUED && dbt_same_shape(w, like))
            return w;
    return NULL;
}

/* Moves the permit of held slot `from` to queued slot `to` (which its thread waits on), and to's
 * place to `from`: they swap ids and the lease clocks that go with them. Counts do not change: one
 * held, one queued, before and after. */
static void swap_permit(dbt_pool *p, struct dbt_slot *from, struct dbt_slot *to, int64_t now)
{
    char id[sizeof from->id];
    memcpy(id, to->id, sizeof id);
    memcpy(to->id, from->id, sizeof id);
    memcpy(from->id, id, sizeof id);
    int64_t held_renewed = from->t_renewed_us, held_lease = from->lease_us;
    dbt_lease_renewed(from, to->t_renewed_us, to->lease_us / 1000);
    dbt_lease_renewed(to, held_renewed, held_lease / 1000);
    uint64_t held_named = from->named_round;
    from->named_round = to->named_round;
    to->named_round = held_named;
    to->share_got_us = from->share_got_us; /* the permit's, as its lease clock */
    from->share_got_us = 0;
    to->lost = from->lost;
    from->lost = false;
    dbt_lw_remove(p, to);
    to->state = SLOT_HELD;
    to->t_grant_us = now;
    dbt_slot_doing_begin(to, false, now);
    from->state = SLOT_QUEUED;
}

static void make_orphan(dbt_pool *p, struct dbt_slot *s, int64_t now)
{
    s->orphan = true;
    s->orphan_us = now;
    s->parked = false;
    s->idle_since_us = 0;
    s->conn[0] = '\0';
    s->session[0] = '\0';
    free(s->query);
    s->query = NULL;
    p->norphans++;
    p->orphan_made_us = now;
}

/* Counts a permit passed to waiter w without Redis, for Redis' counters (the next renewal adds
 * it): once, by the process whose thread got it. */
static void count_local_grant(dbt_pool *p, const struct dbt_slot *w, int64_t now)
{
    p->unreported[w->kind].grants++;
    p->unreported[w->kind].wait_us += now - w->t_request_us;
    dbt_local_hist_add(&p->unreported_hist[w->kind], p->hist_bounds, p->nbounds, w->klass,
                       (now - w->t_request_us) / 1000);
}

/* A new orphan of the shape of `like`: place (QUEUED) or permit (HELD) `id`, owned by the pool,
 * linked and counted. NULL without memory (then Redis' lease gives the id back). */
static struct dbt_slot *new_orphan(dbt_pool *p, const struct dbt_slot *like, const char *id,
                                   int64_t renewed_us, int64_t lease_us, dbt_slot_state state,
                                   int64_t now)
{
    struct dbt_slot *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->pool = p;
    o->efd = -1;
    o->kind = like->kind;
    o->limit = like->limit;
    o->weight = like->weight;
    memcpy(o->klass, like->klass, sizeof o->klass);
    o->class_wait_ms = like->class_wait_ms;
    o->gen = p->gen;
    snprintf(o->id, sizeof o->id, "%s", id);
    dbt_lease_renewed(o, renewed_us, lease_us / 1000);
    o->t_request_us = o->t_grant_us = now;
    o->state = state;
    if (state == SLOT_HELD) /* a permit another process passed: see share_got_us */
        o->share_got_us = now;
    o->next = p->slots;
    if (p->slots)
        p->slots->prev = o;
    p->slots = o;
    if (state == SLOT_HELD)
        p->nheld++;
    else
        p->nqueued++;
    make_orphan(p, o, now);
    return o;
}

void dbt_handover_received(dbt_pool *p, struct dbt_slot *s, const char *id, int64_t renewed_us)
{
    int64_t now = dbt_now_us();
    if (s->state != SLOT_QUEUED || s->orphan || s->gen != p->gen) {
        dbt_handover_loose(p, s, id, renewed_us); /* never: registered slots wait */
        return;
    }
    /* Its place stays this process': an orphan for the next waiter. */
    struct dbt_slot *o = new_orphan(p, s, s->id, s->t_renewed_us, s->lease_us, SLOT_QUEUED, now);
    if (o)
        o->named_round = s->named_round; /* its place, as named */
    p->nqueued--;                        /* counted again as the orphan's */
    dbt_lw_remove(p, s);
    snprintf(s->id, sizeof s->id, "%s", id);
    s->named_round = 0;
    /* the stale check goes on from the giver's last renewal, said for the segment's lease */
    dbt_lease_renewed(s, renewed_us, p->share_lease_us / 1000);
    s->share_got_us = now;
    s->lost = false;
    s->state = SLOT_HELD;
    s->t_grant_us = now;
    dbt_slot_doing_begin(s, false, now);
    p->nheld++;
    count_local_grant(p, s, now);
    dbt_slot_wake(s);
    if (now - renewed_us > s->lease_us / 3) {
        /* Renewed a while ago by another process: renewed now, while we hold it (passed on and
         * on, a permit is otherwise renewed only when a renewal finds it held by chance). */
        p->renew_now = true;
        dbt_pool_wake_bg(p);
    } else if (p->bg_until_us > now + ORPHAN_IDLE_US) {
        dbt_pool_wake_bg(p); /* the new orphan is withdrawn if nobody takes it */
    }
}

/* Whether an orphan place is of a kind whose host is not sole now (it is to go at once). Only the
 * kinds of the orphans there are: a kind nobody here uses (connections, for a pool that throttles
 * queries only) is never sole, and asking of every kind woke the renewer at each permit passed. */
static bool orphans_unsole(dbt_pool *p)
{
    if (p->norphans == 0)
        return false;
    bool seen[DBT_NKINDS] = {false};
    for (const struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->orphan && s->kind < DBT_NKINDS && !seen[s->kind]) {
            seen[s->kind] = true;
            if (!dbt_passes_locally_now(p, s->kind))
                return true;
        }
    return false;
}

void dbt_handover_drop_taken_shelved(dbt_pool *p, struct dbt_slot *s)
{
    dbt_pool_note_kept_hold(p, s);
    s->shelf = 0;
    s->parked = false;
    p->nparked--;
    dbt_unlink_slot(p, s);
    s->state = SLOT_RETURNED; /* its owner frees it */
}

/* dbt_handover_receive's work, p->mu held and attached. */
static void receive_locked(dbt_pool *p)
{
    enum { BATCH = 16 };
    struct dbt_slot *to[BATCH];
    dbt_share_permit permits[BATCH];
    dbt_share_drain(p->share);
    dbt_deliver_collect(p); /* a parked command passed a permit here is sent here */
    int n;
    do {
        n = dbt_sharing_take(p, to, permits, BATCH);
        for (int i = 0; i < n; i++)
            if (to[i])
                dbt_handover_received(p, to[i], permits[i].id, permits[i].renewed_us);
    } while (n == BATCH);
    /* The host's waiters are not the whole queue any more (an "f" another process applied):
     * the places kept for next waiters go (orphan_due), at once. */
    if (orphans_unsole(p))
        dbt_pool_wake_bg(p);
}

void dbt_handover_receive(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    if (p->share)
        receive_locked(p);
    pthread_mutex_unlock(&p->mu);
    dbt_deliver_flush();
}

void dbt_handover_leave_segment(dbt_pool *p)
{
    /* All under one hold of p->mu, the let-go too: nothing can be passed to this process' waiters
     * or put on the shelf in between, to be lost with the segment. */
    pthread_mutex_lock(&p->mu);
    struct dbt_share *old = NULL;
    if (p->share && p->share_lease_us != dbt_lease_us(p)) {
        receive_locked(p);    /* what was passed to its waiters: theirs */
        dbt_handover_quit(p); /* offers that came after: loose permits of the pool */
        for (struct dbt_slot *s = p->slots, *next; s; s = next) {
            next = s->next;
            if (s->shelf && s->parked && !dbt_sharing_unshelve_own(p, s))
                dbt_handover_drop_taken_shelved(p, s); /* taken meanwhile: the taker's */
        }
        old = dbt_sharing_let_go_for_lease(p);
    }
    pthread_mutex_unlock(&p->mu);
    dbt_deliver_flush();
    dbt_sharing_detach_left(p, old);
}

void dbt_handover_quit(dbt_pool *p)
{
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        end_host_wait(p, s);
}

void dbt_handover_loose(dbt_pool *p, const struct dbt_slot *like, const char *id,
                        int64_t renewed_us)
{
    /* Held, by this process now, for nobody: the renewer passes it on or gives it back. */
    if (new_orphan(p, like, id, renewed_us, p->share_lease_us, SLOT_HELD, dbt_now_us()))
        dbt_pool_wake_bg(p);
}

void dbt_handover_granted(dbt_pool *p, struct dbt_slot *s)
{
    int64_t now = dbt_now_us();
    bool was_queued = s->state == SLOT_QUEUED;
    dbt_lw_remove(p, s);
    if (was_queued)
        p->nqueued--;
    p->nheld++;
    s->state = SLOT_HELD;
    s->t_grant_us = now;
    /* Redis' grant: its entry names this process, running; or, for an orphan place, the
     * process only (the thread it goes to is known later): counted as not known. */
    dbt_slot_doing_begin(s, !s->orphan, now);
    dbt_sharing_share_event(p, s->kind, s->id, &(dbt_shev){.type = DBT_SHEV_GRANTED});
    struct dbt_slot *w = oldest_waiter(p, s);
    dbt_grant_facts f = {.waiting = true,
                         .orphan = s->orphan,
                         .was_queued = was_queued,
                         .have_waiter = w != NULL,
                         .waiter_since_us = w ? w->t_request_us : 0,
                         .since_us = s->t_request_us};
    switch (dbt_core_grant(&f)) {
    case DBT_GRANT_TO_OLDEST:
        swap_permit(p, s, w, now);
        dbt_slot_wake(w);
        if (s->orphan)
            s->orphan_us = now; /* a fresh place */
        else {
            dbt_lw_push(p, s); /* its thread waits on, in its turn */
            dbt_sharing_parked_wait(p, s);
        }
        return;
    case DBT_GRANT_GIVE_BACK:
        dbt_pool_wake_bg(p); /* a permit nobody here waits for: the renewer gives it back */
        return;
    case DBT_GRANT_TO_OWN:
    case DBT_GRANT_IGNORE: /* never: its callers pass waiting slots */
        dbt_slot_wake(s);
        return;
    }
}

/* Offers held permit s in the host's segment to the longest-waiting thread of its shape of
 * another process, unless w (this process' own, or NULL) waited longer. p->mu held. */
static dbt_offer_answer offer_in_segment(dbt_pool *p, const struct dbt_slot *s,
                                         const struct dbt_slot *w)
{
    /* Its age now: the renewer may have offered others first. */
    dbt_lease_facts lease = dbt_slot_lease(p, s, dbt_now_us());
    if (!dbt_core_offerable(&lease))
        return DBT_OFFER_TOO_OLD;
    dbt_share_shape shape;
    dbt_sharing_shape(s, &shape);
    dbt_share_permit permit;
    snprintf(permit.id, sizeof permit.id, "%s", s->id);
    permit.renewed_us = dbt_lease_renewed_for(s, p->share_lease_us);
    switch (dbt_share_offer(p->share, &shape, &permit, w ? w->t_request_us : -1, NULL)) {
    case DBT_SHARE_OFFERED:
        p->st.handovers++; /* the receiver reports the grant (count_local_grant) */
        return DBT_OFFER_TAKEN;
    case DBT_SHARE_LOCAL_FIRST:
        return DBT_OFFER_LOCAL_FIRST;
    case DBT_SHARE_NOBODY:
        return DBT_OFFER_NOBODY;
    case DBT_SHARE_NOT_SOLE:
        break;
    }
    return DBT_OFFER_NOT_SOLE;
}

/* Where held permit s goes (move m), as the core decides, offering it in the host's segment when
 * the core says so: `taken` when the segment holds it now (the caller forgets it), else
 * DBT_ROUTE_WAITER (to *w, this process' oldest waiter of its shape) or DBT_ROUTE_REDIS. *now:
 * when it was decided (0 when the cheap facts sufficed). p->mu held. */
static dbt_offer_outcome move_permit(dbt_pool *p, dbt_move m, struct dbt_slot *s,
                                     struct dbt_slot **w, int64_t *now)
{
    *w = NULL;
    *now = 0;
    dbt_permit_facts f = cheap_facts(p, s);
    if (!dbt_core_may_pass(m, &f))
        return (dbt_offer_outcome){.to = DBT_ROUTE_REDIS, .taken = false};
    *now = dbt_now_us();
    *w = oldest_waiter(p, s);
    f.have_waiter = *w != NULL;
    f.made_here = dbt_sharing_id_ours(p, s->id);
    f.lease = dbt_slot_lease(p, s, *now);
    dbt_permit_route r = dbt_core_route(m, &f);
    if (r.mark_unrenewed)
        (void)dbt_slot_expire_unrenewed(p, s, *now); /* marks it lost, says why */
    if (r.to != DBT_ROUTE_OFFER_HOST)
        return (dbt_offer_outcome){.to = r.to, .taken = false};
    dbt_offer_answer a = offer_in_segment(p, s, *w);
    /* sole, or within the group's share while other hosts wait (docs/design.md, "Shares") */
    bool host_sole = (a == DBT_OFFER_NOBODY || a == DBT_OFFER_TOO_OLD) &&
                     dbt_share_may_pass(p->share, (int)s->kind);
    return dbt_core_after_offer(m, &f, a, host_sole);
}

bool dbt_handover_offer_host(dbt_pool *p, struct dbt_slot *s)
{
    struct dbt_slot *w;
    int64_t now;
    return move_permit(p, DBT_MOVE_KEPT, s, &w, &now).taken;
}

struct dbt_slot *dbt_handover_release(dbt_pool *p, struct dbt_slot *s, bool *offered)
{
    struct dbt_slot *w;
    int64_t now;
    dbt_offer_outcome o = move_permit(p, DBT_MOVE_RELEASE, s, &w, &now);
    *offered = o.taken;
    if (o.taken || o.to != DBT_ROUTE_WAITER)
        return NULL;
    swap_permit(p, s, w, now);
    atomic_fetch_add(&w->pending_wakes, 1); /* woken by dbt_slot_wake_later, after the unlock */
    count_local_grant(p, w, now);
    make_orphan(p, s, now);
    p->st.handovers++;
    /* The renewer withdraws the place if nobody takes it: woken only when it would sleep past
     * that, so at most once per ORPHAN_IDLE_US, not once per handover. */
    if (p->bg_until_us > now + ORPHAN_IDLE_US)
        dbt_pool_wake_bg(p);
    return w;
}

struct dbt_slot *dbt_handover_adopt(dbt_pool *p, const struct dbt_slot *like)
{
    dbt_kind kind = like->kind;
    bool on = p->client->cfg->local_handover;
    if (!dbt_core_adopt_worth_asking(on, p->norphans, p->exiting) ||
        !dbt_core_may_adopt(on, p->norphans, p->exiting, dbt_passes_locally_now(p, kind)))
        return NULL;
    /* The newest orphan: the older ones are the first to be withdrawn when demand drops. Not one
     * no renewal was accepted for during a whole lease (this process was stopped): Redis may have
     * reaped the place, and the renewer withdraws it. */
    struct dbt_slot *best = NULL;
    int64_t now = dbt_now_us();
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->orphan && s->state == SLOT_QUEUED && dbt_same_shape(s, like) &&
            dbt_core_orphan_adoptable(now - s->t_renewed_us, s->lease_us) &&
            (!best || s->orphan_us > best->orphan_us))
            best = s;
    if (best) {
        dbt_unlink_slot(p, best);
        p->st.adoptions++;
        p->unreported[kind].queued++;
    }
    return best;
}

/* Whether a thread of this process waits in Redis' queue for a permit of `kind`. */
static bool any_queued(const dbt_pool *p, dbt_kind kind)
{
    for (const struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_QUEUED && s->kind == kind)
            return true;
    return false;
}

/* The host's waiters are no longer the whole queue: every process of it withdraws its orphans,
 * and the permits kept on the host's shelf while it was sole go back to Redis now (this process
 * recalls the whole shelf, whoever shelved them: docs/design.md, "Keeping while the host is
 * sole"). p->mu held. */
static void host_sole_ended(dbt_pool *p, dbt_kind kind)
{
    dbt_share_wake_all(p->share);
    if (!p->shelf_recall[kind] && !p->exiting) {
        p->shelf_recall[kind] = true;
        dbt_pool_wake_bg(p);
    } else if (p->norphans > 0) {
        dbt_pool_wake_bg(p);
    }
}

void dbt_handover_verdict(dbt_pool *p, dbt_kind kind, const char *id, uint64_t ticket, bool sole)
{
    if (p->share && dbt_sharing_id_grouped(p, id)) {
        /* The verdict is the host's (Redis counted the place under the group). */
        if (dbt_share_verdict(p->share, (int)kind, ticket, sole,
                              dbt_lease_shortest_us(p, dbt_now_us())))
            host_sole_ended(p, kind);
        return;
    }
    dbt_queue_event ev = {.type = DBT_QEV_VERDICT,
                          .ticket = ticket,
                          .sole = sole,
                          .waiters_here = true,
                          .now_us = dbt_now_us()};
    ev.lease_us = dbt_lease_shortest_us(p, ev.now_us);
    if (dbt_sole_verdict_stale(&p->queue[kind].sole, ev.now_us, ev.lease_us))
        ev.waiters_here = any_queued(p, kind);
    if ((dbt_queue_step(&p->queue[kind], &ev) & DBT_QACT_SOLE_ENDED) && p->norphans > 0)
        dbt_pool_wake_bg(p); /* orphans of this kind go */
}

void dbt_handover_foreign(dbt_pool *p, dbt_kind kind, uint64_t ticket)
{
    /* Another host's waiter queued (or a renewal, the operator or a lost permit says to ask
     * Redis again): the host's sole state ends, and every process of it withdraws its orphans. */
    if (p->share && dbt_share_foreign(p->share, (int)kind, ticket))
        host_sole_ended(p, kind);
    dbt_queue_event ev = {.type = DBT_QEV_FOREIGN, .ticket = ticket};
    if ((dbt_queue_step(&p->queue[kind], &ev) & DBT_QACT_SOLE_ENDED) && p->norphans > 0)
        dbt_pool_wake_bg(p);
}

/* Whether queued orphan s is one of the places kept for the next waits of this process' holders
 * of its shape (a kept permit too): the newest as many as they are, since a wait takes over the
 * newest first. The others are not for anyone's next wait (a burst left them): they go after
 * their idle time, as before. */
static bool kept_for_a_holder(const dbt_pool *p, const struct dbt_slot *s)
{
    int holders = 0, newer = 0;
    for (const struct dbt_slot *o = p->slots; o; o = o->next) {
        if (o == s || !dbt_same_shape(o, s))
            continue;
        if (!o->orphan && o->state == SLOT_HELD)
            holders++;
        else if (o->orphan && o->state == SLOT_QUEUED && o->orphan_us > s->orphan_us)
            newer++;
    }
    return newer < holders;
}

/* When orphan s is to go: granted (a permit nobody here waits for), or while the host does not
 * pass locally, at once; else unused for ORPHAN_IDLE_US. While it is kept for a holder (never due
 * there), looked
 * at again after ORPHAN_IDLE_US: the host may stop passing locally meanwhile (above its share, a
 * drain), and a process that holds but has no waiting thread is not woken for that. */
static int64_t orphan_due(dbt_pool *p, const struct dbt_slot *s)
{
    bool held = s->state == SLOT_HELD;
    int64_t at =
        dbt_core_orphan_due_us(held, !held && dbt_passes_locally_now(p, s->kind),
                               !held && kept_for_a_holder(p, s), s->orphan_us, ORPHAN_IDLE_US);
    return at == INT64_MAX ? dbt_now_us() + ORPHAN_IDLE_US : at;
}

void dbt_orphans_idle_from(dbt_pool *p, const struct dbt_slot *like, int64_t now)
{
    if (p->norphans == 0)
        return;
    for (const struct dbt_slot *o = p->slots; o; o = o->next)
        if (!o->orphan && o->state == SLOT_HELD && dbt_same_shape(o, like))
            return; /* its places stay kept for that holder */
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->orphan && s->state == SLOT_QUEUED && dbt_same_shape(s, like))
            s->orphan_us = now;
    /* the renewer withdraws them if nobody takes them: woken only when it would sleep past that,
     * so at most once per ORPHAN_IDLE_US */
    if (p->bg_until_us > now + ORPHAN_IDLE_US)
        dbt_pool_wake_bg(p);
}

int64_t dbt_orphans_due_us(dbt_pool *p)
{
    if (p->norphans == 0)
        return -1;
    int64_t due = -1;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->orphan) {
            int64_t at = orphan_due(p, s);
            if (due < 0 || at < due)
                due = at;
        }
    return due;
}

int dbt_orphans_take_if_idle(dbt_pool *p, dbt_kind kind, struct dbt_slot **out, int cap)
{
    if (p->norphans == 0)
        return 0;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (!s->orphan && s->kind == kind)
            return 0; /* a thread of ours holds or waits: the places may serve it */
    int n = 0;
    for (struct dbt_slot *s = p->slots, *next; s && n < cap; s = next) {
        next = s->next;
        if (s->kind == kind) {
            dbt_unlink_slot(p, s);
            if (s->state == SLOT_HELD) /* granted: cancel.lua gives the permit back */
                dbt_sharing_gave_back(p, s->kind, s->id, s->lost);
            out[n++] = s;
        }
    }
    return n;
}

/* What became of a held orphan (a permit that came with nobody here waiting for it). */
typedef enum { KEPT, SWAPPED, OFFERED } held_orphan_fate;

/* Passes held orphan s to this process' oldest waiter of its shape, or through the host's
 * segment to another process' that waited longer. SWAPPED: s is a place now; OFFERED: the
 * segment holds the permit, the caller unlinks and frees s; KEPT: for Redis (cancel.lua gives
 * a granted place's permit back). p->mu held. */
static held_orphan_fate pass_held_orphan(dbt_pool *p, struct dbt_slot *s)
{
    struct dbt_slot *w;
    int64_t now;
    dbt_offer_outcome o = move_permit(p, DBT_MOVE_HELD_ORPHAN, s, &w, &now);
    if (o.taken)
        return OFFERED;
    if (o.to != DBT_ROUTE_WAITER)
        return KEPT;
    swap_permit(p, s, w, now);
    dbt_slot_wake(w);
    count_local_grant(p, w, now);
    s->orphan_us = now;
    return SWAPPED;
}

int dbt_orphans_take_due(dbt_pool *p, struct dbt_slot **out, bool *send, int cap)
{
    int n = 0;
    int64_t now = dbt_now_us();
    for (struct dbt_slot *s = p->slots, *next; s && n < cap; s = next) {
        next = s->next;
        if (!s->orphan)
            continue;
        if (s->state == SLOT_HELD && pass_held_orphan(p, s) == OFFERED) {
            dbt_unlink_slot(p, s);
            send[n] = false;
            out[n++] = s;
            continue;
        }
        if (orphan_due(p, s) <= now &&
            p->ninflight < (int)(sizeof p->inflight / sizeof p->inflight[0])) {
            dbt_unlink_slot(p, s);
            if (s->state == SLOT_HELD) /* granted: cancel.lua gives the permit back */
                dbt_sharing_gave_back(p, s->kind, s->id, s->lost);
            p->inflight[p->ninflight].what = DBT_OWED_WITHDRAW;
            p->inflight[p->ninflight].kind = s->kind;
            memcpy(p->inflight[p->ninflight].id, s->id, sizeof s->id);
            p->ninflight++;
            send[n] = true;
            out[n++] = s;
        }
    }
    return n;
}

/* In a fork()ed child: no waiting thread, no orphan, no verdict, nothing to report (the
 * parent's to report). */
static void after_fork(dbt_pool *p)
{
    p->norphans = 0;
    p->orphan_made_us = 0;
    memset(p->lw_head, 0, sizeof p->lw_head);
    memset(p->lw_tail, 0, sizeof p->lw_tail);
    /* Its own view of the queue only: the host's (the segment's) is the parent's as much as
     * its, and Redis' queue did not change with the fork. Nothing woken: the renewer's state is
     * made anew after this (renewer.c). */
    dbt_queue_event forget = {.type = DBT_QEV_FORGET};
    for (int k = 0; k < DBT_NKINDS; k++)
        (void)dbt_queue_step(&p->queue[k], &forget);
    memset(p->unreported, 0, sizeof p->unreported); /* the parent's to report */
    memset(p->unreported_hist, 0, sizeof p->unreported_hist);
    memset(p->unreported_holds, 0, sizeof p->unreported_holds);
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
