/* pool_types.h - the types a pool's modules share (private; no prototypes: each module's are in
 * its own header, so that an include line says who uses whom).
 *
 * Glossary
 *   slot     one acquire's state (struct dbt_slot): pending, queued, held, ...; a held slot is the
 *            permit the caller gets (dbt_permit). Linked on p->slots while Redis knows its id.
 *   place    a waiter's entry in Redis' queue (a queued id); a thread waits on its place.
 *   kept     a permit held between commands (DBTHROTTLE_CACHE_PERMITS, "parked"): held and
 *            renewed, but nothing runs on it; the renewer gives it back when someone queues.
 *   orphan   a place no thread waits on any more: its thread was served by a permit another
 *            thread of the process passed on (local handover); the pool keeps it for the next
 *            waiter, who adopts it instead of queuing anew, or withdraws it.
 *   sole     acquire.lua's verdict that this process' waiters are the whole queue: while it
 *            holds, permits pass between the process' threads without Redis (handover.c).
 *   verdict ticket  the ticket of the acquire whose verdict was last applied; orders it against
 *            pushes.
 *   foreign ticket  the ticket of another process' waiter that Redis pushed ("f<kind>:<ticket>"):
 *            it ends the sole verdicts given before it.
 *   leader   the waiting thread that listens on the process' wake list for everyone (listener.c)
 *            and hands the role on when it leaves.
 *   renewer  the pool's background thread: renews leases, sends deferred operations, gives kept
 *            permits and orphans back, and listens while permits are kept and nobody waits.
 *
 * Lock order: the fork registry, then a client's mu, then its pools' mu (fork.c). p->mu is
 * never held across network I/O. */
#ifndef DBT_POOL_TYPES_H
#define DBT_POOL_TYPES_H

#include "hostshare.h"
#include "pool_core.h"
#include "redis_conn.h"
#include "script_protocol.h"
#include "sem_client.h"

#include <pthread.h>
#include <stdatomic.h>

/* Command connections a pool keeps at most. Each is used for one round trip at a time, never
 * while a lock is held; threads beyond this wait for one to come back. */
#define DBT_MAX_CONNS 8

/* After a failed Redis call, acquires skip Redis (open: unthrottled; closed: refused) for this
 * long before trying again, so an outage costs one timeout per second, not one per query. */
#define DBT_OUTAGE_BACKOFF_US INT64_C(1000000)

/* While Redis is misconfigured (a permanent error), one acquire tries Redis this often: the
 * fix is noticed within it, and a broken pool costs no round trip per command. */
#define DBT_MISCONFIG_PROBE_US INT64_C(2000000)
/* ... and its error is logged again this often while it lasts. */
#define DBT_MISCONFIG_RELOG_US INT64_C(60000000)

/* Releases that could not be sent (Redis unreachable) are kept, this many at most, and sent once
 * Redis answers again; beyond that, their leases give them back. */
#define DBT_MAX_DEFERRED 256
/* A permit id's room: "<cid>.<serial>.<class>.<weight>.<limit>" at its longest (the cid
 * "<G>~<cid>" of a process that shares with its host, 33 bytes; a 64-bit serial, a 32-character
 * class, two ints: 110 bytes) and its NUL. Never cut: a cut id names another limit, or no weight,
 * and Redis would count it by those. The host's segment carries ids (DBT_SHARE_ID_MAX). */
#define DBT_ID_MAX 128
_Static_assert(DBT_ID_MAX <= DBT_SHARE_ID_MAX, "a permit id fits in the host's segment");

/* What is owed to Redis for an id; its letter starts the op's tag (dbt_op_tag). */
typedef enum {
    DBT_OWED_RELEASE = 'R', /* release.lua: a permit given back */
    DBT_OWED_CANCEL = 'C',  /* cancel.lua: a waiter that gave up (counted as cancelled) */
    DBT_OWED_WITHDRAW = 'W' /* cancel.lua: a place nobody waits in any more (an orphan, served
                             * by a permit passed without Redis; an acquire whose reply was
                             * lost): not counted, nobody gave up */
} dbt_owed_what;

/* A release (release.lua) or a withdrawal (cancel.lua) owed to Redis for id. */
typedef struct {
    dbt_owed_what what;
    dbt_kind kind;
    int64_t held_ms; /* a release: how long this process held it (-1: not known) */
    char id[DBT_ID_MAX];
} dbt_owed_op;
/* A pool's cid (dbt_pool_cid): the client's 16 hex digits, or "<G>~<cid>" (G 16 hex digits). */
#define DBT_POOL_CID_MAX 40

/* The least time between two warn-level lines of one kind (unthrottled, refused, timed out) of a
 * pool: an outage must not flood the program's stderr; the lines between are counted. */
#define DBT_WARN_EVERY_US INT64_C(10000000)

typedef enum {
    SLOT_PENDING,    /* acquire sent, reply not read yet */
    SLOT_QUEUED,     /* in Redis' queue, waiting for its grant */
    SLOT_HELD,       /* holds a permit */
    SLOT_CANCELLING, /* its waiter gave up; a grant that races in is given back by cancel.lua */
    SLOT_REQUEUE,    /* Redis forgot the waiter (restart, expiry): acquire again */
    SLOT_DOWN,       /* Redis became unreachable while it waited */
    SLOT_RETURNED    /* a kept permit given back by the renewer: unlinked; its owner frees it */
} dbt_slot_state;

struct dbt_slot {
    dbt_pool *pool;
    dbt_kind kind;
    dbt_slot_state state;
    int limit;
    /* Its shape beside the limit: the class tag ("" untagged, "-" the default class) and the
     * units it takes. Local handover and kept permits pass a permit only to the same shape. */
    char klass[33];
    int weight;
    /* Its class's wait (ms; -1 none), from acquire.lua's reply: a thread that adopts this place
     * (no reply of its own) waits by it too (same shape, same class). */
    long long class_wait_ms;
    bool wait_live;   /* its wait is the pool's live wait_timeout (dbt_acquire_opts.wait_live) */
    int efd;          /* eventfd written when the state changes or the listener role passes; -1 if
                       * the caller does not wait */
    dbt_waker *waker; /* the caller's, while efd is published in it */
    bool lost;        /* Redis no longer has it (see dbt_permit_lost) */
    /* Granted in shadow mode where enforcing would not have granted it (acquire.lua's "would"):
     * never kept, never passed on (pool_core.c), back to Redis at its release. */
    bool over_limit;
    /* The command sample (sample.c): when this hold asked and was granted (sample_grant_us 0:
     * not sampled, or written already), and its line's `would` (sample.def: what enforcing would
     * have done in shadow mode, or that it was enforced and whether it queued). */
    int64_t sample_ask_us, sample_grant_us, sample_queued_at_us;
    uint8_t sample_would;
    /* Its lease ran out under its holder (unrenewed for a lease, or Redis reaped it): in closed
     * mode a command running under it is cancelled (lapse.c), once (lapse_cancelled). An
     * eviction is not a lapse: `dbthrottle evict` chooses whether to cancel. */
    bool lapsed, lapse_cancelled;
    uint64_t gen; /* pool generation: a permit from before a fork() is the parent's */
    char id[DBT_ID_MAX];
    char conn[64];
    /* The session it is for (dbt_acquire_opts.session; "" none): sent with the acquire, and with
     * each renewal, which rewrites what Redis shows when it changed (a local handover passes the
     * permit to another connection). */
    char session[DBT_SESSION_LEN];
    char *query;          /* the start of the command's text, traced with it; NULL if not asked */
    int64_t t_request_us; /* when acquire was first called */
    int64_t t_grant_us;
    int64_t t_renewed_us; /* when the last acquire or renewal that Redis accepted was sent */
    /* The lease that acquire or renewal carried (Redis expires the permit or the place at
     * t_renewed_us + lease_us by its clock): every belief in it is measured by it, not by the
     * pool's lease now, which a live setting may change meanwhile (lease.c). */
    int64_t lease_us;
    /* The renewal round that named its id (p->renew_round; 0: none): only those ids are renewed
     * by that round's reply. The flag follows the id when ids move between slots. */
    uint64_t named_round;
    int64_t idle_since_us; /* held with nothing running, inside a transaction; 0 otherwise */
    bool idle_warned;
    /* What Redis shows of this holder (dbt_slot_doing): the doing the last renewal sent or its
     * grant wrote ('\0': not known, a permit passed without Redis, whose entry names the holder
     * before), and since when the holder does what it does now. A doing that differs for
     * DBT_DOING_REPORT_US is sent at once, not a renewal period later (renewer.c). */
    char doing_sent;
    int64_t doing_since_us;
    /* Kept between commands (DBTHROTTLE_CACHE_PERMITS): held, linked and renewed as any held
     * permit, but its owner runs nothing on it; the renewer gives it back when someone queues
     * (p->queue[kind].keep.contended) or after DBTHROTTLE_CACHE_IDLE. */
    bool parked;
    int64_t parked_us; /* when it was kept */
    /* Local handover (handover.c). A place in Redis' queue that no thread waits on any more: its
     * thread was served by a permit another thread of the process passed on, and the place is
     * kept for the process' next waiter (owned by the pool, QUEUED, or HELD if Redis granted it
     * before anyone took it). */
    bool orphan;
    int64_t orphan_us;        /* since when */
    atomic_int pending_wakes; /* wakes promised under p->mu, done after it: the eventfd
                               * is not closed until they are */
    /* A queued acquire that no thread waits on (dbt_acquire_wait_park): what a permit passed
     * straight to it is offered to (dbt_deliver_ops), NULL otherwise. */
    void *_Atomic deliver_arg;
    /* Its watch's eventfd + 1 while parked (0: none): each wake of the slot is told there too,
     * as its own eventfd is watched by nobody. */
    atomic_int notify_plus1;
    atomic_uint notified; /* wakes told there since it was parked */
    atomic_uint wakes;    /* every wake (dbt_slot_wake), and their number when it queued */
    unsigned wakes_queued;
    bool thread_waits; /* a thread of ours waits on it (acquire.c's wait_turn): it may lead */
    bool in_fifo;      /* on the pool's list of waiting threads (lw_*) */
    bool adopted;      /* took an orphan's place: queued without a Redis call */
    /* Sent back to queue (SLOT_REQUEUE) as no renewal of its place was accepted for a lease
     * (this process was stopped, or Redis unreachable), not as Redis said it lacked it. */
    bool unrenewed;
    /* Sent back to queue (SLOT_REQUEUE) as the pool turned to shadow mode (live.c): sent again,
     * it runs at once. */
    bool to_shadow;
    /* Sent down (SLOT_DOWN) by the renewer as Redis refused its renewal for a permanent cause
     * (p->misconfig then): its waiter is refused, not run unthrottled in open mode, even if
     * another thread's call clears p->misconfig before the waiter looks. */
    bool down_misconfigured;
    /* Host sharing (sharing.c): its registration in the host's segment while its thread waits
     * (0: none); a permit another process offers to it comes through it. share_got_us: when it
     * got the permit it holds from another process (0: it did not): a renewal sent before that
     * did not name it, so its reply does not renew it. */
    uint64_t share_reg;
    int64_t share_got_us;
    /* Kept on the host's shelf (sharing.c) rather than in this slot: the entry's handle (0:
     * not). Any process of the host may take it from there; until then this process renews it. */
    uint64_t shelf;
    struct dbt_slot *lw_prev, *lw_next;
    struct dbt_slot *prev, *next;
};

struct dbt_pool {
    /* client.c: what the pool is, set once by dbt_client_pool */
    dbt_client *client;
    char *name;
    dbt_keys keys;
    struct dbt_pool *next;
    /* The cid of the pool's Redis ids and wake list (dbt_pool_cid), set with p->mu held by
     * dbt_pool_set_group: "" = the client's; "<G>~<client cid>" while the pool shares with its
     * host as group G. prev_cid: the one before the last change ("" none), whose places may still
     * be granted: the listener pops its wake list too. */
    char cid[DBT_POOL_CID_MAX];
    char group[DBT_SHARE_GROUP_LEN];
    char prev_cid[DBT_POOL_CID_MAX];

    /* pool.c: the lock, command connections, slots, outage backoff, deferred operations */
    pthread_mutex_t mu; /* guards all below; never held across network I/O */
    pthread_cond_t conn_cv;
    dbt_redis *free_conns[DBT_MAX_CONNS];
    dbt_redis *all_conns[DBT_MAX_CONNS]; /* every command connection, to close them in a child */
    int nfree, nconns;
    struct dbt_slot *slots; /* every pending, queued and held slot of this process */
    int nqueued, nheld;
    /* Slots no longer used, kept with their eventfd for the next acquire (a command of a busy
     * thread otherwise paid an eventfd, a close, a calloc and a free). Linked by next. */
    struct dbt_slot *spare;
    int nspare;
    uint64_t gen;
    int64_t down_until_us; /* outage backoff, see DBT_OUTAGE_BACKOFF_US */
    bool in_outage;
    /* A permanent Redis error (redis_errors.h): every acquire is refused without a round trip,
     * but one every DBT_MISCONFIG_PROBE_US, which ends it when Redis accepts it. The field's line
     * is kept as written: `dbthrottle status` (another module) reads it. */
    // clang-format off
    char misconfig[256]; /* a permanent Redis error: why, and the setting to fix; "" when none (p->mu) */
    // clang-format on
    int64_t misconfig_probe_us;  /* when the next acquire may try Redis */
    int64_t misconfig_at_us;     /* when it was last noted: only a call sent since ends it */
    char misconfig_logged[256];  /* the cause last logged ... */
    int64_t misconfig_logged_us; /* ... and when: again after DBT_MISCONFIG_RELOG_US */
    bool misconfig_fix_owed;     /* that line's redis_fixed is yet to be logged */
    bool reached_redis;          /* a connection ever opened: its host name resolved */
    bool info_warned;            /* INFO refused: warned once */
    /* The last (or current) outage, as the process registry reports it (registry.c): since when
     * (wall clock, ms), until when (0 while it lasts), and what it cost. */
    int64_t outage_since_ms, outage_until_ms;
    uint64_t outage_unthrottled, outage_refused;
    int64_t outage_error_us,
        outage_ended_us; /* its last failure, the last one's end (pool_core.h) */
    /* Warn-level lines about commands that ran unthrottled, were refused or timed out: the first
     * of a stretch, then one summary per DBT_WARN_EVERY_US with how many were not logged. */
    int64_t warn_next_us[3];
    uint64_t warn_quiet[3];
    /* releases owed to Redis (see DBT_MAX_DEFERRED); the renewer sends them, and takes each
     * off only once it is written (release.c: a process that exits meanwhile sends it too) */
    dbt_owed_op deferred[DBT_MAX_DEFERRED];
    int ndeferred;
    uint64_t deferred_dropped; /* owed operations the full list could not keep (warned once) */
    dbt_pool_stats st;
    /* summary.c (DBTHROTTLE_LOG_STATS): when the last periodic line was due (0: not started),
     * the counters it showed, and the longest wait since (acquire.c keeps it with st's). */
    int64_t stats_line_us;
    dbt_pool_stats stats_shown;
    int64_t stats_wait_max_us;
    /* Eras (docs/design.md, "Failover and data loss"): the run_id of the server the process last
     * met the pool's state on ("" none yet), and per kind the quarantine last heard of: until
     * when (monotonic us) and why. renew_now: a connection reached another server (or Sentinel
     * announced a failover): renew at once, so that the holders re-assert early; renew_at_us: a
     * renewal due when a quarantine ends, for the waiters (0: none). */
    char era_seen[41];
    int64_t quarantine_until_us[DBT_NKINDS];
    bool renew_now;
    int64_t renew_at_us;

    /* acquire.c */
    bool disagreement_logged[DBT_NKINDS];
    bool seen_any_grant;

    /* kept.c: kept permits (see struct dbt_slot) */
    int nparked; /* held slots kept between commands */
    /* The host's shelf of the kind goes back to Redis (a recall this process heard, for the
     * host): the renewer takes every entry of the kind off it and releases them. */
    bool shelf_recall[DBT_NKINDS];
    /* Releases and cancels the renewer is sending right now (kept permits, orphan places), off
     * every list meanwhile: a process that exits under it sends them too (twice is harmless). */
    dbt_owed_op inflight[64];
    int ninflight;

    /* What the pool knows of each kind's queue (pool_core.h), moved only by dbt_queue_step:
     * whether this process' waiters are the whole queue (local handover, handover.c), and
     * whether someone queued, so that no permit is kept (kept.c). */
    dbt_queue_state queue[DBT_NKINDS];
    /* handover.c: local handover */
    struct dbt_slot *lw_head[DBT_NKINDS], *lw_tail[DBT_NKINDS]; /* waiting threads, oldest first */
    int norphans; /* slots with orphan set, queued or held */
    /* The program's connections on the pool (conns.c), for dbthrottle clients: by name, those
     * beyond its cap counted only; changed since the last report, since when. */
    struct dbt_known_conn *known;
    int nknown;
    long known_untracked;
    bool known_changed;
    int64_t known_changed_us;
    uint64_t known_sent_digest; /* their states as the last report said them (conns.c) */
    /* The pool's live settings as last applied (live.c), NULL none: read under p->mu. */
    struct dbt_live *live;
    /* The outage mode in force (dbt_on_error): the live value, else the process' own. Set by
     * live.c, read on any path, with or without p->mu (an outage's paths take it, lapse.c's
     * hold it). */
    atomic_int on_redis_error;
    /* The mode in force per kind (dbt_mode): the live value, else the process' own. Set by
     * live.c, read on any path (dbt_pool_shadow). */
    atomic_int mode[DBT_NKINDS];
    /* Which commands the sample keeps (dbt_sample_when): the live value, else the process' own.
     * Set by live.c, read as a hold begins (sample.c). */
    atomic_int sample_when;
    /* The lease in force (ms): the live value, else the process' own; and the shortest and the
     * longest of those before it, with the time until which a permit or place may still carry
     * them (lease.c). */
    _Atomic int64_t lease_ms, lease_prev_min_ms, lease_prev_max_ms, lease_prev_until_us;
    /* The pool's live log_level for its trace (trace.c), -1: the process' own. Set by live.c. */
    atomic_int log_level;
    /* p->live's version, for readers without p->mu (dbt_pool_live_applied). Set by live.c. */
    atomic_llong live_applied;
    /* Which rows of the settings table p->live sets (bit = row), for readers that lock p->mu only
     * when the live settings set what they read (dbt_pool_live_sets). Set by live.c. */
    atomic_ullong live_set_mask;
    /* An acquire ran on the pool (a connection of it takes permits): a process whose connections
     * are all exempt does not say its commands are refused while Redis is away. p->mu. */
    bool takes_permits;
    /* The process' first report of the pool came back (its live settings known, or Redis not
     * answering): a connection's first command waits for it (dbt_pool_await_live). p->mu. */
    bool live_heard;
    pthread_cond_t live_cv; /* CLOCK_MONOTONIC */
    /* The outage going on was said (redis_error at warn or error), so its end is (redis_back). */
    bool outage_said;
    /* When the process' record changed in a way status must show at once (live.c: the live
     * settings applied, the mode in force): the renewer reports then. 0: none. p->mu. */
    int64_t record_changed_us;
    bool known_sent_busy;
    int64_t
        orphan_made_us; /* when the last orphan was made (renewer.c: its sleeps while they come) */
    bool exiting;       /* dbt_client_exit ran: no more local handover */
    /* What local handover did since the last renewal, which adds it to Redis' counters (so
     * dbthrottle status counts every grant). */
    dbt_local_counts unreported[DBT_NKINDS];
    dbt_local_hist unreported_hist[DBT_NKINDS]; /* their waits, for the wait histogram */
    /* The holds of ours that ended in a pass without Redis (to another thread, or process of the
     * host), for the hold histogram: Redis sees only the release that ends a run of them. */
    dbt_local_hist unreported_holds[DBT_NKINDS];
    /* Shadow mode's buffer of holds not sent yet (sample.c); NULL until the first. p->mu. */
    struct dbt_sample *sample;
    double hist_bounds[DBT_HIST_MAX]; /* the scripts' bucket bounds (set once) */
    int nbounds;

    /* share.c: host sharing (DBTHROTTLE_HOST_SHARE): the host's segment once attached (NULL:
     * not, or not usable), whether an attach is under way, when the next may be tried, and a
     * hash of the last reason it could not that was logged (0: none since the last attach; a
     * cause is said once per pool, a new one again). */
    struct dbt_share *share;
    /* The lease the segment's key names (µs; lease.c): the processes that share it pass permits
     * with their renewal times said for it, whatever lease each carries. */
    int64_t share_lease_us;
    bool share_attaching;
    /* The process left the segment (its exit): its grants and returns are no longer the host's
     * to count (docs/design.md, "Shares"). */
    bool share_left;
    /* The segment's fd plus one while p->share is set (0: none), read without p->mu: a thread
     * looks at the file before it takes p->mu (dbt_sharing_precheck). */
    _Atomic int share_fd1;
    uint64_t share_why_said;
    int64_t share_retry_us;
    int nwait_threads; /* threads in acquire's wait (the others' waits are parked) */
    /* Who polls the host's wake socket for this process (docs/design.md, "Who watches the
     * socket"): one waiting thread whose wait is registered in the segment (share_watcher, its
     * slot; acquire.c, wait_wake), so that a permit another process passes wakes one thread; the
     * renewer, in its listen, unless such threads do (share_threads_watch: set when one takes
     * the role, cleared when a wait parks) and no registered wait is parked (bg_watches_share
     * says its listen polls the socket). */
    struct dbt_slot *share_watcher;
    bool share_threads_watch;
    bool bg_watches_share;

    /* listener.c: grants: the waiting threads take turns listening */
    dbt_redis *listener; /* the connection that BLPOPs this process' wake list */
    bool leader_active;  /* a waiting thread is listening */
    int blpop_in_flight; /* BLPOPs sent whose replies are not read yet */
    bool listener_reset; /* Redis failed: reconnect before listening again */

    /* renewer.c: background thread: renews leases, gives kept permits back, and listens while
     * permits are kept and no thread waits. bg_start: how the modules below it start it
     * (dbt_pool_start_bg), set by the pool's maker (client.c) */
    void (*bg_start)(dbt_pool *p);
    bool thread_started, stop;
    bool bg_idle;             /* the renewer waits with nothing to renew until signalled */
    struct dbt_slot *bg_slot; /* not linked: its eventfd wakes the renewer out of dbt_listen */
    bool bg_leading;          /* the renewer is the listener now */
    bool bg_reads_only;       /* ... only to read the replies of BLPOPs in flight: sends none */
    int64_t bg_until_us;      /* when the renewer wakes by itself next (0: not asleep) */
    int64_t drain_due_us;     /* when it reads the replies of releases sent (0: none owed) */
    pthread_t thread;
    pthread_cond_t bg_cv;
    int64_t last_renew_us;
    uint64_t renew_round; /* renewer.c: the rounds so far (struct dbt_slot's named_round) */
    int renew_failures;   /* renewals failed in a row: the next is tried sooner (renewal_failed) */
    /* What a lease lost for want of renewal says of its cause (dbt_slot_expire_unrenewed): Redis,
     * or this process stopped (SIGSTOP, a VM freeze) or not scheduled. When the renewer planned
     * to run its loop again, and by when it surely would have unless stalled (0: not running);
     * the last stall of its own it saw (when, and how late it ran); when a renewal last failed
     * (Redis refused, or did not answer in time) and when the one in flight was sent (0: none). */
    int64_t bg_plan_us, bg_back_by_us, stall_seen_us, stall_us, renew_failed_us, renew_in_flight_us;
    int64_t last_report_us; /* the last renewal or heartbeat sent (the process record) */
    /* Redis' clock as the last renewal's reply read it (renew.lua's now against its send): a
     * renewal states by it until when, on Redis' clock, its leases may still be believed in. */
    dbt_redis_clock redis_clock;
    bool reported; /* one was accepted: the exit removes the record */
};

struct dbt_client {
    const dbt_config *cfg;
    char cid[17];
    char host[64]; /* this host's name, shown by dbthrottle status */
    atomic_uint_fast64_t serial;
    pthread_mutex_t mu; /* guards pools */
    dbt_pool *pools;
    struct dbt_client *next; /* registry of live clients, for fork handling */
};

#endif
