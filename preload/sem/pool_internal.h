/* pool_internal.h - the state shared by sem_client.c, listener.c, renewer.c and fork.c.
 * Not a public API. */
#ifndef DBT_POOL_INTERNAL_H
#define DBT_POOL_INTERNAL_H

#include "clock.h"
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

/* Releases that could not be sent (Redis unreachable) are kept, this many at most, and sent once
 * Redis answers again; beyond that, their leases give them back. */
#define DBT_MAX_DEFERRED 256

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
    int efd;          /* eventfd written when the state changes or the listener role passes; -1 if
                       * the caller does not wait */
    dbt_waker *waker; /* the caller's, while efd is published in it */
    bool lost;        /* Redis no longer has it (see dbt_permit_lost) */
    uint64_t gen;     /* pool generation: a permit from before a fork() is the parent's */
    char id[64];
    char conn[64];
    char *query;          /* the start of the command's text, traced with it; NULL if not asked */
    int64_t t_request_us; /* when acquire was first called */
    int64_t t_grant_us;
    int64_t t_renewed_us;  /* when the last acquire or renewal that Redis accepted was sent */
    int64_t idle_since_us; /* held with nothing running, inside a transaction; 0 otherwise */
    bool idle_warned;
    /* Kept between commands (DBTHROTTLE_CACHE_PERMITS): held, linked and renewed as any held
     * permit, but its owner runs nothing on it; the renewer gives it back when someone queues
     * (p->contended) or after DBTHROTTLE_CACHE_IDLE. */
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
    bool in_fifo;             /* on the pool's list of waiting threads (lw_*) */
    bool adopted;             /* took an orphan's place: queued without a Redis call */
    struct dbt_slot *lw_prev, *lw_next;
    struct dbt_slot *prev, *next;
};

struct dbt_pool {
    dbt_client *client;
    char *name;
    dbt_keys keys;
    struct dbt_pool *next;

    pthread_mutex_t mu; /* guards all below; never held across network I/O */
    pthread_cond_t conn_cv;
    dbt_redis *free_conns[DBT_MAX_CONNS];
    dbt_redis *all_conns[DBT_MAX_CONNS]; /* every command connection, to close them in a child */
    int nfree, nconns;

    struct dbt_slot *slots; /* every pending, queued and held slot of this process */
    int nqueued, nheld;
    int nparked; /* held slots kept between commands (see struct dbt_slot) */
    /* Per kind: Redis asked this process not to keep permits (someone queued: "r<kind>" on the
     * wake list), until an acquire is granted with nobody queued. */
    bool contended[DBT_NKINDS];
    /* Local handover, per kind (handover.c): the ticket of our latest acquire whose verdict was
     * "this process' waiters are the whole queue" (0: not alone, or not known), the latest
     * ticket whose verdict was applied, and the highest ticket of another process' waiter Redis
     * pushed to us ("f<kind>:<ticket>"). */
    uint64_t sole[DBT_NKINDS], verdict_ticket[DBT_NKINDS], foreign_ticket[DBT_NKINDS];
    int64_t verdict_us[DBT_NKINDS]; /* when the last verdict was applied */
    struct dbt_slot *lw_head[DBT_NKINDS], *lw_tail[DBT_NKINDS]; /* waiting threads, oldest first */
    int norphans; /* slots with orphan set, queued or held */
    bool exiting; /* dbt_client_exit ran: no more local handover */
    /* What local handover did since the last renewal, which adds it to Redis' counters (so
     * dbthrottle status counts every grant). */
    dbt_local_counts unreported[DBT_NKINDS];
    /* Slots no longer used, kept with their eventfd for the next acquire (a command of a busy
     * thread otherwise paid an eventfd, a close, a calloc and a free). Linked by next. */
    struct dbt_slot *spare;
    int nspare;
    uint64_t gen;

    /* grants: the waiting threads take turns listening (listener.c) */
    dbt_redis *listener; /* the connection that BLPOPs this process' wake list */
    bool leader_active;  /* a waiting thread is listening */
    int blpop_in_flight; /* BLPOPs sent whose replies are not read yet */
    bool listener_reset; /* Redis failed: reconnect before listening again */

    /* background thread: renews leases, gives kept permits back, and listens while permits are
     * kept and no thread waits (renewer.c) */
    bool thread_started, stop;
    bool bg_idle;             /* the renewer waits with nothing to renew until signalled */
    struct dbt_slot *bg_slot; /* not linked: its eventfd wakes the renewer out of dbt_listen */
    bool bg_leading;          /* the renewer is the listener now */
    int64_t bg_until_us;      /* when the renewer wakes by itself next (0: not asleep) */
    pthread_t thread;
    pthread_cond_t bg_cv;
    int64_t last_renew_us;

    int64_t down_until_us; /* outage backoff, see DBT_OUTAGE_BACKOFF_US */
    /* releases owed to Redis (see DBT_MAX_DEFERRED); the renewer sends them */
    struct {
        bool cancel; /* cancel.lua (an acquire whose reply was lost), else release.lua */
        dbt_kind kind;
        char id[64];
    } deferred[DBT_MAX_DEFERRED];
    int ndeferred;
    /* Releases and cancels the renewer is sending right now (kept permits, orphan places), off
     * every list meanwhile: a process that exits under it sends them too (twice is harmless). */
    struct {
        bool cancel;
        dbt_kind kind;
        char id[64];
    } inflight[64];
    int ninflight;
    bool in_outage;
    bool disagreement_logged[DBT_NKINDS];
    bool seen_any_grant;
    dbt_pool_stats st;
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

/* sem_client.c */
dbt_redis *dbt_pool_get_conn(dbt_pool *p, char *err);
void dbt_pool_put_conn(dbt_pool *p, dbt_redis *r);
void dbt_pool_note_error(dbt_pool *p, const char *what, const char *msg);
void dbt_pool_note_ok(dbt_pool *p);
void dbt_slot_wake(struct dbt_slot *s);                /* call with p->mu held */
void dbt_unlink_slot(dbt_pool *p, struct dbt_slot *s); /* p->mu held: off every list, uncounted */
void dbt_free_slot(struct dbt_slot *s);                /* an unlinked slot, without p->mu */
/* An unlinked slot nobody uses any more goes to p->spare when it can (p->mu held); false: the
 * caller frees it with dbt_free_slot, without the lock. */
bool dbt_recycle_slot(dbt_pool *p, struct dbt_slot *s);
void dbt_free_spares(dbt_pool *p); /* p->mu held, or no other thread (fork, free) */
/* Withdraws id from the queue, or gives it back if Redis granted it (cancel.lua), within one
 * Redis timeout; kept and sent later if Redis cannot be reached. Without p->mu. */
void dbt_send_cancel(dbt_pool *p, dbt_kind kind, const char *id);

/* Marks held slot s lost (Redis may have given its permit to another): counted and logged once,
 * with why. p->mu held. */
void dbt_slot_mark_lost(dbt_pool *p, struct dbt_slot *s, dbt_log_level lvl, const char *reason);
/* Marks s lost if no renewal was accepted for a whole lease (logs it once). p->mu held. */
bool dbt_slot_expire_unrenewed(dbt_pool *p, struct dbt_slot *s, int64_t now);

/* Sends the releases and cancels kept during an outage. Call without p->mu. */
void dbt_flush_deferred(dbt_pool *p);

/* Kept permits: when the next one is due back (-1: none kept), and giving back those that are
 * due (revoked by a waiter's arrival, or idle for DBTHROTTLE_CACHE_IDLE). */
int64_t dbt_parked_due_us(dbt_pool *p); /* p->mu held */
void dbt_return_parked(dbt_pool *p);    /* without p->mu */
void dbt_wake_renewer(dbt_pool *p);     /* p->mu held: out of its park or its listening */

/* handover.c: passing permits between the threads of this process (see lua/acquire.lua). All
 * with p->mu held unless said otherwise. */
void dbt_lw_push(dbt_pool *p, struct dbt_slot *s);   /* s begins to wait (QUEUED) */
void dbt_lw_remove(dbt_pool *p, struct dbt_slot *s); /* s waits no more; no-op if not listed */
/* Redis granted s (QUEUED or PENDING): the permit goes to the process' oldest waiting thread of
 * its kind and limit, which s may be; a place nobody waits on any more is given back by the
 * renewer. */
void dbt_handover_granted(dbt_pool *p, struct dbt_slot *s);
/* The thread of held slot s gives it back: the waiting thread of this process the permit went
 * to, or NULL. Then s is an orphan place, owned by the pool (its caller must not free it), and
 * the caller wakes the returned slot with dbt_slot_wake_later once it has let go of p->mu (a
 * thread woken under the lock would find it taken, and sleep again). */
struct dbt_slot *dbt_handover_release(dbt_pool *p, struct dbt_slot *s);
void dbt_slot_wake_later(struct dbt_slot *s); /* without p->mu */
/* A thread that begins to wait may take an orphan place of its kind and limit rather than queue
 * anew (no Redis call): the orphan, unlinked, or NULL. Its caller frees it without p->mu. */
struct dbt_slot *dbt_handover_adopt(dbt_pool *p, dbt_kind kind, int limit);
/* What acquire.lua said when it queued one of ours (its ticket, and whether our waiters were the
 * whole queue), and what Redis pushed when another process queued ("f<kind>:<ticket>"; ticket 0:
 * a renewal found more waiters than ours). */
void dbt_handover_verdict(dbt_pool *p, dbt_kind kind, uint64_t ticket, bool sole);
void dbt_handover_foreign(dbt_pool *p, dbt_kind kind, uint64_t ticket);
/* Redis may have lost its data (or the process forked): forget what it said. */
void dbt_handover_reset(dbt_pool *p);
/* Orphans: when the next is due back (-1: none), and giving back (without p->mu) those that are
 * due: granted with nobody to take them, kept unused for a while, or while others queue. */
int64_t dbt_orphans_due_us(dbt_pool *p);
/* When no thread of this process holds or waits for a permit of a kind any more, its orphans of
 * that kind serve nobody: they are unlinked and returned (at most cap) for the caller to
 * withdraw at once, without p->mu. A process that ends without running its exit handlers
 * (_exit, as Python's multiprocessing children do) would otherwise leave them queued in Redis,
 * to be granted to nobody, until their lease runs out. */
int dbt_orphans_take_if_idle(dbt_pool *p, dbt_kind kind, struct dbt_slot **out, int cap);
void dbt_orphans_settle(dbt_pool *p); /* without p->mu */
/* Adds what local handover did since the last renewal to Redis' counters, now (a renewal
 * carries it otherwise): at exit, so that nothing done goes uncounted. Without p->mu. */
void dbt_report_local(dbt_pool *p);
/* listener.c */
/* How a wait for a grant ended: on the slot's eventfd (acquire's wait_wake) or as the listener
 * (dbt_listen). */
typedef enum {
    DBT_WAIT_WOKEN,      /* something happened: look at the slot's state */
    DBT_WAIT_TIMED_OUT,  /* the deadline passed */
    DBT_WAIT_INTERRUPTED /* a signal interrupted it and o->interrupted said stop */
} dbt_wait_result;
/* Leads for one step: polls the listener connection and s's eventfd until something happens,
 * the deadline passes or a signal interrupts and o->interrupted says stop. Only the thread that
 * set p->leader_active calls it, without p->mu. */
dbt_wait_result dbt_listen(dbt_pool *p, struct dbt_slot *s, int64_t deadline_us,
                           const dbt_acquire_opts *o);
void dbt_listener_pass(dbt_pool *p);  /* p->mu held: wake a waiter to take over the role */
void dbt_listener_close(dbt_pool *p); /* frees the listener connection (no thread uses it) */
struct dbt_slot *dbt_find_slot(dbt_pool *p, const char *id); /* p->mu held */
void dbt_fail_waiters(dbt_pool *p); /* p->mu held: every waiter gives up on a Redis that is gone */

/* renewer.c */
void dbt_renewer_ensure(dbt_pool *p); /* call with p->mu held: starts or wakes the thread */
void dbt_renewer_stop(dbt_pool *p);   /* call without p->mu: stops and joins it */

/* fork.c */
void dbt_fork_register(dbt_client *c);
void dbt_fork_unregister(dbt_client *c);
void dbt_new_client_id(char cid[17]);
void dbt_cond_init_mono(pthread_cond_t *cv);   /* a condition variable timed by CLOCK_MONOTONIC */
void dbt_pool_mutex_init(pthread_mutex_t *mu); /* p->mu's kind (see fork.c) */

#endif
