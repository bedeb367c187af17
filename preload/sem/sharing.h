/* sharing.h - a pool's side of host sharing (sharing.c): attaching to the host's segment
 * (hostshare.c), registering the pool's waiting threads there, and taking the permits other
 * processes of the host pass to them (docs/design.md, "Host-level sharing"). */
#ifndef DBT_SHARING_H
#define DBT_SHARING_H

#include "hostshare.h"
#include "pool_types.h"

/* Without p->mu: attaches the pool to its segment when DBTHROTTLE_HOST_SHARE is on and it is not
 * attached yet (at most once per retry period), and lets go of a segment that broke (the pool's
 * new ids then use the plain cid again, until a later call attaches anew, with a new group).
 * File I/O: never with p->mu held. */
void dbt_sharing_attach(dbt_pool *p);
/* p->mu held: whether dbt_sharing_attach has something to do now (cheap). */
bool dbt_sharing_attach_due(const dbt_pool *p, int64_t now);

/* The pool's identity in the segment (malloc'd; NULL with why said): the Redis target without
 * secrets, the key prefix and the pool name, and this process' pid and network namespaces
 * ("pid:[...]", "net:[...]"): processes share only when all are the same. Reads only the pool's
 * settings: any thread. */
char *dbt_sharing_key(const dbt_pool *p, char *why, size_t whycap);

/* p->mu held: s begins to wait (QUEUED, not an orphan): registered in the segment; s waits no
 * more: its registration ends, and true when a permit was offered to it meanwhile (into
 * *offered): the pool's now, which the caller makes a held orphan (dbt_handover_loose). */
void dbt_sharing_wait_begin(dbt_pool *p, struct dbt_slot *s);
bool dbt_sharing_wait_end(dbt_pool *p, struct dbt_slot *s, dbt_share_permit *offered);

/* p->mu held, attached: takes (at most cap) of the permits other processes passed to this
 * process' waiting threads: permits[i] went to to[i], whose registration is over (NULL: to a
 * registration that has no slot any more, said in the log; its lease gives it back). Fewer than
 * cap: none left. */
int dbt_sharing_take(dbt_pool *p, struct dbt_slot **to, dbt_share_permit *permits, int cap);
/* How often the renewer takes what was offered to the pool's registered waiters without being
 * told (a wake lost: the giver killed between offering and waking, or a datagram that found no
 * room): such a permit waits at most this long, as an orphan does before it goes. */
#define DBT_SHARE_POLL_US INT64_C(50000)
/* p->mu held: whether a thread of the pool is registered in the segment (permits may be offered
 * to it). */
bool dbt_sharing_registered(const dbt_pool *p);
/* p->mu held: the wake socket to poll beside the listener (-1: none). */
/* Whether a wait registered in the segment has no thread of its own (parked): the renewer then
 * watches the wake socket for it. p->mu held. */
bool dbt_sharing_parked_registered(const dbt_pool *p);
/* s, registered, waits with no thread of its own from now on: the renewer watches the socket
 * again (share_threads_watch cleared), and if it listens without it, starts its listen again with
 * it. p->mu held. */
void dbt_sharing_parked_wait(dbt_pool *p, const struct dbt_slot *s);
int dbt_sharing_fd(const dbt_pool *p);
/* p->mu held: whether id was made by this process (its cid part is ours): a permit another
 * process made is never kept between commands (its revoke is pushed to its maker). */
bool dbt_sharing_id_ours(const dbt_pool *p, const char *id);
/* p->mu held: whether id was made under the pool's current host group (its queue entry counts
 * for the host in Redis' sole verdict). */
bool dbt_sharing_id_grouped(const dbt_pool *p, const char *id);
/* p->mu held: the permit's shape, as the segment matches it. */
void dbt_sharing_shape(const struct dbt_slot *s, dbt_share_shape *out);

/* p->mu held: the host group's share of the kind moves by one event (docs/design.md, "Shares");
 * a grant or a return counts only for an id made under the current group (id; NULL for the
 * others). No-op when not attached. */
void dbt_sharing_share_event(dbt_pool *p, dbt_kind kind, const char *id, const dbt_shev *ev);
/* p->mu held: permit `id` goes back to Redis (released; a kept one or the shelf's returned; given
 * back as stale; a place withdrawn after Redis granted it): the group holds one fewer, as Redis
 * counts it. Every way back counts: one left out drifted the count up between renewals (a kept
 * permit returned when a waiter queued, at each statement of a saturated host), and a host that
 * believed itself above its share passed nothing locally. `lost`: a renewal found it gone from
 * Redis, whose count the host took then (not counted twice). */
void dbt_sharing_gave_back(dbt_pool *p, dbt_kind kind, const char *id, bool lost);
/* p->mu held, as the process exits (before it leaves the segment): its held permits of the group
 * go back to Redis with the exit's calls; the group holds that many fewer. */
void dbt_sharing_gave_back_at_exit(dbt_pool *p);
/* p->mu held: the group's share view of the kind (zeroed when not attached). */
void dbt_sharing_share_view(dbt_pool *p, dbt_kind kind, dbt_share_view *out);

/* ---- the host's shelf (docs/design.md, "Permits kept where they are used") ---- */

/* p->mu held: the host's share of a queue event (REVOKE, GRANTED, QUEUED, RENEWED: the host's
 * keep state, dbt_share_keep_event). When it says the shelf goes back, the renewer is told
 * (p->shelf_recall). No-op when not attached. */
void dbt_sharing_keep_event(dbt_pool *p, dbt_kind kind, const dbt_queue_event *ev);
/* p->mu held: whether a permit of s's shape may stay on the host's shelf now: nobody queued, or
 * (untagged) the host is sole (everybody queued is the host's: docs/design.md, "Keeping while
 * the host is sole"). False when not attached. */
bool dbt_sharing_shelf_keepable(dbt_pool *p, const struct dbt_slot *s);
/* p->mu held: puts held slot s, kept between commands, on the host's shelf (s->shelf its
 * handle). False: not shelved (contended, no room, not attached, an id not of the group). */
bool dbt_sharing_shelve(dbt_pool *p, struct dbt_slot *s);
/* p->mu held: takes s's own entry off the shelf (true; s->shelf cleared). False: another
 * process took it (s's permit is not this process' any more). */
bool dbt_sharing_unshelve_own(dbt_pool *p, struct dbt_slot *s);
/* p->mu held: a permit of s's shape from the shelf into s, which is not linked yet: its id and
 * lease clock become the entry's. True when there was one renewed within half a lease. */
bool dbt_sharing_take_shelved(dbt_pool *p, struct dbt_slot *s);
/* p->mu held: whether s's entry is still on the shelf; sent >= 0 records a renewal of it. */
bool dbt_sharing_shelf_check(dbt_pool *p, struct dbt_slot *s, int64_t sent);
/* p->mu held: takes every entry of the kind off the shelf (a recall), at most cap: ids[i] to
 * release; own[i] this process' slot of it, or NULL (another process'). */
int dbt_sharing_shelf_take_kind(dbt_pool *p, dbt_kind kind, dbt_share_permit *ids,
                                struct dbt_slot **own, int cap);

/* p->mu held: the pool's lease changed (lease.c) and the segment is keyed by the one before: it
 * is let go (its registrations and shelf entries were taken back first:
 * dbt_handover_leave_segment) and attached anew, for the new lease, a second later. Returns
 * the segment, for dbt_sharing_detach_left once p->mu is released; NULL when nothing is to go. */
struct dbt_share *dbt_sharing_let_go_for_lease(dbt_pool *p);
/* Without p->mu: says so, and detaches what dbt_sharing_let_go_for_lease let go (NULL: no-op). */
void dbt_sharing_detach_left(dbt_pool *p, struct dbt_share *old);
/* p->mu held, at exit (p->exiting, its waits ended by dbt_handover_quit): this process' record
 * leaves the segment (the last one removes its file); the attachment stays, broken, for threads
 * that still run. */
void dbt_sharing_leave(dbt_pool *p);
/* Without p->mu, no other thread: the pool is freed. */
void dbt_sharing_free(dbt_pool *p);

/* Without p->mu, at the start of a call that locks the host's segment: its file looked at now
 * (dbt_share_precheck), not under p->mu, for the call's locks (nothing when the pool is not
 * attached). dbt_sharing_precheck_end at the call's end: the next call looks anew. */
void dbt_sharing_precheck(dbt_pool *p);
void dbt_sharing_precheck_end(void);
/* p->mu held, before a new id is made: a pool attached but without its group in its cid (a
 * fork()ed child) makes its process record in the segment, and names the group from then on;
 * if it cannot, the attachment is broken (let go, attached anew later) and the ids stay plain. */
void dbt_sharing_group_ready(dbt_pool *p);

#endif
