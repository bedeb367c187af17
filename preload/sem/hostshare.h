/* hostshare.h - the host's segment (hostshare.c): permits passed between the processes of one
 * host that share a pool, without Redis (docs/design.md, "Host-level sharing: the segment").
 *
 * One segment per pool and user: a file in the user's directory <dir>/dbthrottle-<uid>/ (mode
 * 0700, owned by the user; when that name is taken by another user, or is not such a directory,
 * the first of the user's own <dir>/dbthrottle-<uid>.<hex>, made if needed: dbt_share_note says
 * so), the file 0600 and the user's (anything else, and this process does not share), mapped
 * shared. It holds a lock (a futex word naming its holder's thread; a holder found dead is
 * taken over from), the host group's id (G: the Redis owner of the host's waiters, see the cid
 * "<G>~<cid>"), per kind the host's sole state, the processes attached (each with a wake socket:
 * an AF_UNIX datagram socket file in the user's directory, named by its pid and a random nonce
 * kept in the segment: nobody but the user can bind or reach it, so its refusal is the
 * process' death, which no other user can hide), and
 * the registrations: each waiting thread of each attached process, with its shape and since when
 * it waits, and the permit offered to it once a releasing process chose it.
 *
 * Knows nothing of Redis or pools: ids are opaque strings, kinds small ints. Every call but
 * dbt_share_attach and dbt_share_detach is made with the caller's pool lock held (the attachment
 * has no lock of its own); the segment's lock is taken inside, with a timeout
 * (DBT_SHARE_LOCK_TIMEOUT_MS), and never held on return. No call does network I/O (a wake is one
 * non-blocking datagram on this host). No content of the segment, however damaged, crashes the
 * caller or makes a call block past the timeout (dbt_share_attach, which may rebuild, a few
 * times that): a call that finds the segment damaged, or cannot lock it in time, poisons it,
 * marks this attachment broken (dbt_share_broken) and returns its "nothing happened" value; the
 * caller then behaves as without sharing. Every other process' next call finds the segment
 * poisoned and its attachment broken too; each then attaches again (detach, attach), and the
 * first to do so rebuilds the segment, with a new G. (Truncating the file under the processes
 * that map it would fault them: not content, and nothing a mapping can defend against.) */
#ifndef DBT_HOSTSHARE_H
#define DBT_HOSTSHARE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "pool_core.h"

/* A permit id's room in the segment (the library's DBT_ID_MAX is at most this). */
#define DBT_SHARE_ID_MAX 128
/* The longest the segment's lock is waited for. Its holders keep it for microseconds; a holder
 * stopped (SIGSTOP, a debugger) with it for longer makes the others give the segment up. */
#define DBT_SHARE_LOCK_TIMEOUT_MS 200
/* The host group's id: 16 hex digits and a NUL. */
#define DBT_SHARE_GROUP_LEN 17
/* Kinds the segment keeps a sole state for (dbt_kind's values 0 .. DBT_SHARE_KINDS-1). */
#define DBT_SHARE_KINDS 2

typedef struct dbt_share dbt_share;

/* What a permit may pass between: a permit's id carries its limit, class and weight, which Redis
 * grants and counts by. */
typedef struct {
    int kind;
    int limit;
    int weight;
    char klass[33]; /* "" untagged */
} dbt_share_shape;

/* A held permit in transit: its id, and when its last renewal Redis accepted was sent
 * (CLOCK_MONOTONIC microseconds, comparable across the host's processes): the receiver's
 * staleness check (a whole lease without a renewal) goes on from there. */
typedef struct {
    char id[DBT_SHARE_ID_MAX];
    int64_t renewed_us;
} dbt_share_permit;

/* Attaches this process to the segment of `key` (the pool's identity: the Redis target without
 * secrets, the key prefix and the pool name; it is hashed into the file's name and kept whole in
 * the segment, which must match) in directory `dir`, creating it, or rebuilding one that is
 * damaged, of another layout version or poisoned. NULL, with why (one line naming the directory
 * or file and the cause) in why[cap], when this process cannot share: the caller goes on without.
 */
dbt_share *dbt_share_attach(const char *dir, const char *key, char *why, size_t cap);
/* Unregisters this process (its registrations go; a permit offered to one of them is lost to its
 * lease), closes its wake socket, unmaps. NULL is a no-op. */
void dbt_share_detach(dbt_share *sh);
/* What detach does in the segment, without freeing: for a process' exit, while its other threads
 * may still call (they find the attachment broken and do nothing). The last process to leave
 * removes the segment's file. NULL is a no-op. */
void dbt_share_leave(dbt_share *sh);
/* In a fork()ed child, before anything else: the registrations and the wake socket are the
 * parent's: forgotten (the socket closed in the child only), not touched in the segment. The
 * child attaches as a new process at its next call. */
void dbt_share_after_fork(dbt_share *sh);

/* Makes this process' record and wake socket if it has none (a fork()ed child's first call
 * makes them); false when it cannot (the attachment is broken then). A pool's ids name the group
 * only once this is true: a waiter Redis counts under G must be one the segment can know, or the
 * host would look sole while it waits, unregistered, behind the permits passed around it. */
bool dbt_share_ready(dbt_share *sh);

/* The host group's id (16 hex digits): the prefix of the cid "<G>~<cid>" of the processes that
 * share. The same for the life of the attachment: a rebuilt segment has another, which the
 * caller sees by attaching again once this attachment is broken. */
const char *dbt_share_group(const dbt_share *sh);
/* The attachment gave up (damaged or poisoned segment, lock timeout, this process' record
 * removed, the segment's file removed or replaced): every call does nothing. The caller detaches
 * and may attach again later (which rebuilds a damaged or poisoned segment); meanwhile its ids
 * must not carry this attachment's G (its waiters would be the host's in Redis, unknown to the
 * segment). dbt_share_why says why (one line naming the file). */
bool dbt_share_broken(const dbt_share *sh);
const char *dbt_share_why(const dbt_share *sh);
/* What was surprising when attaching, for the caller to warn about ("" when nothing): the user's
 * directory of the usual name was not the user's own (another user made it first, a symlink, a
 * mode that lets others in), and the attachment uses another, named there. */
const char *dbt_share_note(const dbt_share *sh);
/* The wake socket, to poll for POLLIN beside the caller's other descriptors (-1 when broken, and
 * in a fork()ed child until its first call makes its new one: read it again before each poll):
 * readable when a permit was offered to one of this process' registrations, or the host's sole
 * state ended. dbt_share_drain reads what is there (non-blocking). */
int dbt_share_fd(const dbt_share *sh);
/* The user's share directory the segment is in (an fd, valid while attached). */
int dbt_share_dir_fd(const dbt_share *sh);
/* The segment's file (an fd, valid while attached), for dbt_share_precheck. */
int dbt_share_seg_fd(const dbt_share *sh);

/* dbt_share_lock's look at the segment's file (its size, against SIGBUS; its name, still there),
 * made by this thread at the start of one of the library's calls, ahead of a lock of the caller's
 * that other threads wait for: the system call made under the pool's lock sent the process'
 * other threads into futex waits at every command (pgbench -S -c4 -j4 at a limit of 4, kept
 * permits, loopback: 20-30% fewer transactions per second than with the look made before the
 * lock). seg_fd may be stale (closed, reused): the look counts only for the file whose device and
 * inode it names. Until dbt_share_precheck_end, the call's locks of that segment take it (within
 * 50 us of it; later, they look again) instead of each making its own; without a call begun,
 * each lock looks for itself. */
void dbt_share_precheck(int seg_fd);
void dbt_share_precheck_end(void);
void dbt_share_drain(dbt_share *sh);

/* ---- the host's sole state, per kind (what handover.c keeps per process without sharing) ---- */

/* Whether the host's waiters were the whole queue when Redis last said so, and no other host's
 * waiter queued since; false too while any live process has an unregistered waiter. */
bool dbt_share_sole(dbt_share *sh, int kind);
/* Whether a released permit may go to a waiter of the host: sole, or holding no more than the
 * group's share while other hosts wait (docs/design.md, "Shares"); false too while any live
 * process has an unregistered waiter. */
bool dbt_share_may_pass(dbt_share *sh, int kind);
/* The group's share of the kind moves by one event (pool_core's dbt_core_share_step). Returns
 * true when the host, not sole, was within its share and is not any more: as for
 * dbt_share_foreign, the caller then calls dbt_share_wake_all, so that the processes withdraw
 * the places they kept for their next waiters. */
bool dbt_share_share_event(dbt_share *sh, int kind, const dbt_shev *ev);
/* The group's share view of the kind now (zeroed when it cannot be read). */
void dbt_share_share_view(dbt_share *sh, int kind, dbt_share_view *out);
/* acquire.lua queued one of this host's waiters with `ticket` and said whether the host's waiters
 * were the whole queue (sole); as dbt_handover_verdict: a verdict older than the latest applied,
 * or than a foreign ticket, does not count; a verdict more than lease_us old with no registration
 * of the kind since is history. Returns true when it ended a sole state. */
bool dbt_share_verdict(dbt_share *sh, int kind, uint64_t ticket, bool sole, int64_t lease_us);
/* Redis pushed "f<kind>:<ticket>" (another host's waiter queued; ticket 0: a renewal found the
 * host not the sole owner, or the operator drains/limits the pool). Returns true when it ended a
 * sole state: the caller then calls dbt_share_wake_all, so every process withdraws its orphans. */
bool dbt_share_foreign(dbt_share *sh, int kind, uint64_t ticket);
/* Redis may have lost its data: no kind is sole. Returns the kinds (bit 1 << kind) that were:
 * what their shelf kept under it goes back (dbt_pool_forget_verdicts). */
unsigned dbt_share_reset(dbt_share *sh);
/* One datagram to every other attached process that has a registration (the others read no
 * wakes); those that refuse are purged. */
void dbt_share_wake_all(dbt_share *sh);

/* ---- registrations: the host's waiting threads ---- */

/* A thread of this process begins to wait (its slot QUEUED, not an orphan) for a permit of
 * `shape`, since t_request_us (CLOCK_MONOTONIC us). Returns its registration (never 0): when the
 * table is full it is an "unregistered" one, counted in this process' record, which keeps the
 * host from being sole until it ends; when the attachment is (or becomes) broken, one that names
 * nothing (dbt_share_wait_end does nothing with it). */
uint64_t dbt_share_wait_begin(dbt_share *sh, const dbt_share_shape *shape, int64_t t_request_us);
/* The thread waits no more (granted by Redis or by a local swap, gave up, ...): the registration
 * goes. Returns true when a permit had been offered to it meanwhile: *offered is then the
 * caller's, to pass on or give back like any held permit. 0 is a no-op. */
bool dbt_share_wait_end(dbt_share *sh, uint64_t reg, dbt_share_permit *offered);

/* What dbt_share_offer did. */
typedef enum {
    DBT_SHARE_NOBODY,      /* no registration of the shape in another process waits */
    DBT_SHARE_NOT_SOLE,    /* the host is not sole for the kind: give the permit back to Redis */
    DBT_SHARE_LOCAL_FIRST, /* this process' own oldest waiter (local_oldest_us) waited longest */
    DBT_SHARE_OFFERED      /* the segment holds it for another process: the caller forgets it */
} dbt_share_offer_result;

/* A held permit of `shape` that this process gives back: offered to the host's longest-waiting
 * registration of the same shape in another process (ties of t_request_us: the first
 * registered), unless this process' own oldest waiter of the shape began to wait before it or at
 * the same microsecond (local_oldest_us; -1: none here). A registration of another shape (limit,
 * weight, class) that waited longer than the one it would go to makes it DBT_SHARE_NOT_SOLE: the
 * permit goes back to Redis, whose order decides. The receiver's wake socket is sent a
 * datagram; a receiver found gone (its socket refuses) is purged and the next is tried, one
 * that cannot be sent to (no room: EAGAIN) is skipped (its permit taken back) for the next. On
 * DBT_SHARE_OFFERED, *waited_us (when not NULL) is how long the receiver had waited. A broken
 * attachment answers DBT_SHARE_NOT_SOLE (the permit is the caller's, for Redis), except when
 * the permit was written into the segment before it broke and not taken back under a sound lock
 * (a take-back whose unlock finds the lock word not ours counts as not taken back): then
 * DBT_SHARE_OFFERED (a receiver may take it; if none does, it is lost to its lease: never given
 * twice). */
dbt_share_offer_result dbt_share_offer(dbt_share *sh, const dbt_share_shape *shape,
                                       const dbt_share_permit *permit, int64_t local_oldest_us,
                                       int64_t *waited_us);

/* A permit another process offered to one of this process' registrations. */
typedef struct {
    uint64_t reg;            /* the registration it was offered to (it is gone now) */
    dbt_share_permit permit; /* the caller's now */
    int64_t t_request_us;    /* since when that registration waited */
} dbt_share_taken;

/* Takes the permits offered to this process' registrations, at most cap: each registration so
 * served is removed, and its permit is the caller's. Returns how many. */
int dbt_share_take(dbt_share *sh, dbt_share_taken *out, int cap);

/* ---- the shelf: the host's permits kept idle between commands ---- */

/* The host's keep state of a kind (pool_core.h's dbt_keep_view, shared): REVOKE (an "r" popped
 * by any process of the host), QUEUED (a waiter of the host queued), RENEWED (a renewal saw a
 * queue), GRANTED (a grant; with nobody queued, shelving may resume). Returns dbt_keep_step's
 * actions: DBT_QACT_RETURN_KEPT means the shelf's entries of the kind go back to Redis now. */
unsigned dbt_share_keep_event(dbt_share *sh, int kind, const dbt_queue_event *ev);

/* Whether a permit of `shape` may stay on the shelf now: nobody queued; or, for an untagged shape
 * (no class, weight 1), everybody queued is the host's (the host is sole, no process of it
 * unregistered, no waiter of another shape of the kind registered). False when broken. */
bool dbt_share_shelf_keepable(dbt_share *sh, const dbt_share_shape *shape);
/* Puts a held permit of this process on the host's shelf: any process of the host may take it
 * (dbt_share_unshelve) with no Redis command; this process renews it while it is there. Returns
 * the entry's handle, or 0 when it was not shelved (not dbt_share_shelf_keepable, a registration
 * of the shape waits, no room, broken): the permit is still the caller's. */
uint64_t dbt_share_shelve(dbt_share *sh, const dbt_share_shape *shape,
                          const dbt_share_permit *permit, int64_t now_us);
/* Takes a permit of `shape` off the shelf: this process' entry `prefer` if it is still there
 * (0: none), else the most recently renewed entry of the shape renewed at or after
 * fresh_since_us (older ones are their shelver's to give back). True: *out is the caller's, and
 * *was (when not NULL) the handle of the entry if it was this process' own, else 0. */
bool dbt_share_unshelve(dbt_share *sh, const dbt_share_shape *shape, uint64_t prefer,
                        int64_t fresh_since_us, dbt_share_permit *out, uint64_t *was);
/* A waiter of `shape` this process registered (reg, just made by dbt_share_wait_begin) takes a
 * permit of its shape off the shelf, renewed at or after fresh_since_us, while the shelf may keep
 * permits (dbt_share_shelf_keepable): the registration is offered it, and this process' wake socket
 * is told, as for any offer. It closes the window where a process queued in Redis while another put
 * a permit on the shelf: the permit would sit there idle while the waiter waited. True: offered. */
bool dbt_share_shelf_to_waiter(dbt_share *sh, const dbt_share_shape *shape, uint64_t reg,
                               int64_t fresh_since_us);
/* Whether this process' entry is still on the shelf (not taken by another process); records a
 * renewal of it sent at renewed_us (-1: only asks). */
bool dbt_share_shelf_renewed(dbt_share *sh, uint64_t handle, int64_t renewed_us);
/* Takes every entry of `kind` off the shelf, whichever process shelved it (a recall: another
 * host waits), at most cap; was[i] as for dbt_share_unshelve. Returns how many. */
int dbt_share_shelf_take_kind(dbt_share *sh, int kind, dbt_share_permit *out, uint64_t *was,
                              int cap);

/* Removes the records of attached processes that are gone (their wake socket refuses a connect,
 * which sends nothing), with their registrations and socket files; and breaks this attachment when
 * the segment's file was removed or replaced under it (attach again to join the others). Cheap
 * enough for a renewer's period: one connect() per attached process. */
void dbt_share_purge_dead(dbt_share *sh);

#endif
