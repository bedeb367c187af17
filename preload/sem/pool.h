/* pool.h - a pool's primitives (pool.c): locks, command connections, the outage backoff, slots,
 * wakers, deferred operations, and the notices by which a module tells those above it that they
 * have work (the renewer, the listener), naming none of them. Every other module of sem/ uses
 * them; they call no module of sem/ above them. */
#ifndef DBT_POOL_H
#define DBT_POOL_H

#include "log.h"
#include "pool_types.h"

/* A new connection to the pool's Redis (dbt_redis_connect) that the library may use: a server
 * that may evict the pool's keys or cannot run the scripts is refused (a permanent error, in
 * err); one whose INFO was refused is used, with a warning once per pool. Without p->mu. */
dbt_redis *dbt_pool_connect(dbt_pool *p, char *err);

/* The locks' kinds: p->mu's (adaptive, see pool.c), and a condition variable timed by
 * CLOCK_MONOTONIC. */
void dbt_pool_mutex_init(pthread_mutex_t *mu);
void dbt_cond_init_mono(pthread_cond_t *cv);
/* Waits on such a condition variable until dbt_now_us() reaches until_us (at once when it has). */
void dbt_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us);

/* Notices, each with p->mu held. Wakes the pool's background thread (the renewer) out of its
 * park or its listening: it has work. */
void dbt_pool_wake_bg(dbt_pool *p);
/* p->mu held. Whether the renewer can listen for parked waits (held.c's event-loop commands,
 * which no thread of ours waits on): it runs, and Redis is not known to be down (then a waiting
 * thread finds that out, and tells its command). */
bool dbt_pool_bg_may_lead(const dbt_pool *p);
/* Starts the background thread, or wakes it when its schedule changed: p->bg_start, which the
 * pool's maker set (client.c: the renewer's dbt_renewer_ensure); nothing when none was set. */
void dbt_pool_start_bg(dbt_pool *p);
/* A release was sent without waiting for its reply: the background thread reads it soon (at most
 * once per DRAIN_DELAY_US), so that one that failed is owed and sent again even if the process
 * goes idle and never uses that connection again. Without p->mu, unlike the other notices. */
void dbt_pool_drain_soon(dbt_pool *p);
/* The pool's slot moved to another cluster node (a MOVED), or its wake lists changed: whoever
 * leads (a waiting thread, or the renewer) connects its listener anew, to the node and lists of
 * now. */
void dbt_listener_moved(dbt_pool *p);
/* The pool shares with its host as group `group` (16 hex digits; NULL or "": no more). Its new
 * Redis ids use the cid "<G>~<client cid>" (dbt_pool_cid), and its listener pops both its own
 * wake list and the group's ("<wake prefix><G>", where Redis pushes the host's
 * "f<kind>:<ticket>"), plus, until the next change, the list of its previous cid (grants of the
 * places made under it). A change makes the leader send new BLPOPs (dbt_listener_moved), and the
 * renewer renew at once. */
void dbt_pool_set_group(dbt_pool *p, const char *group);
/* Redis may have lost its data, or the host's segment is let go: what Redis said of the queue
 * (local handover's sole verdicts, the host's while attached) is forgotten, and permits go
 * through Redis until it says so again (handover.c); what the host's shelf kept only because
 * the host was sole goes back. A fork()ed child forgets its own view only (handover.c). */
void dbt_pool_forget_verdicts(dbt_pool *p);

/* The cid of the pool's Redis ids ("<cid>.<serial>...") and of its wake list: the client's, or,
 * while the pool shares with its host (dbt_pool_set_group), "<G>~<client cid>".
 * With p->mu held; the text is valid until p->mu is released. */
const char *dbt_pool_cid(const dbt_pool *p);

/* Command connections: one round trip at a time each, never under p->mu. */
dbt_redis *dbt_pool_get_conn(dbt_pool *p, char *err);
void dbt_pool_put_conn(dbt_pool *p, dbt_redis *r);

/* The outage backoff: a failed Redis call makes acquires skip Redis for DBT_OUTAGE_BACKOFF_US
 * (logged once per outage); a call that succeeds ends the outage. A permanent error
 * (redis_errors.h) sets p->misconfig instead: logged at error level, again every minute while
 * it lasts; acquires are refused meanwhile (dbt_pool_misconfigured). A call sent after it was
 * noted that succeeds ends it too (dbt_pool_note_ok), but the last line logged is remembered: a
 * cause that only some calls meet comes and goes with them and is still logged once a minute,
 * its redis_fixed once per line. Without p->mu. */
void dbt_pool_note_error(dbt_pool *p, const char *what, const char *msg);
/* Whether this thread's last dbt_pool_note_error was for a permanent cause (cleared by
 * dbt_pool_thread_clear_failure, at the start of each acquire). */
bool dbt_pool_thread_failed_permanently(void);
void dbt_pool_thread_clear_failure(void);
/* A call sent at sent_us (dbt_now_us) succeeded: it ends an outage, and a permanent error noted
 * before it was sent. One sent before says nothing of the configuration since (a heartbeat in
 * flight while another thread's call met NOPERM): the error stands until the next call. */
void dbt_pool_note_ok(dbt_pool *p, int64_t sent_us);

/* Eras (docs/design.md, "Failover and data loss"), without p->mu. The run_id the process last
 * met the pool's state on, into out (41 bytes; "" none), for a script call's era arguments; and
 * the one a call that checked the era ran on (acquire, or a renewal of ids). */
void dbt_pool_era_prev(dbt_pool *p, char *out);
void dbt_pool_era_seen(dbt_pool *p, const char *run_id);
/* A reply said the semaphore of `kind` is in quarantine for `ms` more (why: "changed",
 * "restarted", "lost"): one warn line `quarantine` per quarantine met, and a renewal when it
 * ends (for the waiters: grants resume at its end, not a renewal period later). */
void dbt_pool_note_quarantine(dbt_pool *p, dbt_kind kind, long long ms, const char *why);
/* Renew at once (the pool reached another server; Sentinel announced a failover). */
void dbt_pool_renew_now(dbt_pool *p);

/* Whether a permanent error `why` found at `now` is logged, the one last logged being `last`
 * (at last_us): a new cause at once, the same one again once DBT_MISCONFIG_RELOG_US has passed. */
bool dbt_misconfig_log_due(const char *last, int64_t last_us, const char *why, int64_t now);

/* Whether an acquire starting at `now` is refused for a permanent error: true while p->misconfig
 * is set, but for one acquire every DBT_MISCONFIG_PROBE_US, which tries Redis. p->mu held. */
bool dbt_pool_misconfigured(dbt_pool *p, int64_t now);

/* Warn-level lines that an outage or a saturated pool could repeat once per command. */
typedef enum { DBT_WARN_UNTHROTTLED, DBT_WARN_REFUSED, DBT_WARN_TIMEOUT } dbt_warn_kind;
/* With p->mu held: whether a line of this kind is due now (the first of a stretch, then one per
 * DBT_WARN_EVERY_US); when it is, *quiet is how many were not logged since the last one. */
bool dbt_pool_warn_due(dbt_pool *p, dbt_warn_kind k, uint64_t *quiet);

void dbt_slot_wake(struct dbt_slot *s); /* call with p->mu held */
/* Until called again (NULL), a wake of s from this thread writes nothing: the thread runs s's
 * wait itself and looks at s once it is done. */
void dbt_slot_wake_self(struct dbt_slot *s);
/* A promised wake, without p->mu; `deliverable`: a fresh permit passed to s, which a parked
 * acquire may take in this thread (dbt_acquire_wait_park) instead. */
void dbt_slot_wake_later(struct dbt_slot *s, bool deliverable);

/* A listening thread's dispatch (the grants Redis pushed, the permits the host's segment passed):
 * from dbt_deliver_collect (p->mu held) to dbt_deliver_flush (without it), the wakes of parked
 * acquires that now hold a fresh permit are kept back, and the flush offers each to its parked
 * side in this thread (dbt_slot_wake_later) when the thread is the library's own (the renewer,
 * dbt_deliver_thread_is_ours): the command is sent here, with no thread woken for it. Otherwise,
 * and past the few it keeps, the wakes go as usual. */
void dbt_deliver_collect(dbt_pool *p);
void dbt_deliver_flush(void);
void dbt_deliver_thread_is_ours(void);  /* the calling thread runs no program code */
void dbt_free_slot(struct dbt_slot *s); /* an unlinked slot, without p->mu */
/* An unlinked slot nobody uses any more goes to p->spare when it can (p->mu held); false: the
 * caller frees it with dbt_free_slot, without the lock. */
bool dbt_recycle_slot(dbt_pool *p, struct dbt_slot *s);
/* An unlinked slot kept for a later acquire (with its eventfd: making and closing one per command
 * costs two system calls on every command's path), else freed. Without p->mu. */
void dbt_retire_slot(dbt_pool *p, struct dbt_slot *s);
void dbt_free_spares(dbt_pool *p); /* p->mu held, or no other thread (fork, free) */

/* Marks held slot s lost (Redis may have given its permit to another): counted and logged once,
 * with why. p->mu held. */
void dbt_slot_mark_lost(dbt_pool *p, struct dbt_slot *s, dbt_log_level lvl, const char *reason);
/* s's lease clock at `now`, as the pool's decisions read it (pool_core.h). p->mu held. */
dbt_lease_facts dbt_slot_lease(const dbt_pool *p, const struct dbt_slot *s, int64_t now);
/* Marks s lost if no renewal was accepted for a whole lease (logs it once, saying whether this
 * process was stopped or Redis failed its renewals). p->mu held. */
bool dbt_slot_expire_unrenewed(dbt_pool *p, struct dbt_slot *s, int64_t now);
/* Why s has not been renewed lately, into why[cap]. The renewer renews every lease/3 and gives up
 * a renewal after DBTHROTTLE_REDIS_TIMEOUT: if it ran far later than it planned since s's last
 * renewal (renewer.c, note_ran), this process was stopped or not scheduled, and Redis, which may
 * have been up all along, is not to blame; if renewals failed in time, Redis is. False when
 * neither can be told (it names both). p->mu held. */
bool dbt_slot_unrenewed_cause(const dbt_pool *p, const struct dbt_slot *s, int64_t now, char *why,
                              size_t cap);
/* How late the renewer may run, beyond which it was stalled (this process stopped or not
 * scheduled): the longer of a renewal period and a Redis call's timeout, and a margin. */
#define DBT_STALL_SLACK_US INT64_C(250000)
int64_t dbt_renewer_late_us(const dbt_pool *p);

/* Publishes s's eventfd in the caller's waker while it waits; after dbt_waker_retract no firer
 * can write to it any more (it may be closed). */
void dbt_waker_publish(struct dbt_slot *s, dbt_waker *w);
/* The same, the firer writing to fd (a parked acquire's watch) rather than s's eventfd. */
void dbt_waker_publish_fd(struct dbt_slot *s, dbt_waker *w, int fd);
void dbt_waker_retract(struct dbt_slot *s);

/* Reads the replies of releases sent on idle connections, so a failed one is repaired (a
 * NOSCRIPT after SCRIPT FLUSH) or owed again (an error reply: OOM, BUSY; a reset: dbt_defer_op)
 * soon, rather than at the connection's next use, which may never come. An error reply from a
 * Redis that answers is no outage: acquires go on, and the release is sent again at once. Each
 * wait within the caller's budget. Called with p->mu held; releases it meanwhile. */
void dbt_pool_drain_idle(dbt_pool *p);

/* Closes the free connections the host's relay made outdated (dbt_redis_outdated: made before
 * it came, or before it stalled or ended) now rather than at their next use, which may be far
 * off: each holds one of Redis' connections. Those with replies owed are left to
 * dbt_pool_drain_idle. Called with p->mu held (the renewer's each renewal); releases it
 * meanwhile. */
void dbt_pool_close_outdated(dbt_pool *p);

/* What holder s does now, as a renewal tells Redis (dbt_format_doing's letter): kept, idle in a
 * transaction or running a command; a connection permit's is DBT_DOING_UNCHANGED. p->mu held. */
char dbt_slot_doing(const struct dbt_slot *s);
/* s became held at now: by a grant of Redis (which wrote its entry as running, by this holder),
 * or passed without Redis (its entry names the holder before: not known). p->mu held. */
void dbt_slot_doing_begin(struct dbt_slot *s, bool granted_by_redis, int64_t now);
/* A hold of ours of kind `kind` (class tag klass) that ended without Redis (the permit passed to
 * another thread or process, or taken off the host's shelf), for the hold histogram: the next
 * renewal reports it (pool.unreported_holds). p->mu held. */
void dbt_pool_note_hold(dbt_pool *p, dbt_kind kind, const char *klass, int64_t held_ms);
/* The same for s, kept on the host's shelf and taken by another process of the host: its hold
 * ended when it was kept there. p->mu held. */
void dbt_pool_note_kept_hold(dbt_pool *p, const struct dbt_slot *s);

/* How long a holder's doing must last, differing from what Redis shows, to be sent before the
 * next renewal: a state that lasts is shown within about this (status' STATE, its idle-in-
 * transaction count, a permit's holder after a pass), a blip costs nothing. */
#define DBT_DOING_REPORT_US INT64_C(1000000)
/* Something the process reports changed (its connections): the renewer, if it sleeps past
 * DBT_DOING_REPORT_US, looks again. p->mu held. */
void dbt_pool_report_soon(dbt_pool *p);

/* The tag a release (or cancel) sent without waiting carries (dbt_pool_send): if its reply says
 * it failed, dbt_pool_put_conn makes it owed (dbt_defer_op). tag: DBT_REDIS_TAG_LEN bytes. */
void dbt_op_tag(char *tag, dbt_owed_what what, dbt_kind kind, const char *id);

/* A release (or a cancel) Redis could not be told of, kept (DBT_MAX_DEFERRED at most) for the
 * renewer to send once Redis answers. Without p->mu. */
void dbt_defer_op(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id, int64_t held_ms);
/* The same, with p->mu held. */
void dbt_defer_op_held(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id,
                       int64_t held_ms);

#endif
