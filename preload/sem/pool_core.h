/* pool_core.h - the pool's decisions, with no I/O, no lock and no clock of their own.
 *
 * The drivers (acquire.c, listener.c, renewer.c, handover.c, kept.c, pool.c and the host's
 * segment, hostshare.c) turn what happens into the events and facts below, and carry out the
 * answers: run a script, wake a thread, pass a permit to a waiter, offer it to the host, give it
 * back to Redis, keep it. Nothing here reads the time, takes a lock or calls Redis, so that a test
 * can drive every rule row by row (tests/unit/test_pool_core.c); docs/design.md ("The pool's
 * decisions") has the tables.
 *
 * Two parts:
 *   - What the pool knows of a kind's queue in Redis: a state machine per kind
 *     (dbt_queue_state), moved by events (dbt_queue_event) and answering with actions
 *     (DBT_QACT_*). Its "sole" half is also the host's, kept in the host's shared segment.
 *   - Where one permit goes (a grant, a release, a permit nobody here waits for, a permit to
 *     keep): pure functions of the facts their driver gathered under the pool's lock.
 *
 * Glossary as in pool_types.h (slot, place, kept, orphan, sole, verdict and foreign tickets). */
#ifndef DBT_POOL_CORE_H
#define DBT_POOL_CORE_H

#include <stdbool.h>
#include <stdint.h>

/* ---- what the pool knows of a kind's queue -------------------------------------------------- */

/* Whether this process' waiters (or the host's, in the host's segment) are the whole queue of a
 * kind, as acquire.lua said when it queued one of them (a "verdict"), and the pushes about
 * another's waiter ("f<kind>:<ticket>") that end it. While `sole` is set, permits pass between
 * the waiters here without Redis (local handover, handover.c). The layout is the host segment's
 * too (hostshare_internal.h): change it only with DBT_SEG_VERSION. Zeroed: nothing known. */
typedef struct {
    uint64_t sole;           /* the ticket of the verdict that made us sole; 0: not sole */
    uint64_t verdict_ticket; /* the latest ticket whose verdict was applied */
    uint64_t foreign_ticket; /* the highest ticket of another's waiter pushed to us */
    int64_t verdict_us;      /* when that verdict was applied (monotonic) */
} dbt_sole_view;

/* Whether permits of a kind may be kept between commands (DBTHROTTLE_CACHE_PERMITS): not while
 * someone queues. Zeroed: uncontended, no revoke heard. */
typedef struct {
    bool contended;         /* someone queued ("r<kind>"): kept permits go back, none is kept */
    uint64_t revoke_ticket; /* the highest ticket a revoke ("r<kind>:<ticket>") carried ... */
    int64_t revoke_us;      /* ... and when the last revoke came */
} dbt_keep_view;

typedef struct {
    dbt_sole_view sole;
    dbt_keep_view keep;
} dbt_queue_state;

typedef enum {
    /* acquire.lua queued one of ours: `ticket` its ticket, `sole` whether our waiters were the
     * whole queue. `waiters_here`: a waiter of ours of the kind is queued (read only when the
     * last verdict is over a lease old: dbt_sole_verdict_stale). */
    DBT_QEV_VERDICT,
    /* "f<kind>:<ticket>": another's waiter queued; ticket 0: a renewal, the operator or a lost
     * permit says the queue holds more than ours, with no ticket to order it by. */
    DBT_QEV_FOREIGN,
    /* What Redis said is void: it may have lost data, a listener's pushes were lost with its
     * connection, a place was queued again, the process forked, the segment is let go. */
    DBT_QEV_FORGET,
    /* "r<kind>:<ticket>" (ticket 0 when the push had none): someone queued. */
    DBT_QEV_REVOKE,
    /* An acquire of ours was granted: `from_queue` after waiting in the queue, else at once,
     * with `queue` waiters it passed (a class under its guarantee) and Redis' ticket counter
     * `ticket` when it granted. */
    DBT_QEV_GRANTED,
    /* An acquire of ours queued. */
    DBT_QEV_QUEUED,
    /* A renewal's reply: `queue` waiters of the kind in Redis, `mine` of them ours (or, attached
     * to the host's segment, `host_sole_owner`: Redis' sole owner is the host's group), and
     * whether the operator lets permits pass without Redis (`handover_allowed`: no drain, not
     * held below what is held), and whether it re-asserted or re-queued ids of ours (`reasserted`:
     * Redis had lost them). */
    DBT_QEV_RENEWED,
    /* In a fork()ed child: nothing is known, nothing kept (the parent's). */
    DBT_QEV_FORK
} dbt_queue_event_type;

typedef struct {
    dbt_queue_event_type type;
    uint64_t ticket;
    bool sole;
    bool waiters_here;
    bool from_queue;
    long long queue, mine;
    bool attached, host_sole_owner;
    bool handover_allowed;
    bool reasserted;
    int64_t now_us, lease_us;
} dbt_queue_event;

/* Actions, or'ed. */
enum {
    DBT_QACT_NONE = 0,
    /* We are sole no more: orphan places go (the renewer), and in the host's segment every
     * process is woken to see it. */
    DBT_QACT_SOLE_ENDED = 1,
    /* Kept permits of the kind go back now (the renewer). */
    DBT_QACT_RETURN_KEPT = 2,
    /* A renewal found more waiters than ours: DBT_QEV_FOREIGN with ticket 0 follows, for the
     * process and for the host's segment (the driver sends it to both). */
    DBT_QACT_NOT_ALONE = 4
};

/* Applies one event; returns the actions it calls for. */
unsigned dbt_queue_step(dbt_queue_state *q, const dbt_queue_event *ev);

/* The sole half alone, as the host's segment keeps it (VERDICT, FOREIGN, FORGET, FORK; the
 * others are ignored): DBT_QACT_SOLE_ENDED or NONE. FORGET and FORK keep verdict_us (see
 * dbt_sole_verdict_stale). */
unsigned dbt_sole_step(dbt_sole_view *v, const dbt_queue_event *ev);

/* The keep half alone, as the host's segment keeps it for the host's shelf (REVOKE, GRANTED,
 * QUEUED, RENEWED, FORK; the others are ignored): DBT_QACT_RETURN_KEPT or NONE. */
unsigned dbt_keep_step(dbt_keep_view *k, const dbt_queue_event *ev);

/* Whether the last verdict is history (over a lease old): tickets restart from 1 when the pool's
 * keys expire or Redis loses them, so a new verdict then needs to know whether a waiter of ours
 * is queued (DBT_QEV_VERDICT's waiters_here). Not sooner: a push about a later waiter may have
 * overtaken the reply. */
bool dbt_sole_verdict_stale(const dbt_sole_view *v, int64_t now_us, int64_t lease_us);

/* Whether a grant Redis gave at ticket counter `granted_at` was followed by a revoke read before
 * its reply: a revoke newer than a lease cannot race a reply (Redis may have restarted its
 * counter since). */
bool dbt_keep_revoked_since(const dbt_keep_view *k, long long granted_at, int64_t now_us,
                            int64_t lease_us);

/* ---- where one permit goes ------------------------------------------------------------------ */

/* A held permit's health, as its lease clock says. */
typedef struct {
    bool lost;            /* a renewal found it gone from Redis, or it was marked so */
    int64_t unrenewed_us; /* since the last renewal Redis accepted */
    int64_t lease_us;
    /* Q (dbt_quarantine_ms): after Redis lost its data, how long it waits for the holders to
     * re-assert their permits before it grants again. */
    int64_t quarantine_us;
} dbt_lease_facts;

/* Whether Redis may have reaped the permit: lost, or unrenewed for a whole lease (the driver
 * marks the latter lost, once: dbt_slot_expire_unrenewed). */
bool dbt_lease_gone(const dbt_lease_facts *l);
/* Whether the permit may no longer serve a command without asking Redis: gone, or unrenewed for
 * longer than Q. Redis may have restarted empty meanwhile, waited Q for re-assertions that this
 * process, stopped or cut off, never sent, and granted the permit's unit to another: a grant read
 * only now (its push waited in the socket), or a permit passed on within the process, is then
 * given back and asked for anew. A live process renews within Q (lease/3, and a failed renewal
 * is retried within DBTHROTTLE_REDIS_TIMEOUT + 1 s): never stale while it can reach Redis. */
bool dbt_lease_stale(const dbt_lease_facts *l);

/* A grant Redis pushed (or an acquire reply said granted) for one of our slots. */
typedef struct {
    bool waiting;     /* the slot is queued, or its acquire's reply unread; else it timed out and
                         is being cancelled, or is gone */
    bool orphan;      /* a place no thread waits on */
    bool was_queued;  /* its thread read its acquire reply (it is on the waiting list) */
    bool have_waiter; /* a thread of ours waits for a permit of the slot's shape ... */
    int64_t waiter_since_us, since_us; /* ... since then; the slot's thread since then */
} dbt_grant_facts;

typedef enum {
    DBT_GRANT_IGNORE,    /* not waiting: cancel.lua gives the permit back */
    DBT_GRANT_TO_OWN,    /* the slot's own thread runs on it */
    DBT_GRANT_TO_OLDEST, /* the oldest waiter takes it; the slot keeps waiting (or, an orphan,
                            stays a fresh place) */
    DBT_GRANT_GIVE_BACK  /* an orphan's, nobody here waits: the renewer gives it back */
} dbt_grant_fate;

dbt_grant_fate dbt_core_grant(const dbt_grant_facts *f);

/* Which move: a thread gives back the permit it held (dbt_handover_release); the renewer gives
 * back a kept permit (never to a thread of ours: it would have taken it); the renewer passes on a
 * held orphan (a permit that came with nobody here waiting for it). */
typedef enum { DBT_MOVE_RELEASE, DBT_MOVE_KEPT, DBT_MOVE_HELD_ORPHAN } dbt_move;

typedef struct {
    bool handover_on; /* DBTHROTTLE_LOCAL_HANDOVER */
    bool exiting;     /* the process exits */
    bool current_gen; /* not the parent's (from before a fork) */
    bool held;        /* a permit, not a place */
    bool orphan;      /* the pool's, nobody's thread */
    bool attached;    /* the pool shares with its host's segment */
    bool sole_here;   /* this process' waiters are the whole queue (not attached) */
    bool have_waiter; /* a thread of ours waits for a permit of its shape */
    bool made_here;   /* its id is this process' (not passed here by another of the host) */
    /* granted in shadow mode where enforcing would not have granted it: above the limit, or
     * ahead of waiters; passed on, it would let a waiter run past the limit */
    bool over_limit;
    dbt_lease_facts lease;
} dbt_permit_facts;

typedef enum {
    DBT_ROUTE_REDIS,      /* back through Redis (release.lua; a held orphan: cancel.lua) */
    DBT_ROUTE_OFFER_HOST, /* offer it in the host's segment, then ask dbt_core_after_offer */
    DBT_ROUTE_WAITER      /* to this process' oldest waiter of its shape */
} dbt_route_to;

typedef struct {
    dbt_route_to to;
    /* The lease ran out unrenewed (dbt_lease_gone, not lost before): the driver marks it lost. */
    bool mark_unrenewed;
} dbt_permit_route;

dbt_permit_route dbt_core_route(dbt_move m, const dbt_permit_facts *f);
/* Whether a move may pass the permit anywhere but Redis, from the facts that cost nothing to
 * gather (all but have_waiter, made_here and the lease's unrenewed_us): false is dbt_core_route's
 * REDIS, so that the hot path (a release with handover off, or others queued) gathers no
 * more. */
bool dbt_core_may_pass(dbt_move m, const dbt_permit_facts *f);

/* Whether a permit may be offered in the host's segment, kept for a later command or taken from
 * the host's shelf: with half a lease left at least (the receivers' renewals name it only while
 * they hold it, and a permit that passes on every few milliseconds may miss them: then it goes
 * back through Redis, which its waiter is granted by), and renewed within Q (dbt_lease_stale:
 * kept idle by a process that was stopped across a restart of Redis, it may have been granted
 * again). Not offered: answer DBT_OFFER_TOO_OLD. */
bool dbt_core_offerable(const dbt_lease_facts *l);
/* The oldest an offerable permit's last accepted renewal may be (dbt_core_offerable). */
int64_t dbt_core_offerable_age_us(int64_t lease_us, int64_t quarantine_us);

/* What the host's segment answered an offer. */
typedef enum {
    DBT_OFFER_TAKEN,       /* a waiter of another process has it */
    DBT_OFFER_LOCAL_FIRST, /* our own waiter waited longest of the host's */
    DBT_OFFER_NOBODY,      /* no waiter of its shape on the host */
    DBT_OFFER_NOT_SOLE,    /* the host is not the whole queue */
    DBT_OFFER_TOO_OLD      /* not offered (dbt_core_offerable) */
} dbt_offer_answer;

/* After an offer: `taken` when the segment holds the permit (the caller forgets it); else where
 * it goes. host_sole (the host's waiters are the whole queue) is read only for NOBODY and
 * TOO_OLD. A permit another process made goes to our held orphan's waiter only when the host is
 * sole or ours waited longest of the host's (which the segment answers only while it is sole),
 * or it would jump Redis' queue while another host waits. */
typedef struct {
    dbt_route_to to;
    bool taken;
} dbt_offer_outcome;
dbt_offer_outcome dbt_core_after_offer(dbt_move m, const dbt_permit_facts *f, dbt_offer_answer a,
                                       bool host_sole);

/* Whether a held permit may be kept for the next command (DBTHROTTLE_CACHE_PERMITS). */
typedef struct {
    bool cache_on, held, already_kept, current_gen, contended, redis_down;
    bool made_here;  /* one another process of the host passed here is not kept: Redis pushes the
                        revoke that would give it back to its maker, not to us */
    bool over_limit; /* a shadow grant enforcing would not have made (dbt_permit_facts) */
    dbt_lease_facts lease;
} dbt_keep_facts;
dbt_permit_route dbt_core_keep(const dbt_keep_facts *f); /* to: WAITER = keep it, REDIS = not */

/* Whether the next command of the connection that kept a permit takes it again. Not while
 * contended: the recall was heard, the permit is due back at once, and taking it would put one
 * more command of ours before the waiter that queued; nor while a message waits unread on the
 * listener the renewer leads (a recall on the wire: seen at R = 0.6 ms in 4 of 87 first waits,
 * each delayed by one whole statement more). */
typedef struct {
    bool ours;      /* held, kept, of the current generation, and (on the shelf) still there */
    bool contended; /* a recall was heard for its kind */
    bool message_waiting;  /* the listener has bytes nobody read yet */
    dbt_lease_facts lease; /* offerable (as from the shelf), else it goes back to Redis */
} dbt_reuse_facts;
bool dbt_core_reuse(const dbt_reuse_facts *f);

/* When a kept permit, kept since parked_us, is due back: at once while contended, else after the
 * idle time. */
int64_t dbt_core_kept_due_us(bool contended, int64_t parked_us, int64_t idle_us);

/* When an orphan is due to go: a held one (a permit nobody here waits for) and any while we are
 * not sole, at once (0); a place nobody took, orphan_idle_us after it became one (or after the
 * process last passed on its permits of that shape), but never while it is kept for a holder of
 * the process (in_use: INT64_MAX, the newest as many as its holders of the shape): the place is
 * for that holder's next wait. Withdrawn after 50 ms
 * of a statement, a place counted only for processes whose statements are shorter, and a host
 * of short statements was given a larger share of the limit than one of long statements as busy
 * (a host's demand is its holders and its queued places). */
int64_t dbt_core_orphan_due_us(bool held, bool sole_now, bool in_use, int64_t orphan_since_us,
                               int64_t orphan_idle_us);

/* Whether a thread that begins to wait may take over orphan places instead of queuing anew; the
 * first, without whether we are sole (which, attached, takes the segment's lock): whether it is
 * worth asking. */
bool dbt_core_adopt_worth_asking(bool handover_on, int norphans, bool exiting);
bool dbt_core_may_adopt(bool handover_on, int norphans, bool exiting, bool sole_now);
/* ... and whether this orphan place is one it may take: renewed within a lease (else Redis may
 * have reaped it: the renewer withdraws it). */
bool dbt_core_orphan_adoptable(int64_t unrenewed_us, int64_t lease_us);

/* ---- what a renewal, an outage or a stall means for one slot -------------------------------- */

/* A slot a renewal named, as its driver found it (not found: no slot of that id any more). */
typedef struct {
    bool found;
    bool held, queued, orphan, lost;
} dbt_slot_facts;

/* A holder renew.lua says Redis no longer has: evicted by the operator ("e:ID", or "x:ID" with
 * its command's cancel), or lost (expired, or Redis lost data). */
typedef enum {
    DBT_GONE_NOTHING,        /* nothing of ours, or marked already */
    DBT_GONE_EVICTED,        /* marked lost, said "evicted"; the next command acquires again */
    DBT_GONE_EVICTED_CANCEL, /* ... and its command is cancelled */
    DBT_GONE_LOST,           /* marked lost (and lapsed: closed mode cancels its command) */
    /* a waiter Redis forgot: */
    DBT_GONE_GRANT_LAPSED, /* granted since the renewal was sent, reaped before it was renewed:
                              marked lost, its thread gives it back and queues */
    DBT_GONE_FORGET,       /* an orphan place: forgotten */
    DBT_GONE_REQUEUE       /* its thread queues again */
} dbt_gone_fate;

typedef enum { DBT_GONE_BY_LOSS, DBT_GONE_BY_EVICTION, DBT_GONE_BY_EVICTION_CANCEL } dbt_gone_cause;

/* A holder Redis no longer has. Whichever fate, a slot found makes the process ask Redis again
 * (DBT_QEV_FOREIGN, ticket 0): permits go back through Redis. */
dbt_gone_fate dbt_core_holder_gone(const dbt_slot_facts *f, dbt_gone_cause cause);
/* A waiter Redis no longer has. */
dbt_gone_fate dbt_core_waiter_gone(const dbt_slot_facts *f);

/* Whether a waiting thread's place was renewed within a lease; else Redis may have reaped it, and
 * the thread gives up (Redis failing: its wait ends in the outage mode) or queues again (this
 * process was stopped: it alone pays). Orphan places are withdrawn instead. */
bool dbt_core_place_expired(const dbt_slot_facts *f, int64_t unrenewed_us, int64_t lease_us);

/* What an acquire that cannot reach Redis ends in. */
typedef enum {
    DBT_OUTAGE_UNTHROTTLED,  /* DBTHROTTLE_ON_REDIS_ERROR=open: runs without a permit, counted */
    DBT_OUTAGE_REFUSED,      /* closed: refused */
    DBT_OUTAGE_MISCONFIGURED /* a permanent error (wrong password, ACL, ...): refused whatever
                                the mode, as a fix is needed, not patience */
} dbt_outage_fate;
dbt_outage_fate dbt_core_outage(bool misconfigured, bool open_mode);

/* Where an outage begins and ends, as the process reports it (dbthrottle status' last_outage,
 * the redis_error and redis_back lines): one outage however many calls fail in it. */
typedef struct {
    bool in_outage;
    int64_t last_error_us; /* the last failed call noted (dbt_now_us) */
    int64_t ended_us;      /* when the last outage ended (0: none has) */
} dbt_outage_view;
/* A call failed at now_us: whether a new outage begins. Not while one lasts, and not when the
 * last one ended less than the outage backoff ago: Redis that answered a call or two between
 * failures flapped, one outage whose cost is counted from its first failure (a cut whose
 * connections die one by one ended and began again within a millisecond). */
bool dbt_core_outage_begins(const dbt_outage_view *v, int64_t now_us, int64_t backoff_us);
/* A call sent at sent_us succeeded: whether it ends the outage. Not one sent before the last
 * failure was noted: its reply, read late or on a connection the failure had not reached yet,
 * says nothing of Redis since (the outage's first line was followed by a redis_back 1 ms later,
 * and status showed the cost of what came after only). */
bool dbt_core_outage_ends(const dbt_outage_view *v, int64_t sent_us);

/* ---- the host's share of the limit (docs/design.md, "Shares") ----
 * What the host's segment knows of its group's share of a kind: the share Redis last said (by
 * "s<kind>:<share>:<ticket>" or a renewal), the units it counts the group holding, and the ticket
 * of the last "s" applied. share1 is the share + 1, 0 when none is in force (no other owner
 * waits, a renewal said none, the operator drains or limits, the state was reset): zeroed memory
 * is "none", never "a share of 0". Fixed-width fields: it lives in the segment. */
typedef struct {
    uint64_t share1;
    int64_t held;
    uint64_t ticket;
    int64_t events; /* grants and returns counted so far: a renewal crossed by none compares */
    int64_t grants; /* grants counted so far */
    /* since when renewals that crossed none have counted more than here (0: none since the
     * counts last agreed), and the least they counted more by */
    int64_t ahead_us;
    int64_t ahead_least;
} dbt_share_view;

/* How long renewals that crossed no grant or return counted here must show Redis' count of a host
 * group's permits above the host's own before the host rises by the least excess they showed:
 * longer than any grant in flight takes to be read (Redis' reply or push is read within
 * DBTHROTTLE_REDIS_TIMEOUT, 1 s by default). */
#define DBT_SHARE_AHEAD_US INT64_C(1000000)

/* A host that is not sole passes a released permit to its own waiters only while a share is in
 * force and it holds no more than its share; above it, its releases go back to Redis. */
bool dbt_core_within_share(const dbt_share_view *v);

typedef enum {
    DBT_SHEV_PUSH,    /* "s<kind>:<share>:<ticket>": the group's share changed (-1: none) */
    DBT_SHEV_RENEWED, /* a renewal: share (-1 none) and held as Redis counts them, and whether
                             local handover may go on (not drained, not above the override) */
    DBT_SHEV_GRANTED, /* Redis granted a permit to a place of the group (+1) */
    DBT_SHEV_RETURNED /* a permit of the group went back to Redis (-1) */
} dbt_shev_type;

typedef struct {
    dbt_shev_type type;
    int64_t share; /* PUSH, RENEWED */
    int64_t held;  /* RENEWED */
    uint64_t ticket;
    bool handover_allowed; /* RENEWED */
    /* RENEWED: the view's events and ticket when the renewal was sent */
    int64_t events_sent;
    int64_t grants_sent;
    uint64_t ticket_sent;
    /* RENEWED: the renewal named no id of the group of this kind (its process holds and waits
     * nothing of the kind, or only under its plain cid or another group): its share and count
     * are not the group's */
    bool named_none;
    /* RENEWED: Redis re-asserted permits of this renewal (it had lost its data): its count is
     * of what was re-asserted so far, not of what the group holds */
    bool reasserted;
    int64_t now_us; /* RENEWED: when its reply was read */
} dbt_shev;

/* Moves the view by one event. A push older than the last one applied is history (the newest
 * ticket wins, as for verdicts); it sets the share, the count stays the group's own (its grants
 * and returns). A renewal's share counts only if no push came since it was sent (else the push's
 * is newer). Its count of what the group holds corrects the one kept here: down at once to
 * Redis' count plus the grants counted since it was sent (a bound never below the truth), up to
 * Redis' count only once renewals that crossed no grant or return have said so for
 * DBT_SHARE_AHEAD_US (a grant in flight is in Redis' count before it is read here). No share is in
 * force when handover is not allowed (drained, above the override). A renewal that named no id of
 * the group (named_none) says nothing else of it: a process of the host that holds nothing of the
 * kind would otherwise wipe the group's share and count. The count never goes below 0. */
void dbt_core_share_step(dbt_share_view *v, const dbt_shev *ev);

#endif
