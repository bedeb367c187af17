/* pool_core.c - the pool's decisions (pool_core.h): no I/O, no lock, no clock. */
#include "pool_core.h"

#include <string.h>

/* ---- what the pool knows of a kind's queue -------------------------------------------------- */

/* The times compared below may come from the host's segment, which any process of the host can
 * write garbage into: compared with now - lease, never subtracted from now (an overflow, UB:
 * make test's ASan units, hostshare/garbage_written_while_processes_work_crashes_none). */
bool dbt_sole_verdict_stale(const dbt_sole_view *v, int64_t now_us, int64_t lease_us)
{
    return v->verdict_us < now_us - lease_us;
}

static unsigned sole_verdict(dbt_sole_view *v, const dbt_queue_event *ev)
{
    /* Tickets restart from 1 when the pool's keys expire (idle for three leases) or Redis loses
     * them: what was said more than a lease ago, with no waiter of ours queued since, is
     * history. */
    bool was = v->sole != 0; /* before history is forgotten: its end is an end too */
    if (dbt_sole_verdict_stale(v, ev->now_us, ev->lease_us) && !ev->waiters_here)
        v->sole = v->verdict_ticket = v->foreign_ticket = 0;
    if (ev->ticket == 0 || ev->ticket <= v->verdict_ticket)
        return was && v->sole == 0 ? DBT_QACT_SOLE_ENDED : DBT_QACT_NONE;
    v->verdict_ticket = ev->ticket;
    v->verdict_us = ev->now_us;
    /* A push about a waiter that queued after this one outran this reply: not alone. */
    v->sole = ev->sole && ev->ticket > v->foreign_ticket ? ev->ticket : 0;
    return was && v->sole == 0 ? DBT_QACT_SOLE_ENDED : DBT_QACT_NONE;
}

static unsigned sole_foreign(dbt_sole_view *v, uint64_t ticket)
{
    if (ticket > v->foreign_ticket)
        v->foreign_ticket = ticket;
    /* A verdict given after this waiter queued (a higher ticket) already counted it. Ticket 0
     * has nothing to order it by: it ends any verdict. */
    if (v->sole != 0 && (ticket == 0 || v->sole < ticket)) {
        v->sole = 0;
        return DBT_QACT_SOLE_ENDED;
    }
    return DBT_QACT_NONE;
}

/* A recall ("r<kind>:t") is pushed when a waiter queued, with ticket t, behind an empty queue
 * (or by the operator): every verdict before t is history, for the queue emptied since (Redis
 * deleted its sole owner with it, and no "f" will come), one applied now and one read later
 * alike (t - 1 becomes the foreign ticket a later verdict must pass). A verdict of ticket t is
 * that waiter's own (ours): it stands, and so does a later one. A verdict over a lease old is
 * history whatever its ticket: the counter restarts when the pool's keys expire (idle for three
 * leases), and a recall of a smaller ticket would leave it standing for good. Ticket 0 has
 * nothing to order it by: it ends any verdict. */
static unsigned sole_recalled(dbt_sole_view *v, const dbt_queue_event *ev)
{
    bool was = v->sole != 0;
    if (dbt_sole_verdict_stale(v, ev->now_us, ev->lease_us))
        *v = (dbt_sole_view){.verdict_us = v->verdict_us};
    uint64_t t = ev->ticket;
    if (t == 0 || v->sole < t)
        v->sole = 0;
    if (t > 1 && t - 1 > v->foreign_ticket)
        v->foreign_ticket = t - 1;
    return was && v->sole == 0 ? DBT_QACT_SOLE_ENDED : DBT_QACT_NONE;
}

unsigned dbt_sole_step(dbt_sole_view *v, const dbt_queue_event *ev)
{
    switch (ev->type) {
    case DBT_QEV_VERDICT:
        return sole_verdict(v, ev);
    case DBT_QEV_FOREIGN:
        return sole_foreign(v, ev->ticket);
    case DBT_QEV_REVOKE:
        return sole_recalled(v, ev);
    case DBT_QEV_FORGET:
    case DBT_QEV_FORK:
        /* All but when the last verdict came: until a lease has passed since, a push about a
         * waiter that queued after ours may still overtake our next reply, and its foreign
         * ticket must then be kept (dbt_sole_verdict_stale). */
        *v = (dbt_sole_view){.verdict_us = v->verdict_us};
        return DBT_QACT_NONE;
    default:
        return DBT_QACT_NONE;
    }
}

bool dbt_keep_revoked_since(const dbt_keep_view *k, long long granted_at, int64_t now_us,
                            int64_t lease_us)
{
    return k->revoke_ticket > (uint64_t)(granted_at > 0 ? granted_at : 0) &&
           k->revoke_us >= now_us - lease_us;
}

unsigned dbt_keep_step(dbt_keep_view *k, const dbt_queue_event *ev)
{
    switch (ev->type) {
    case DBT_QEV_REVOKE:
        k->contended = true;
        /* The highest ticket, unless the last was heard over a lease ago (Redis may have
         * restarted its counter since). */
        if (ev->ticket > k->revoke_ticket || k->revoke_us < ev->now_us - ev->lease_us)
            k->revoke_ticket = ev->ticket;
        k->revoke_us = ev->now_us;
        return DBT_QACT_RETURN_KEPT;
    case DBT_QEV_GRANTED:
        /* Granted with nobody queued: permits may be kept again, unless a revoke given after
         * this grant was read first (never undone). From the queue: not; nor granted at once
         * past waiters (a class under its guarantee: acquire.lua's queue length is theirs). */
        k->contended = ev->from_queue || ev->queue > 0 ||
                       dbt_keep_revoked_since(k, (long long)ev->ticket, ev->now_us, ev->lease_us);
        return DBT_QACT_NONE;
    case DBT_QEV_QUEUED:
        k->contended = true;
        return DBT_QACT_NONE;
    case DBT_QEV_RENEWED:
        /* Somebody waits, or the operator drains the pool or holds it below what is held (in
         * case admin.lua's revoke push was lost), or Redis had lost ids of ours: a kept permit
         * it took back by re-assertion may have been granted to another meanwhile (this
         * process stopped for longer than Q), and goes back rather than serve again. */
        if (ev->queue > 0 || !ev->handover_allowed || ev->reasserted) {
            k->contended = true;
            return DBT_QACT_RETURN_KEPT;
        }
        return DBT_QACT_NONE;
    case DBT_QEV_FORK:
        memset(k, 0, sizeof *k);
        return DBT_QACT_NONE;
    default:
        return DBT_QACT_NONE;
    }
}

/* A renewal's reply: whether the queue holds more than ours. Attached to the host's segment,
 * the queue holds the host's other processes' waiters too: the host is alone when Redis' sole
 * owner is its group. A drain or a hold below what is held sends permits through Redis too. */
static unsigned renewed_not_alone(const dbt_queue_event *ev)
{
    bool others = ev->attached ? ev->queue > 0 && !ev->host_sole_owner : ev->queue > ev->mine;
    /* Re-asserted ids may be over the limit until the others' grants end: releases go back to
     * Redis, which grants again only below it, rather than on to our next waiter. */
    return others || !ev->handover_allowed || ev->reasserted ? DBT_QACT_NOT_ALONE : DBT_QACT_NONE;
}

unsigned dbt_queue_step(dbt_queue_state *q, const dbt_queue_event *ev)
{
    unsigned act = dbt_sole_step(&q->sole, ev) | dbt_keep_step(&q->keep, ev);
    if (ev->type == DBT_QEV_RENEWED)
        act |= renewed_not_alone(ev);
    return act;
}

/* ---- where one permit goes ------------------------------------------------------------------ */

bool dbt_lease_gone(const dbt_lease_facts *l)
{
    return l->lost || l->unrenewed_us > l->lease_us;
}

bool dbt_lease_stale(const dbt_lease_facts *l)
{
    return dbt_lease_gone(l) || l->unrenewed_us > l->quarantine_us;
}

int64_t dbt_core_offerable_age_us(int64_t lease_us, int64_t quarantine_us)
{
    return lease_us / 2 < quarantine_us ? lease_us / 2 : quarantine_us;
}

bool dbt_core_offerable(const dbt_lease_facts *l)
{
    return !l->lost && l->unrenewed_us <= dbt_core_offerable_age_us(l->lease_us, l->quarantine_us);
}

dbt_grant_fate dbt_core_grant(const dbt_grant_facts *f)
{
    if (!f->waiting)
        return DBT_GRANT_IGNORE;
    /* Within the process a permit goes to the thread that waited longest, whichever of its places
     * Redis granted: taking over orphans scrambles the order of the places. A thread still
     * reading its acquire reply keeps the grant (it is not on the waiting list yet). */
    if (f->have_waiter && (f->orphan || (f->was_queued && f->waiter_since_us < f->since_us)))
        return DBT_GRANT_TO_OLDEST;
    return f->orphan ? DBT_GRANT_GIVE_BACK : DBT_GRANT_TO_OWN;
}

static dbt_permit_route route(dbt_route_to to)
{
    return (dbt_permit_route){.to = to, .mark_unrenewed = false};
}

/* Gone from Redis, or may be: back to Redis, marked lost if only its lease clock says so. */
static bool gone(const dbt_permit_facts *f, dbt_permit_route *r)
{
    if (!dbt_lease_gone(&f->lease))
        return false;
    *r = route(DBT_ROUTE_REDIS);
    r->mark_unrenewed = !f->lease.lost;
    return true;
}

bool dbt_core_may_pass(dbt_move m, const dbt_permit_facts *f)
{
    /* A shadow grant over the limit goes back to Redis whatever else: on a host where another
     * process enforces (or once the pool turns to enforce), a waiter it were passed to would run
     * past the limit. */
    if (f->over_limit)
        return false;
    switch (m) {
    case DBT_MOVE_RELEASE:
        /* Without Redis only while our waiters (or the host's) are the whole queue: else the
         * permit goes back, and another's waiter gets it in its turn. */
        return f->handover_on && f->held && !f->orphan && f->current_gen && !f->exiting &&
               (f->attached || f->sole_here);
    case DBT_MOVE_KEPT:
        /* A thread of ours would have taken it already: only another process of the host. */
        return f->attached && f->handover_on && !f->exiting && !f->lease.lost;
    case DBT_MOVE_HELD_ORPHAN:
        /* As a grant to an orphan place: its permit goes to our waiter whatever the verdict. */
        return f->handover_on && !f->exiting && !f->lease.lost;
    }
    return false;
}

dbt_permit_route dbt_core_route(dbt_move m, const dbt_permit_facts *f)
{
    dbt_permit_route r;
    if (!dbt_core_may_pass(m, f))
        return route(DBT_ROUTE_REDIS);
    switch (m) {
    case DBT_MOVE_RELEASE:
        if (gone(f, &r))
            return r;
        if (f->attached)
            return route(DBT_ROUTE_OFFER_HOST);
        return route(f->have_waiter ? DBT_ROUTE_WAITER : DBT_ROUTE_REDIS);
    case DBT_MOVE_KEPT:
        if (gone(f, &r))
            return r;
        return route(DBT_ROUTE_OFFER_HOST);
    case DBT_MOVE_HELD_ORPHAN:
        if (gone(f, &r))
            return r;
        if (f->attached)
            return route(DBT_ROUTE_OFFER_HOST);
        /* One another process of the host passed here (before the pool let its segment go) did
         * not come by one of our places reaching the head: to Redis, whatever waits here. */
        return route(f->have_waiter && f->made_here ? DBT_ROUTE_WAITER : DBT_ROUTE_REDIS);
    }
    return route(DBT_ROUTE_REDIS);
}

dbt_offer_outcome dbt_core_after_offer(dbt_move m, const dbt_permit_facts *f, dbt_offer_answer a,
                                       bool host_sole)
{
    if (a == DBT_OFFER_TAKEN)
        return (dbt_offer_outcome){.to = DBT_ROUTE_REDIS, .taken = true};
    /* May our own waiter have it: ours waited longest of the host's, or nobody of the host waits
     * and the host is the whole queue (or, not offered, the host is sole). */
    bool local = a == DBT_OFFER_LOCAL_FIRST ||
                 ((a == DBT_OFFER_NOBODY || a == DBT_OFFER_TOO_OLD) && host_sole);
    dbt_offer_outcome out = {.to = DBT_ROUTE_REDIS, .taken = false};
    switch (m) {
    case DBT_MOVE_RELEASE:
        if (local && f->have_waiter)
            out.to = DBT_ROUTE_WAITER;
        break;
    case DBT_MOVE_KEPT:
        break; /* offered or back to Redis */
    case DBT_MOVE_HELD_ORPHAN:
        /* One another process made (offered to a wait that ended meanwhile) did not come by one
         * of our places reaching the head: to our waiter only while the host is sole. */
        if (f->have_waiter && (local || f->made_here))
            out.to = DBT_ROUTE_WAITER;
        break;
    }
    return out;
}

dbt_permit_route dbt_core_keep(const dbt_keep_facts *f)
{
    if (!f->cache_on || !f->held || f->already_kept || !f->current_gen || f->lease.lost ||
        f->contended || f->redis_down || !f->made_here || f->over_limit)
        return route(DBT_ROUTE_REDIS);
    dbt_permit_route r;
    if (gone(&(dbt_permit_facts){.lease = f->lease}, &r))
        return r;
    /* Kept, it would serve a later command with no word from Redis: only while offerable. */
    return route(dbt_core_offerable(&f->lease) ? DBT_ROUTE_WAITER : DBT_ROUTE_REDIS);
}

bool dbt_core_reuse(const dbt_reuse_facts *f)
{
    return f->ours && !f->contended && !f->message_waiting && dbt_core_offerable(&f->lease);
}

int64_t dbt_core_kept_due_us(bool contended, int64_t parked_us, int64_t idle_us)
{
    return contended ? 0 : parked_us + idle_us;
}

int64_t dbt_core_orphan_due_us(bool held, bool sole_now, bool in_use, int64_t orphan_since_us,
                               int64_t orphan_idle_us)
{
    if (held || !sole_now)
        return 0;
    return in_use ? INT64_MAX : orphan_since_us + orphan_idle_us;
}

bool dbt_core_adopt_worth_asking(bool handover_on, int norphans, bool exiting)
{
    return handover_on && norphans > 0 && !exiting;
}

bool dbt_core_may_adopt(bool handover_on, int norphans, bool exiting, bool sole_now)
{
    return dbt_core_adopt_worth_asking(handover_on, norphans, exiting) && sole_now;
}

bool dbt_core_orphan_adoptable(int64_t unrenewed_us, int64_t lease_us)
{
    return unrenewed_us <= lease_us;
}

/* ---- what a renewal, an outage or a stall means for one slot -------------------------------- */

dbt_gone_fate dbt_core_holder_gone(const dbt_slot_facts *f, dbt_gone_cause cause)
{
    if (!f->found || !f->held || f->lost)
        return DBT_GONE_NOTHING;
    switch (cause) {
    case DBT_GONE_BY_EVICTION:
        return DBT_GONE_EVICTED;
    case DBT_GONE_BY_EVICTION_CANCEL:
        return DBT_GONE_EVICTED_CANCEL;
    case DBT_GONE_BY_LOSS:
        break;
    }
    return DBT_GONE_LOST;
}

dbt_gone_fate dbt_core_waiter_gone(const dbt_slot_facts *f)
{
    if (!f->found)
        return DBT_GONE_NOTHING;
    if (f->held)
        return f->lost ? DBT_GONE_NOTHING : DBT_GONE_GRANT_LAPSED;
    if (!f->queued)
        return DBT_GONE_NOTHING;
    return f->orphan ? DBT_GONE_FORGET : DBT_GONE_REQUEUE;
}

bool dbt_core_place_expired(const dbt_slot_facts *f, int64_t unrenewed_us, int64_t lease_us)
{
    return f->queued && !f->orphan && unrenewed_us > lease_us;
}

dbt_outage_fate dbt_core_outage(bool misconfigured, bool open_mode)
{
    if (misconfigured)
        return DBT_OUTAGE_MISCONFIGURED;
    return open_mode ? DBT_OUTAGE_UNTHROTTLED : DBT_OUTAGE_REFUSED;
}

bool dbt_core_outage_begins(const dbt_outage_view *v, int64_t now_us, int64_t backoff_us)
{
    if (v->in_outage)
        return false;
    return v->ended_us == 0 || now_us - v->ended_us >= backoff_us;
}

bool dbt_core_outage_ends(const dbt_outage_view *v, int64_t sent_us)
{
    return v->in_outage && sent_us >= v->last_error_us;
}

bool dbt_core_within_share(const dbt_share_view *v)
{
    return v->share1 > 0 && v->held >= 0 && (uint64_t)v->held < v->share1;
}

void dbt_core_share_step(dbt_share_view *v, const dbt_shev *ev)
{
    switch (ev->type) {
    case DBT_SHEV_PUSH:
        if (ev->ticket <= v->ticket)
            return;
        v->ticket = ev->ticket;
        v->share1 = ev->share >= 0 ? (uint64_t)ev->share + 1 : 0; /* -1: none in force */
        return;
    case DBT_SHEV_RENEWED: {
        if (!ev->handover_allowed)
            v->share1 = 0;
        if (ev->named_none)
            return; /* its share (-1) and count (0) are not the group's */
        if (ev->handover_allowed && v->ticket == ev->ticket_sent)
            v->share1 = ev->share >= 0 ? (uint64_t)ev->share + 1 : 0;
        /* Redis' count plus the grants counted here since the renewal was sent is never below
         * what the host holds (a grant or a return in flight only raises Redis' count): a count
         * above that bound is taken down to it at once (permits that went back unseen here: a
         * lapsed lease, a process killed while holding), however busy the host. Redis' count
         * above the one here is compared only when nothing was counted here while the renewal
         * was in flight, and even then a grant Redis made before the renewal may be read only
         * after its reply (another connection): taking it counted that grant twice (a saturated
         * host counted one permit more than it held from its first renewal on, so it saw itself
         * above its share and gave back every permit; two processes' renewals a few ms apart
         * both saw the same grant in flight). So the count rises by the least excess renewals
         * that crossed nothing have shown over DBT_SHARE_AHEAD_US: a grant in flight is read
         * long before. A renewal that re-asserted permits (Redis lost its data) counts only what
         * was re-asserted yet: it says nothing of the count. Segment values are garbage-proof
         * here: differences in unsigned, the count never below 0. */
        if (ev->reasserted)
            return;
        int64_t redis = ev->held > 0 ? ev->held : 0;
        int64_t since = (int64_t)((uint64_t)v->grants - (uint64_t)ev->grants_sent);
        int64_t bound = since >= 0 && since <= INT32_MAX ? redis + since : redis;
        if (bound < v->held) {
            v->held = bound;
            v->ahead_us = 0;
        } else if (v->events == ev->events_sent) {
            int64_t excess = redis - v->held;
            if (excess <= 0) {
                v->ahead_us = 0;
            } else if (v->ahead_us == 0) {
                v->ahead_us = ev->now_us > 0 ? ev->now_us : 1;
                v->ahead_least = excess;
            } else {
                if (excess < v->ahead_least)
                    v->ahead_least = excess;
                if ((uint64_t)ev->now_us - (uint64_t)v->ahead_us >= (uint64_t)DBT_SHARE_AHEAD_US &&
                    ev->now_us > v->ahead_us) {
                    v->held += v->ahead_least;
                    v->ahead_us = 0;
                }
            }
        }
        return;
    }
    case DBT_SHEV_GRANTED:
        v->held = v->held >= 0 && v->held < INT32_MAX ? v->held + 1 : 1;
        v->events = (int64_t)((uint64_t)v->events + 1);
        v->grants = (int64_t)((uint64_t)v->grants + 1);
        return;
    case DBT_SHEV_RETURNED:
        v->held = v->held > 0 && v->held <= INT32_MAX ? v->held - 1 : 0;
        v->events = (int64_t)((uint64_t)v->events + 1);
        return;
    }
}
