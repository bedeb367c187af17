/* sem_client.h - the client of the distributed semaphore: acquire, wait, release, lease renewal.
 *
 * Knows nothing of libpq. One dbt_client per process (tests make several); one dbt_pool per pool
 * name, created on first use, with a few command connections and, while it waits or holds, one
 * background thread that listens for grants (BLPOP) and renews the process' leases. */
#ifndef DBT_SEM_CLIENT_H
#define DBT_SEM_CLIENT_H

#include "config.h"
#include "keys.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct dbt_client dbt_client;
typedef struct dbt_pool dbt_pool;
typedef struct dbt_slot dbt_permit;

typedef enum {
    DBT_ACQ_GRANTED = 0,   /* *out holds a permit: give it back with dbt_release */
    DBT_ACQ_TIMEOUT,       /* waited wait_ms (or 0: none was free) and withdrew from the queue */
    DBT_ACQ_INTERRUPTED,   /* a signal interrupted the wait and opts->interrupted said stop */
    DBT_ACQ_UNTHROTTLED,   /* Redis unreachable, on_redis_error=open: go on without a permit */
    DBT_ACQ_REFUSED,       /* Redis unreachable, on_redis_error=closed: fail the command */
    DBT_ACQ_MISCONFIGURED, /* Redis refuses this configuration (a permanent error, whatever
                            * on_redis_error says): fail the command; dbt_pool_misconfig says why */
    DBT_ACQ_QUEUED,        /* dbt_acquire_start only: queued, to be waited for elsewhere */
    DBT_ACQ_QUEUE_FULL     /* refused at once: the caller's class has its queue cap of waiters
                            * (dbt_last_queue_full says which class and cap) */
} dbt_acq_result;

/* Lets another thread, or a signal handler, wake a waiting dbt_acquire so that it asks
 * opts->interrupted again (PQcancel is documented as callable from a signal handler). Zeroed is
 * idle. While a wait runs, efd_plus1 names its eventfd; `users` counts firers inside
 * dbt_waker_fire, and the waiter does not close the eventfd until none is, so a firer never
 * writes to a descriptor number that the program has reused. */
typedef struct {
    atomic_int efd_plus1;
    atomic_int users;
} dbt_waker;

/* Wakes the wait that w belongs to, if one runs. Async-signal-safe: atomics and write(2). */
void dbt_waker_fire(dbt_waker *w);

/* How much of a command's text a slot keeps for the trace: more than the log shows of one value
 * (1 KiB), so that the log marks the cut with "...". */
#define DBT_QUERY_TRACE_MAX 1100

/* The session a permit is for (the holders' list joins with pg_stat_activity by it), as
 * acquire.lua keeps it in info: "<backend pid>\x1f<application_name>\x1f<user>\x1f<database>",
 * each name cut to 63 bytes and its control bytes made '_' (so the separator stays one). NULL
 * names are "". Returns false when out (DBT_SESSION_LEN bytes) is too small (never at that
 * size). */
#define DBT_SESSION_LEN (24 + 4 * 64)
bool dbt_format_session(long backend_pid, const char *app, const char *user, const char *db,
                        char *out, size_t cap);

typedef struct {
    int limit;         /* this caller's limit (>= 1) */
    int64_t wait_ms;   /* DBT_FOREVER, or how long to wait; 0 = only if one is free now */
    bool wait_live;    /* wait_ms is the pool's live wait_timeout (dbthrottle set): a timeout
                        * says so, not DBTHROTTLE_WAIT_TIMEOUT */
    const char *conn;  /* connection id for the trace (may be NULL) */
    const char *query; /* the command's text for the trace (DBTHROTTLE_LOG_QUERY; may be NULL) */
    /* Asked when a signal interrupts the wait; returning true withdraws and gives
     * DBT_ACQ_INTERRUPTED. NULL: signals never interrupt. */
    bool (*interrupted)(void *arg);
    void *arg;
    dbt_waker *waker; /* NULL, or published while the call waits (see dbt_waker) */
    /* Classes and weights: the class the permit is for (a name, or "-" for the pool's default
     * class; NULL: untagged, unless weight > 1, then "-"), and how many units it takes (0 or 1:
     * one). A tagged permit's id has the 5-part form <cid>.<serial>.<class>.<weight>.<limit>. A
     * class's wait (from Redis' definitions), when it has one, replaces wait_ms. */
    const char *klass;
    int weight;
    /* The database session the permit is for, as dbt_format_session makes it (backend pid,
     * application_name, user, database): kept with the holder in Redis for dbthrottle status,
     * which joins it with pg_stat_activity. NULL: none (a connection permit taken before its
     * connection exists). */
    const char *session;
} dbt_acquire_opts;

typedef struct {
    uint64_t grants;       /* permits granted */
    uint64_t waits;        /* grants that had to queue */
    uint64_t timeouts;     /* waits that timed out */
    uint64_t interrupts;   /* waits interrupted */
    uint64_t refusals;     /* refused because Redis was unreachable (on_redis_error=closed) */
    uint64_t unthrottled;  /* run without a permit because Redis was unreachable (open) */
    uint64_t redis_errors; /* failed Redis calls */
    uint64_t leases_lost;  /* permits Redis no longer had at renewal */
    uint64_t handovers;    /* grants passed from thread to thread here, without Redis */
    uint64_t adoptions;    /* waits that took the place of a thread so served */
    int64_t wait_total_us; /* total time spent waiting: for grants, and by waits that timed out */
    int64_t wait_max_us;
} dbt_pool_stats;

/* Makes a client (no I/O, no thread). cfg must outlive the client. NULL when out of memory. */
dbt_client *dbt_client_new(const dbt_config *cfg);

/* Gives back every permit still held (without waiting for the replies longer than the Redis
 * timeout), stops the background threads, logs one summary line per pool, frees everything.
 * No thread may be inside dbt_acquire; permits held become invalid. */
void dbt_client_free(dbt_client *c);

/* At process exit: gives back every permit still held (replies not awaited) and logs one
 * summary line per pool, but frees nothing: other threads may still be running. */
void dbt_client_exit(dbt_client *c);

/* This process' random client id (16 hex digits), which prefixes its permit ids. */
const char *dbt_client_id(const dbt_client *c);

/* Every pool of the client renews at once, so that its holders re-assert their permits early
 * (docs/design.md, "Failover and data loss"): a Sentinel failover announcement's callback (its
 * argument: the client). No I/O here: the renewers do it. */
void dbt_client_renew_all_now(void *client);

/* The pool of that name, created on first use (no I/O). NULL when out of memory. */
dbt_pool *dbt_client_pool(dbt_client *c, const char *name);

/* Takes a permit of `kind` from the pool. The uncontended case is one Redis round trip; a waiter
 * sleeps until the process' listener hands it the grant. */
dbt_acq_result dbt_acquire(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *opts,
                           dbt_permit **out);

/* An acquire that queued and whose wait another thread runs: an event loop must not wait in
 * its own thread (interpose/held.c). */
typedef struct dbt_acquire_wait dbt_acquire_wait;

/* As dbt_acquire, up to the wait: when no permit is free at once and opts->wait_ms allows a
 * wait, the caller is queued in Redis (its place taken now, in order, by the same one round
 * trip) and DBT_ACQ_QUEUED is returned with *pending set; any other result is final, as
 * dbt_acquire's. The queued acquire must then be finished, exactly once, from any thread, by
 * dbt_acquire_wait_for: until then its place waits in the queue (and is renewed) and a grant to
 * it is kept for it. */
dbt_acq_result dbt_acquire_start(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *opts,
                                 dbt_permit **out, dbt_acquire_wait **pending);

/* Waits for a queued acquire as dbt_acquire would have (the deadline counts from the start),
 * with `opts` for the wait: its interrupted/arg/waker are used; its limit, conn and query must be
 * the start's (query may be NULL: the slot kept its text). Frees `pending`. Never
 * DBT_ACQ_QUEUED. */
dbt_acq_result dbt_acquire_wait_for(dbt_acquire_wait *pending, const dbt_acquire_opts *opts,
                                    dbt_permit **out);

/* Direct delivery (interpose/held.c): a queued acquire that no thread waits on yet may be
 * parked. Its wakes (a grant from Redis, the listener's role passed to it) are then told to a
 * watch's eventfd too (dbt_acquire_wait_notified says whether one came), which its waker writes
 * to instead, for one thread of the caller's to watch for all parked acquires; a permit that a
 * thread of this process gives back straight to it is first offered to claim(arg), in the releasing
 * thread, after the pool's lock is let go: true, and serve(arg) runs there at once (it finishes the
 * acquire with dbt_acquire_wait_for, which finds it granted) and no wake is written. So a command
 * held while only this process' threads wait is sent by the thread that freed its permit, with no
 * thread woken in between. The pair is set once per process, before the first park. */
typedef struct {
    /* ours: the calling thread is the library's own (the renewer, dispatching grants it heard),
     * not one of the program's. */
    bool (*claim)(void *arg, bool ours);
    void (*serve)(void *arg);
} dbt_deliver_ops;
void dbt_acquire_set_deliver(const dbt_deliver_ops *ops);

/* Parks `pending` for `arg` (see above), its wakes told to notify_fd and `waker` published to
 * it. False, and nothing done, when nobody can listen for its grant from Redis (no waiting thread
 * holds the pool's listener role, and the renewer cannot take it: Redis is down), or a wake
 * already came: a thread must wait for it (dbt_acquire_wait_for) as before. While waits are
 * parked and no thread waits, the renewer listens for them; Redis down, the role goes to a
 * parked waiter, which is woken so. */
bool dbt_acquire_wait_park(dbt_acquire_wait *pending, dbt_waker *waker, void *arg, int notify_fd);
/* Whether `pending` holds its permit already, fit to serve (a thread of the process passed it one
 * since it queued): dbt_acquire_wait_for then returns at once, with no Redis call. */
bool dbt_acquire_wait_granted(const dbt_acquire_wait *pending);
/* Whether a wake came for a parked acquire since it was parked (its wait is a thread's to run
 * now). */
bool dbt_acquire_wait_notified(const dbt_acquire_wait *pending);
/* When its wait ends without a permit (dbt_now_us's clock), -1: never. */
int64_t dbt_acquire_wait_deadline_us(const dbt_acquire_wait *pending);

/* After DBT_ACQ_QUEUE_FULL, on the same thread: the class that refused and its queue cap (true);
 * false when this thread's last acquire was not refused so. */
bool dbt_last_queue_full(char *klass, size_t cap, long long *queue_cap);

/* After DBT_ACQ_TIMEOUT, on the same thread: whether the wait its class set (acquire.lua's
 * reply: it replaces DBTHROTTLE_WAIT_TIMEOUT) ended it, and that wait (ms). */
bool dbt_last_class_wait(long long *wait_ms);
/* After a DBT_ACQ_TIMEOUT: whether the wait it ended was by the pool's live wait_timeout (as the
 * wait began, whatever the pool's value is now), else by the process' own. */
bool dbt_last_wait_live(void);

/* The units the permit takes (its weight, 1 for an untagged one). */
int dbt_permit_weight(const dbt_permit *permit);

/* Gives the permit back: one command whose reply is not waited for. NULL is ignored. In a child
 * process after fork(), a permit of the parent is only forgotten, never released. */
void dbt_release(dbt_permit *permit);

/* The permit's id ("<client id>.<serial>.<limit>", or "<client id>.<serial>.<class>.<weight>.
 * <limit>" for a permit of a class or a weight), as Redis and the trace know it. */
const char *dbt_permit_id(const dbt_permit *permit);

/* True when Redis may no longer have this permit: a renewal found it gone (Redis lost its data),
 * or no acquire or renewal that Redis accepted was sent for a whole lease, so Redis may have
 * reaped it and granted it to another (checked here against the clock, not only by the renewal
 * thread, which may itself be stuck); in closed mode, already once the time its running command
 * would be cancelled has passed (lapse.c). The holder must not count on it any more: give it back
 * and acquire again. The first time it is found, an error is logged. */
bool dbt_permit_lost(dbt_permit *permit);

/* Marks the permit as held by a connection that sits idle in a transaction (or not any more).
 * The renewer logs one warning when that lasts longer than DBTHROTTLE_IDLE_IN_TX_WARN. */
void dbt_permit_note_idle(dbt_permit *permit, bool idle);

/* Kept permits (DBTHROTTLE_CACHE_PERMITS). After a command, a connection may keep its permit for
 * its next one while nobody waits: dbt_permit_park returns true when it is kept, false when it
 * must be given back now (someone queued since it was granted, Redis is unreachable, or the lease
 * is in doubt): the caller then calls dbt_release. Before the next command, dbt_permit_unpark
 * takes it back for use: false when it was given back meanwhile (a waiter queued, or it sat
 * unused for DBTHROTTLE_CACHE_IDLE); it is then freed, *permit set to NULL, and the caller
 * acquires anew. A kept permit may also simply be released. */
bool dbt_permit_park(dbt_permit *permit);
bool dbt_permit_unpark(dbt_permit **permit);

/* Copies why the pool's Redis is misconfigured (the cause and the setting to fix) into out;
 * false, out "", when it is not. */
bool dbt_pool_misconfig(dbt_pool *p, char *out, size_t cap);

void dbt_pool_get_stats(dbt_pool *p, dbt_pool_stats *out);

/* A process that uses the pool without taking permits (DBTHROTTLE_DISABLE=on with a limit set)
 * still reports itself in the pool's registry, for dbthrottle status: this starts its heartbeat
 * (the pool's background thread, once a lease). No I/O here. */
void dbt_pool_announce(dbt_pool *p);

/* Why a wait for a permit of this pool may never have ended: this process, its parent or a
 * process of its process group on this host holds permits of the pool idle in a transaction (the
 * waiter may be the one they wait for: pg_dump -j, a pipeline of throttled programs). Writes a
 * sentence that names them and the fixes into out and returns true; false (out empty) when none
 * is known. Reads the registry in Redis (one command, within DBTHROTTLE_REDIS_TIMEOUT): call it
 * after a wait timed out, never on the way of a command that may proceed. */
bool dbt_pool_explain_wait(dbt_pool *p, char *out, size_t cap);

/* The program's connection `conn` ("c<N>") uses pool p from now on, with its application_name
 * and its server ("<server>/<database>"), until dbt_pool_conn_closed: dbthrottle clients lists
 * it, idle too, with what it does (docs/operations.md, "Clients"). */
void dbt_pool_conn_opened(dbt_pool *p, const char *conn, const char *app, const char *server);
void dbt_pool_conn_closed(dbt_pool *p, const char *conn);
/* Whether the connection is exempt (it takes no permit): dbthrottle clients says so, rather than
 * idle while it runs. */
void dbt_pool_conn_exempt(dbt_pool *p, const char *conn, bool exempt);

/* The pool's wait timeout: its live value (dbthrottle set, docs/design.md, "Live settings per
 * pool") when the operator set one, else `own`, the process' own. */
int64_t dbt_pool_wait_timeout_ms(dbt_pool *p, int64_t own, bool *live);
/* The version of the pool's live settings the process applied (0: none): a connection decides
 * again what it decided by them (its exemption) when it changed. Without a lock. */
long long dbt_pool_live_applied(dbt_pool *p);
/* Waits (once per pool, at most a Redis timeout) for the process' first report of the pool, which
 * brings its live settings: a connection's first command decides its exemption, class, wait and
 * outage mode by them, not by the process' own alone (a one-shot psql -c never had a second
 * command). Starts the pool's background thread. Without a lock held. */
void dbt_pool_await_live(dbt_pool *p);
/* Whether the pool's live settings set the dbt_config field at offset `field` (offsetof), without
 * a lock: a command's path locks the pool for a live value only when there is one. */
bool dbt_pool_live_sets(dbt_pool *p, size_t field);
/* Whether the pool's permits of `kind` run in shadow mode now (the live mode, else the process'
 * own), and whether any kind does: without a lock, on any path. */
bool dbt_pool_shadow(dbt_pool *p, dbt_kind kind);
bool dbt_pool_any_shadow(dbt_pool *p);
/* Whether a connection with these values (application_name, user, database, as
 * dbt_exempt_match takes them) is exempt by the pool's live exempt: 1 (the pattern that matched
 * in rule), 0 not, -1 the live settings do not set exempt (the process' own rules decide). */
int dbt_pool_live_exempt(dbt_pool *p, const char *const values[3], char *rule, size_t cap);
/* The pool's live class_rules (weights false) or weights (true), matched against v: 1 when a
 * rule matched (its class into klass, DBT_CLASS_NAME_MAX + 1 bytes, or its weight into *weight),
 * 0 when none did, -1 when the live settings do not set them (the process' own decide). */
int dbt_pool_live_rule(dbt_pool *p, bool weights, const dbt_rule_values *v, char *klass,
                       int *weight);

/* Counts a command that ran without a permit, not through dbt_acquire: one inside a transaction
 * that began unthrottled (Redis unreachable, open mode), which must not queue mid-way. */
void dbt_pool_count_unthrottled(dbt_pool *p);

/* `dbthrottle evict --cancel`: when a renewal learns that the operator evicted a permit and asked
 * for its command's cancel, `cancel` is called (on the renewer's thread, no lock held) with the
 * connection id the permit was acquired for (dbt_acquire_opts.conn) and the event to log,
 * "evict_cancel". In closed mode, likewise with "lapse_cancel" when a running command's lease is
 * about to lapse unrenewed (lapse.c). Set once, process-wide. */
void dbt_on_evict_cancel(void (*cancel)(const char *conn, const char *event));
const dbt_keys *dbt_pool_keys(const dbt_pool *p);
const char *dbt_pool_name(const dbt_pool *p);

#endif
