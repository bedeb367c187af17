/* handover.h - local handover (handover.c). */
#ifndef DBT_HANDOVER_H
#define DBT_HANDOVER_H

#include "pool_types.h"

/* An orphan place not taken over within this time is withdrawn (cancel.lua): the process' demand
 * has dropped. Long enough to bridge the gap between a thread's two commands, short enough that a
 * place nobody wants does not delay a permit's grant to another process much. */
#define DBT_ORPHAN_IDLE_US INT64_C(50000)

/* handover.c: passing permits between the threads of this process (see lua/acquire.lua). All
 * with p->mu held unless said otherwise. */
void dbt_lw_push(dbt_pool *p, struct dbt_slot *s);   /* s begins to wait (QUEUED) */
void dbt_lw_remove(dbt_pool *p, struct dbt_slot *s); /* s waits no more; no-op if not listed */
/* s leaves every list of the pool (the slots, the waiting threads), uncounted; an orphan is the
 * pool's no more. */
void dbt_unlink_slot(dbt_pool *p, struct dbt_slot *s);
/* s, kept on the host's shelf, was taken from it by another process of the host: its permit is
 * that process' now; s leaves the pool's lists (SLOT_RETURNED: its owner frees it). p->mu held. */
void dbt_handover_drop_taken_shelved(dbt_pool *p, struct dbt_slot *s);
/* Redis granted s (QUEUED or PENDING): the permit goes to the process' oldest waiting thread of
 * its kind and limit, which s may be; a place nobody waits on any more is given back by the
 * renewer. */
void dbt_handover_granted(dbt_pool *p, struct dbt_slot *s);
/* The thread of held slot s gives it back: the waiting thread of this process the permit went
 * to, or NULL. Then s is an orphan place, owned by the pool (its caller must not free it), and
 * the caller wakes the returned slot with dbt_slot_wake_later once it has let go of p->mu (a
 * thread woken under the lock would find it taken, and sleep again). */
struct dbt_slot *dbt_handover_release(dbt_pool *p, struct dbt_slot *s, bool *offered);
/* (*offered: with host sharing, the permit went to a waiting thread of another process of the
 * host, through the segment: the caller unlinks and frees s, and gives nothing back to Redis.)
 *
 * Whether permits pass without Redis now for `kind`, so that the places of waiters served here
 * (orphans) are kept for the next waiters: while the pool is attached to its segment, the host
 * is sole or holds no more than its share (dbt_share_may_pass), else this process is sole. */
bool dbt_passes_locally_now(dbt_pool *p, dbt_kind kind);
/* Held permit s, which its holder gives back (a kept one the renewer returns), goes to a waiting
 * thread of another process of the host if one waited longest: true when the segment holds it
 * (the caller forgets s; nothing goes to Redis). */
bool dbt_handover_offer_host(dbt_pool *p, struct dbt_slot *s);
/* Another process of the host passed permit `id` (renewed at renewed_us) to waiting slot s
 * (sharing.c): s holds it now, and s's place becomes an orphan of the pool. */
void dbt_handover_received(dbt_pool *p, struct dbt_slot *s, const char *id, int64_t renewed_us);
/* Without p->mu: the segment's wake socket was readable: takes the permits other processes
 * passed to this process' waiting threads (each such thread holds it from now on, and its place
 * in the queue becomes an orphan of the pool) and wakes the renewer when the host's sole state
 * ended while the pool keeps orphans. */
void dbt_handover_receive(dbt_pool *p);
/* Without p->mu: the pool's lease changed, so the process is about to let its host's segment go
 * (sharing.c): it takes what was passed to its waiters there and its own permits off the shelf
 * first, which would otherwise stay held in Redis, used by nobody, until their leases end. */
void dbt_handover_leave_segment(dbt_pool *p);
/* p->mu held: the process exits: every registration in the host's segment ends (permits offered
 * to them become held orphans, which the exit gives back). */
void dbt_handover_quit(dbt_pool *p);
/* A permit of the shape of `like` that this process now holds for nobody (offered to a thread
 * that stopped waiting meanwhile): a held orphan, which the renewer passes on or gives back. */
void dbt_handover_loose(dbt_pool *p, const struct dbt_slot *like, const char *id,
                        int64_t renewed_us);
/* A thread that begins to wait may take an orphan place of the shape of `like` (kind, limit,
 * class, weight) rather than queue anew (no Redis call): the orphan, unlinked, or NULL. Its
 * caller frees it without p->mu. */
struct dbt_slot *dbt_handover_adopt(dbt_pool *p, const struct dbt_slot *like);
/* Whether a permit may pass between the two slots: same kind, limit, class and weight. */
bool dbt_same_shape(const struct dbt_slot *a, const struct dbt_slot *b);
/* What acquire.lua said when it queued one of ours (its ticket, and whether our waiters were the
 * whole queue), and what Redis pushed when another process queued ("f<kind>:<ticket>"; ticket 0:
 * a renewal found more waiters than ours). */
void dbt_handover_verdict(dbt_pool *p, dbt_kind kind, const char *id, uint64_t ticket, bool sole);
void dbt_handover_foreign(dbt_pool *p, dbt_kind kind, uint64_t ticket);
/* Orphans: when the next is due back (-1: none), and giving back (without p->mu) those that are
 * due: granted with nobody to take them, kept unused for a while, or while others queue. */
int64_t dbt_orphans_due_us(dbt_pool *p);
/* When no thread of this process holds or waits for a permit of a kind any more, its orphans of
 * that kind serve nobody: they are unlinked and returned (at most cap) for the caller to
 * withdraw at once, without p->mu. A process that ends without running its exit handlers
 * (_exit, as Python's multiprocessing children do) would otherwise leave them queued in Redis,
 * to be granted to nobody, until their lease runs out. */
int dbt_orphans_take_if_idle(dbt_pool *p, dbt_kind kind, struct dbt_slot **out, int cap);
/* p->mu held: a permit this process held (of the shape of `like`, already unlinked) went to another
 * process of the host; if none of its threads holds one of that shape now, its places kept for a
 * next wait are idle from `now` (withdrawn ORPHAN_IDLE_US later unless a wait takes one over). */
void dbt_orphans_idle_from(dbt_pool *p, const struct dbt_slot *like, int64_t now);
/* Passes each held orphan on (to a waiting thread here, or through the host's segment), and
 * takes out (unlinked, at most cap) those to go: out[i] to withdraw in Redis (cancel.lua; its id
 * is in p->inflight meanwhile) when send[i], else only to free (the segment took its permit).
 * The caller does both without p->mu, then empties p->inflight. */
int dbt_orphans_take_due(dbt_pool *p, struct dbt_slot **out, bool *send, int cap);
/* Adds what local handover did since the last renewal to Redis' counters, now (a renewal
 * carries it otherwise): at exit, so that nothing done goes uncounted; the same renewal removes
 * the process' record from the registry (registry.c). Without p->mu. */
void dbt_report_local(dbt_pool *p);

#endif
