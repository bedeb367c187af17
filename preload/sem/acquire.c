/* acquire.c - dbt_acquire: take a permit at once, or queue and wait for one (as a waiting thread
 * or as the listener), or give up (deadline, signal, Redis gone). */
#include "clock.h"
#include "handover.h"
#include "lease.h"
#include "listener.h"
#include "log.h"
#include "pool.h"
#include "release.h"
#include "renewer.h"
#include "sample.h"
#include "script_call.h"
#include "sharing.h"
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

/* What an acquire returns while Redis is unreachable: counted apart (unthrottled in open mode,
 * refused in closed), and a warn-level line, the first of a stretch and then one summary per
 * DBT_WARN_EVERY_US, so that an outage is visible at the default level without flooding stderr.
 * Refused whatever the mode while the pool's Redis is misconfigured (a permanent error: it will
 * not pass; logged at error level by pool.c, once a minute). `seen_misconfigured`: the caller
 * found the pool misconfigured under an earlier hold of p->mu. It stands: the probing call of
 * another thread may have succeeded since and cleared p->misconfig (an ACL without BLPOP fails
 * only the waiters), and an acquire refused for the cause must not run unthrottled instead,
 * beside the prober's permit. */
static dbt_acq_result outage_result(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *o,
                                    const char *why, bool seen_misconfigured)
{
    uint64_t quiet = 0, total;
    /* Shadow mode refuses nothing: an outage runs the command as open mode does. */
    bool shadow = dbt_pool_shadow(p, kind);
    pthread_mutex_lock(&p->mu);
    dbt_outage_fate fate = dbt_core_outage(
        seen_misconfigured || p->misconfig[0] != '\0' || dbt_pool_thread_failed_permanently(),
        shadow || atomic_load(&p->on_redis_error) == DBT_ON_ERROR_OPEN);
    bool misconfigured = fate == DBT_OUTAGE_MISCONFIGURED;
    bool open = fate == DBT_OUTAGE_UNTHROTTLED;
    if (open) {
        p->st.unthrottled++;
        p->outage_unthrottled++;
        total = p->st.unthrottled;
    } else {
        p->st.refusals++;
        p->outage_refused++;
        total = p->st.refusals;
    }
    if (!misconfigured && dbt_sample_kept(p, kind)) /* ran with no permit, or refused */
        dbt_sample_missed(p, kind, dbt_now_us());
    bool due = !misconfigured &&
               dbt_pool_warn_due(p, open ? DBT_WARN_UNTHROTTLED : DBT_WARN_REFUSED, &quiet);
    pthread_mutex_unlock(&p->mu);
    if (due) {
        dbt_field f[] = {
            DBT_S("pool", p->name),     DBT_S("kind", dbt_kind_name(kind)),
            DBT_I("limit", o->limit),   DBT_S("conn", o->conn ? o->conn : "-"),
            DBT_S("reason", why),       DBT_S("mode", shadow ? "shadow" : open ? "open" : "closed"),
            DBT_I("not_logged", quiet), DBT_I("total", total)};
        dbt_log(DBT_LOG_WARN, open ? "unthrottled" : "refused", f, sizeof f / sizeof *f);
    } else if (misconfigured && dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_S("kind", dbt_kind_name(kind)),
                         DBT_I("limit", o->limit),
                         DBT_S("conn", o->conn ? o->conn : "-"),
                         DBT_S("reason", "redis misconfigured"),
                         DBT_S("mode", "misconfigured")};
        dbt_log(DBT_LOG_INFO, "refused", f, sizeof f / sizeof *f);
    }
    return misconfigured ? DBT_ACQ_MISCONFIGURED : open ? DBT_ACQ_UNTHROTTLED : DBT_ACQ_REFUSED;
}

/* A wait that ended without a permit at its deadline (or at once, for a caller that does not
 * wait): counted, its time added to the wait totals, and a warn-level line, rate-limited as
 * outage_result's (those not logged at warn are still traced at info). Without p->mu. */
static void note_timeout(dbt_pool *p, const struct dbt_slot *s, int64_t waited_us,
                         long long holders, long long queue, const char *why)
{
    uint64_t quiet = 0;
    pthread_mutex_lock(&p->mu);
    p->st.timeouts++;
    p->st.wait_total_us += waited_us;
    if (waited_us > p->st.wait_max_us)
        p->st.wait_max_us = waited_us;
    if (waited_us > p->stats_wait_max_us)
        p->stats_wait_max_us = waited_us;
    uint64_t total = p->st.timeouts;
    if (dbt_sample_kept(p, s->kind)) /* refused (enforced): a command the sample lacks */
        dbt_sample_missed(p, s->kind, dbt_now_us());
    bool due = dbt_pool_warn_due(p, DBT_WARN_TIMEOUT, &quiet);
    pthread_mutex_unlock(&p->mu);
    if (due) {
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_S("kind", dbt_kind_name(s->kind)),
                         DBT_S("permit", s->id),
                         DBT_MS("waited_ms", (double)waited_us / 1000.0),
                         DBT_I("limit", s->limit),
                         DBT_S("conn", s->conn[0] ? s->conn : "-"),
                         DBT_S("reason", why ? why : "DBTHROTTLE_WAIT_TIMEOUT reached"),
                         DBT_I("not_logged", quiet),
                         DBT_I("total", total)};
        dbt_log(DBT_LOG_WARN, "timeout", f, sizeof f / sizeof *f);
    } else {
        dbt_trace(DBT_LOG_INFO, "timeout", s, waited_us, -1, holders, queue, why ? "reason" : NULL,
                  why);
    }
}

/* The id's 5-part form names the class and the weight, which the scripts count units by; the
 * 3-part form (no class, weight 1) is what clients without classes send. With p->mu held (the
 * pool's cid). */
static void new_id(dbt_pool *p, struct dbt_slot *s)
{
    uint64_t n = atomic_fetch_add(&p->client->serial, 1) + 1;
    const char *cid = dbt_pool_cid(p);
    if (s->klass[0])
        snprintf(s->id, sizeof s->id, "%s.%" PRIu64 ".%s.%d.%d", cid, n, s->klass, s->weight,
                 s->limit);
    else
        snprintf(s->id, sizeof s->id, "%s.%" PRIu64 ".%d", cid, n, s->limit);
}

/* The calling thread's last refusal by a queue cap (dbt_last_queue_full). */
static __thread struct {
    bool set;
    char klass[33];
    long long cap;
} last_full;

/* The calling thread's last timeout: the class's wait that ended it (ms), -1 when it was
 * DBTHROTTLE_WAIT_TIMEOUT's (dbt_last_class_wait). */
static __thread long long last_class_wait_ms = -1;

/* Whether the last timeout of this thread's acquires ended a wait by the pool's live wait_timeout
 * (the slot's, as its wait began), for the caller's message. */
static __thread bool last_wait_live;

bool dbt_last_wait_live(void)
{
    return last_wait_live;
}

bool dbt_last_class_wait(long long *wait_ms)
{
    *wait_ms = last_class_wait_ms;
    return last_class_wait_ms >= 0;
}

bool dbt_last_queue_full(char *klass, size_t cap, long long *queue_cap)
{
    if (!last_full.set)
        return false;
    snprintf(klass, cap, "%s", last_full.klass);
    *queue_cap = last_full.cap;
    return true;
}

int dbt_permit_weight(const dbt_permit *permit)
{
    return permit ? permit->weight : 1;
}

static void link_slot(dbt_pool *p, struct dbt_slot *s)
{
    s->prev = NULL;
    s->next = p->slots;
    if (p->slots)
        p->slots->prev = s;
    p->slots = s;
}

static void note_disagreement(dbt_pool *p, const struct dbt_slot *s, long long seen)
{
    pthread_mutex_lock(&p->mu);
    bool first = !p->disagreement_logged[s->kind];
    p->disagreement_logged[s->kind] = true;
    pthread_mutex_unlock(&p->mu);
    if (first) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("kind", dbt_kind_name(s->kind)),
                         DBT_I("limit", s->limit), DBT_I("other_limit", seen),
                         DBT_S("effect", "each caller is admitted only below its own limit")};
        dbt_log(DBT_LOG_WARN, "limit_disagreement", f, sizeof f / sizeof *f);
    }
}

/* What sending acquire.lua came to. */
typedef enum {
    ACQ_SENT_FAILED,      /* Redis failed, or answered what acquire.lua does not */
    ACQ_SENT_GRANTED,     /* granted at once */
    ACQ_SENT_QUEUED,      /* in the queue (or took an orphan's place there: no call) */
    ACQ_SENT_NOT_GRANTED, /* none free, and the caller does not wait */
    ACQ_SENT_QUEUE_FULL,  /* refused: its class's queue cap is reached */
    ACQ_SENT_EXITING,     /* not sent: the process is exiting (dbt_client_exit) */
    ACQ_SENT_SHELF        /* not sent: a permit kept on the host's shelf was taken */
} acq_sent;

/* Sends acquire.lua for s. */
static acq_sent send_acquire_io(dbt_pool *p, struct dbt_slot *s, int64_t lease_ms, bool try_only,
                                bool shadow, long long *holders, long long *queue,
                                long long *ticket, long long *class_wait_ms,
                                dbt_acquire_would *would)
{
    char err[DBT_ERRLEN], who[DBT_WHO_LEN];
    dbt_format_who(p->client->host, (long)getpid(), s->conn, who, sizeof who);
    dbt_acquire_call a = {.id = s->id,
                          .limit = s->limit,
                          .try_only = try_only,
                          .who = who,
                          .shipped_classes = p->client->cfg->classes,
                          .session = s->session,
                          .shadow = shadow};
    dbt_script_call call;
    dbt_build_acquire(&call, &p->keys, s->kind, p->client->cfg, &a);
    dbt_lease_bind(p, &call, lease_ms); /* the slot's belief until the reply: no longer */
    int64_t sent = dbt_now_us();
    dbt_acquire_reply reply;
    redisReply *rep = dbt_pool_run(p, "acquire", &call, dbt_parse_acquire, &reply, err);
    if (!rep)
        return ACQ_SENT_FAILED;
    freeReplyObject(rep);
    dbt_pool_note_ok(p, sent);
    dbt_pool_era_seen(p, call.era_token);
    if (reply.quarantine_ms > 0)
        dbt_pool_note_quarantine(p, s->kind, reply.quarantine_ms, reply.why);
    if (reply.limit_seen > 0 && reply.limit_seen != s->limit)
        note_disagreement(p, s, reply.limit_seen);
    *holders = reply.holders;
    *queue = reply.queue;
    *ticket = reply.ticket;
    *class_wait_ms = reply.class_wait_ms;
    *would = reply.would;
    if (reply.status == DBT_ACQUIRE_QUEUE_FULL) {
        last_full.set = true;
        snprintf(last_full.klass, sizeof last_full.klass, "%s",
                 reply.class_name[0] ? reply.class_name : (s->klass[0] ? s->klass : "-"));
        last_full.cap = reply.class_cap;
    }
    pthread_mutex_lock(&p->mu);
    dbt_lease_renewed(s, sent, call.lease_ms);
    s->class_wait_ms = reply.class_wait_ms;
    if (reply.status == DBT_ACQUIRE_QUEUED)
        dbt_handover_verdict(p, s->kind, s->id, (uint64_t)reply.ticket, reply.sole);
    pthread_mutex_unlock(&p->mu);
    switch (reply.status) {
    case DBT_ACQUIRE_GRANTED:
        return ACQ_SENT_GRANTED;
    case DBT_ACQUIRE_QUEUED:
        return ACQ_SENT_QUEUED;
    case DBT_ACQUIRE_QUEUE_FULL:
        return ACQ_SENT_QUEUE_FULL;
    case DBT_ACQUIRE_NOT_GRANTED:
        break;
    }
    return ACQ_SENT_NOT_GRANTED;
}

/* send_acquire_io within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together. */
static acq_sent send_acquire(dbt_pool *p, struct dbt_slot *s, int64_t lease_ms, bool try_only,
                             bool shadow, long long *holders, long long *queue, long long *ticket,
                             long long *class_wait_ms, dbt_acquire_would *would)
{
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    acq_sent r = send_acquire_io(p, s, lease_ms, try_only, shadow, holders, queue, ticket,
                                 class_wait_ms, would);
    dbt_redis_budget_end(b);
    return r;
}

/* Waits on the slot's eventfd until the deadline (-1: none), or a signal interrupts the wait
 * and opts say to stop. A slot registered in the host's segment also watches the process' wake
 * socket (share_fd >= 0), and takes what another process passed it itself: a pass wakes the
 * waiting thread, not the thread that listens for the process and then the waiter in turn (two
 * wake-ups in a row on every permit passed between processes). */
static dbt_wait_result wait_wake(dbt_pool *p, struct dbt_slot *s, int share_fd, int64_t deadline_us,
                                 const dbt_acquire_opts *o)
{
    for (;;) {
        int ms = -1;
        if (deadline_us >= 0) {
            int64_t left = deadline_us - dbt_now_us();
            if (left <= 0)
                return DBT_WAIT_TIMED_OUT;
            ms = (int)((left + 999) / 1000);
        }
        struct pollfd pfd[2] = {{.fd = s->efd, .events = POLLIN},
                                {.fd = share_fd, .events = POLLIN}};
        int n = poll(pfd, share_fd >= 0 ? 2 : 1, ms);
        if (n > 0 && share_fd >= 0 && pfd[1].revents) {
            dbt_slot_wake_self(s);
            dbt_handover_receive(p); /* the caller looks at its slot again */
            dbt_slot_wake_self(NULL);
            return DBT_WAIT_WOKEN;
        }
        if (n > 0) {
            uint64_t v;
            ssize_t rd = read(s->efd, &v, sizeof v);
            (void)rd;
            return DBT_WAIT_WOKEN;
        }
        if (n < 0 && errno == EINTR && o->interrupted && o->interrupted(o->arg))
            return DBT_WAIT_INTERRUPTED;
    }
}

/* The grant's trace line: "grant", or in shadow mode what enforcing would have done instead. */
static const char *grant_event(dbt_acquire_would would)
{
    switch (would) {
    case DBT_WOULD_WAIT:
        return "would_wait";
    case DBT_WOULD_REFUSE:
        return "would_refuse";
    case DBT_WOULD_RUN:
        break;
    }
    return "grant";
}

static dbt_acq_result finish_granted(dbt_pool *p, struct dbt_slot *s, dbt_permit **out,
                                     long long holders, long long queue, bool shadow,
                                     dbt_acquire_would would, dbt_sample_would line,
                                     int64_t queued_at_us)
{
    /* A thread that passed s its permit may still be offering it to s's parked side (claim,
     * dbt_slot_wake_later), which must find that side as it was: a few instructions away. */
    while (atomic_load(&s->pending_wakes) > 0)
        sched_yield();
    atomic_store(&s->deliver_arg, NULL); /* a permit now, parked for nobody */
    atomic_store(&s->notify_plus1, 0);
    pthread_mutex_lock(&p->mu);
    int64_t waited = s->t_grant_us - s->t_request_us;
    p->st.grants++;
    if (waited > 0 && s->t_grant_us > 0) {
        p->st.wait_total_us += waited;
        if (waited > p->st.wait_max_us)
            p->st.wait_max_us = waited;
        if (waited > p->stats_wait_max_us)
            p->stats_wait_max_us = waited;
    }
    pthread_mutex_unlock(&p->mu);
    dbt_sample_begin(p, s, shadow, s->t_request_us, queued_at_us,
                     s->t_grant_us > 0 ? s->t_grant_us : dbt_now_us(),
                     shadow ? (dbt_sample_would)would : line);
    dbt_waker_retract(s);
    dbt_trace(DBT_LOG_INFO, grant_event(would), s, waited, -1, holders, queue, NULL, NULL);
    *out = s;
    return DBT_ACQ_GRANTED;
}

/* One call of dbt_acquire, as its steps pass it on. */
typedef struct {
    dbt_pool *p;
    dbt_kind kind;
    const dbt_acquire_opts *o;
    struct dbt_slot *s;
    bool may_wait;
    int64_t start;
    int64_t deadline;         /* -1: none */
    long long holders, queue; /* what acquire.lua said, for the grant's trace; -1: not known */
    long long ticket;         /* acquire.lua's ticket (granted: the ticket counter then) */
    long long class_wait_ms;  /* the caller's class's wait, from acquire.lua; -1: none */
    bool shadow;              /* DBTHROTTLE_MODE=shadow in force at its last send: never waits */
    dbt_acquire_would would;  /* shadow: what enforcing would have done, from acquire.lua */
    bool queued;              /* it waited in a queue (Redis' or the host's), for the sample */
    int64_t queued_at_us;     /* when it first found itself queued (its acquire's reply read) */
    bool from_shelf;          /* its permit came off the host's shelf (no acquire.lua) */
    int64_t lease_ms;         /* the lease its acquire carries, as its slot believes (begin_slot) */
    /* Queued anew once already because the host's relay failed its call: a second failure is
     * Redis' (a relay whose link to Redis broke closes its clients: each call meets it twice). */
    bool relay_retried;
    /* The pool was found misconfigured under p->mu on this acquire's way (new_slot; a wait the
     * renewer ended as Redis refused its renewal for a permanent cause): the refusal stands in
     * outage_result, whatever another thread's success has cleared since. */
    bool seen_misconfigured;
    dbt_acq_result result; /* how it ended, once a step returns NEXT_DONE */
} acquire_run;

/* What a step says comes next. */
typedef enum {
    NEXT_SEND,    /* (again) take an id, or an orphan's place, and ask Redis */
    NEXT_WAIT,    /* queued: wait for the grant */
    NEXT_GRANTED, /* s holds a permit */
    NEXT_DONE     /* ended without a permit: see result */
} acquire_next;

static bool deadline_passed(const acquire_run *a)
{
    return a->deadline >= 0 && dbt_now_us() >= a->deadline;
}

/* Unlinks and frees a slot that ends without a permit. */
static void drop_slot(dbt_pool *p, struct dbt_slot *s)
{
    pthread_mutex_lock(&p->mu);
    dbt_unlink_slot(p, s);
    pthread_mutex_unlock(&p->mu);
    dbt_free_slot(s);
}

/* Why a wait of s timed out when its class's wait ended it (NULL: DBTHROTTLE_WAIT_TIMEOUT). */
static const char *class_wait_reason(const struct dbt_slot *s)
{
    return s->class_wait_ms >= 0 ? "the class's wait reached"
           : s->wait_live        ? "the pool's live wait_timeout reached (dbthrottle set)"
                                 : NULL;
}

/* The end without a permit: s is unlinked (if `linked`) and freed, and the outcome counted: a
 * timeout, or, with `outage` saying why, what an outage gives (see outage_result). Without p->mu
 * on entry and exit. */
static acquire_next give_up(acquire_run *a, bool linked, const char *outage,
                            const char *why_timeout)
{
    dbt_pool *p = a->p;
    if (!outage) {
        last_class_wait_ms = why_timeout ? -1 : a->s->class_wait_ms;
        last_wait_live = !why_timeout && a->s->wait_live;
        note_timeout(p, a->s, dbt_now_us() - a->start, a->holders, a->queue,
                     why_timeout ? why_timeout : class_wait_reason(a->s));
    }
    if (linked)
        drop_slot(p, a->s);
    else
        dbt_free_slot(a->s);
    a->result =
        outage ? outage_result(p, a->kind, a->o, outage, a->seen_misconfigured) : DBT_ACQ_TIMEOUT;
    return NEXT_DONE;
}

/* A grant that reached a waiter whose last accepted renewal is older than Q (a whole lease, or
 * while Redis may have restarted, waited for re-assertions and granted it again), or that a
 * renewal found gone from Redis (it expired before it was read): dbt_lease_stale. p->mu held. */
static bool stale_grant(const dbt_pool *p, const struct dbt_slot *s)
{
    dbt_lease_facts l = dbt_slot_lease(p, s, dbt_now_us());
    return dbt_lease_stale(&l);
}

/* Granted while this process could not renew (stopped, or cut off from Redis) for a whole lease:
 * Redis may have reaped the permit and granted it again. Gives it back so the caller queues anew
 * rather than run a command on a permit that may be gone, unless the deadline has passed
 * meanwhile. With p->mu on entry, without on exit. */
static acquire_next give_back_stale(acquire_run *a)
{
    dbt_pool *p = a->p;
    struct dbt_slot *s = a->s;
    dbt_unlink_slot(p, s);
    dbt_sharing_gave_back(p, s->kind, s->id, s->lost);
    bool renewal_said = s->lost; /* counted when the renewal found it gone */
    dbt_lease_facts l = dbt_slot_lease(p, s, dbt_now_us());
    bool gone = dbt_lease_gone(&l);
    if (!renewal_said && gone)
        p->st.leases_lost++;
    pthread_mutex_unlock(&p->mu);
    dbt_trace(DBT_LOG_WARN, "stale_grant", s, dbt_now_us() - s->t_request_us, -1, -1, -1, "reason",
              renewal_said ? "expired in Redis before it was read: queue again"
              : gone       ? "no renewal accepted for a whole lease: queue again"
                           : "no renewal accepted for longer than the quarantine (this process was "
                             "stopped or cut off): Redis may have granted it again; queue again");
    dbt_send_release(p, s->kind, s->id, -1); /* held by nobody: from its grant */
    if (deadline_passed(a))
        return give_up(a, false, NULL, NULL);
    return NEXT_SEND;
}

/* A slot for this call: a spare one, or a new one (with an eventfd if the caller may wait),
 * filled with what the call asks. NULL, with a->result set, when Redis is known to be
 * unreachable or the slot cannot be made. Without p->mu on entry and exit. */
static struct dbt_slot *new_slot(acquire_run *a)
{
    dbt_pool *p = a->p;
    const dbt_acquire_opts *o = a->o;
    struct dbt_slot *s = NULL;
    pthread_mutex_lock(&p->mu);
    /* Misconfigured: refused without a round trip, but for the one acquire that probes (which
     * tries Redis even within an outage's backoff). */
    bool probing = p->misconfig[0] != '\0';
    a->seen_misconfigured = dbt_pool_misconfigured(p, a->start);
    bool down = a->seen_misconfigured || (!probing && p->down_until_us > a->start);
    /* The renewer also reports the process (registry.c): from its first command on, even one
     * that Redis never answered. */
    if (!p->thread_started)
        dbt_renewer_ensure(p);
    bool attach = !down && dbt_sharing_attach_due(p, a->start);
    if (!down && p->spare) {
        s = p->spare;
        p->spare = s->next;
        s->next = NULL;
        p->nspare--;
    }
    pthread_mutex_unlock(&p->mu);
    if (down) {
        a->result = outage_result(p, a->kind, o, "redis unreachable (retrying within 1s)",
                                  a->seen_misconfigured);
        return NULL;
    }
    if (attach) /* host sharing (sharing.c): before the pool's first id is made */
        dbt_sharing_attach(p);

    if (!s && (s = calloc(1, sizeof *s)) != NULL)
        s->efd = -1;
    if (!s) {
        a->result = outage_result(p, a->kind, o, "out of memory", false);
        return NULL;
    }
    s->pool = p;
    s->kind = a->kind;
    s->limit = o->limit > 0 ? o->limit : 1;
    s->weight = o->weight > 1 ? o->weight : 1;
    s->class_wait_ms = -1;
    s->wait_live = o->wait_live;
    snprintf(s->klass, sizeof s->klass, "%s",
             o->klass && o->klass[0] ? o->klass
             : s->weight > 1         ? "-"
                                     : "");
    s->t_request_us = a->start;
    /* A copy: the slot outlives the caller's buffer (the release is traced too). Cut short, as
     * the log line has a bounded size; a failed copy only leaves the text out. */
    if (o->query)
        s->query = strndup(o->query, DBT_QUERY_TRACE_MAX);
    if (o->conn)
        snprintf(s->conn, sizeof s->conn, "%s", o->conn);
    if (o->session)
        snprintf(s->session, sizeof s->session, "%s", o->session);
    if (a->may_wait && s->efd < 0 && (s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        free(s->query);
        free(s);
        a->result = outage_result(p, a->kind, o, "cannot create an eventfd", false);
        return NULL;
    }
    dbt_waker_publish(s, o->waker);
    return s;
}

/* Gives s a new id, or the place of an orphan it adopts, and links it PENDING. Returns the orphan
 * for the caller to free (NULL: none, or recycled). Once the process exits (dbt_client_exit has
 * taken the list of places to withdraw), nothing is linked or sent: *exiting is set. Without p->mu
 * on entry and exit. */
static struct dbt_slot *begin_slot(acquire_run *a, bool *exiting)
{
    dbt_pool *p = a->p;
    struct dbt_slot *s = a->s;
    pthread_mutex_lock(&p->mu);
    /* A waiter whose place the exit withdrew learns it from a renewal ("Redis no longer had this
     * waiter") and would queue again, under a new id nobody withdraws: granted to nobody for a
     * lease, after the holder (seen in CI, 1 exit in 300 under load). */
    *exiting = p->exiting;
    if (*exiting) {
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    p->takes_permits = true;
    /* A permit the host keeps idle on its shelf (kept by this process or another): held at
     * once, no Redis call. */
    if (dbt_sharing_take_shelved(p, s)) {
        s->state = SLOT_HELD;
        s->lost = false;
        s->over_limit = false; /* (one over the limit is never shelved) */
        s->unrenewed = false;
        s->gen = p->gen;
        s->t_grant_us = dbt_now_us();
        dbt_slot_doing_begin(s, false, s->t_grant_us); /* its entry names the shelver */
        link_slot(p, s);
        p->nheld++;
        s->adopted = false;
        a->from_shelf = true;
        if (s->t_grant_us - s->t_renewed_us > s->lease_us / 3) {
            p->renew_now = true; /* renewed a while ago by its shelver: renewed now */
            dbt_pool_wake_bg(p);
        }
        dbt_renewer_ensure(p);
        pthread_mutex_unlock(&p->mu);
        return NULL;
    }
    /* While only this process' threads wait, take the place of one that was served by a
     * permit passed on here (handover.c) rather than queue anew: no Redis call. */
    struct dbt_slot *orphan = a->may_wait && !a->shadow ? dbt_handover_adopt(p, s) : NULL;
    if (orphan) {
        memcpy(s->id, orphan->id, sizeof s->id);
        s->named_round = orphan->named_round;
        dbt_lease_renewed(s, orphan->t_renewed_us, orphan->lease_us / 1000);
        s->class_wait_ms = orphan->class_wait_ms;
        if (dbt_recycle_slot(p, orphan))
            orphan = NULL; /* kept for a later acquire; else freed by the caller, unlocked */
        s->adopted = true;
    } else {
        dbt_sharing_group_ready(p);
        new_id(p, s);
        s->named_round = 0;
        /* Its lease clock from before the send (Redis' lease starts after it): a grant pushed
         * before the reply is read makes the slot HELD at once, and a lease clock still 0 (a new
         * or recycled slot) then read as unrenewed since boot: lapse.c cancelled its command
         * ("not renewed for <uptime> ms"), renewals left it out as over a lease old, and a local
         * handover passed the 0 on. The reply's send time replaces it (send_acquire_io). */
        a->lease_ms = dbt_lease_us(p) / 1000; /* the acquire carries the one the slot believes */
        dbt_lease_renewed(s, dbt_now_us(), a->lease_ms);
    }
    s->state = SLOT_PENDING;
    s->lost = false; /* a grant given back as stale is behind us */
    s->over_limit = false;
    s->unrenewed = false;
    s->to_shadow = false;
    s->share_got_us = 0;
    s->gen = p->gen;
    link_slot(p, s);
    pthread_mutex_unlock(&p->mu);
    return orphan;
}

/* begin_slot, then acquire.lua, unless s adopted an orphan's place (queued: as if acquire.lua had
 * said so). Without p->mu on entry and exit. */
static acq_sent send_or_adopt(acquire_run *a)
{
    a->holders = a->queue = -1;
    /* The pool's mode now: a wait sent again as the pool turned to shadow (live.c) runs at once. */
    a->shadow = dbt_pool_shadow(a->p, a->kind);
    bool exiting;
    struct dbt_slot *orphan = begin_slot(a, &exiting);
    if (exiting)
        return ACQ_SENT_EXITING;
    if (a->from_shelf)
        return ACQ_SENT_SHELF;
    if (a->s->adopted) {
        a->s->adopted = false;
        dbt_free_slot(orphan); /* NULL when recycled */
        /* the class's wait, as the place's acquire reply said it (see below) */
        if (a->s->class_wait_ms >= 0)
            a->deadline = a->start + a->s->class_wait_ms * 1000;
        return ACQ_SENT_QUEUED;
    }
    a->class_wait_ms = -1;
    acq_sent st = send_acquire(a->p, a->s, a->lease_ms, !a->may_wait, a->shadow, &a->holders,
                               &a->queue, &a->ticket, &a->class_wait_ms, &a->would);
    /* A class's wait replaces DBTHROTTLE_WAIT_TIMEOUT for its commands, counted from the
     * command's start as that one is. */
    if (st == ACQ_SENT_QUEUED && a->class_wait_ms >= 0)
        a->deadline = a->start + a->class_wait_ms * 1000;
    return st;
}

/* What acquire.lua's answer (or its absence) means for s: granted, queued, or the end. Without
 * p->mu on entry and exit. */
static acquire_next read_reply(acquire_run *a, acq_sent st)
{
    dbt_pool *p = a->p;
    struct dbt_slot *s = a->s;
    if (st == ACQ_SENT_EXITING) {
        /* Neither granted nor refused by Redis: the process ends, and its command with it. */
        dbt_trace(DBT_LOG_INFO, "interrupted", s, dbt_now_us() - s->t_request_us, -1, -1, -1,
                  "reason", "the process is exiting");
        dbt_free_slot(s);
        a->result = DBT_ACQ_INTERRUPTED;
        return NEXT_DONE;
    }
    if (st == ACQ_SENT_FAILED) {
        pthread_mutex_lock(&p->mu);
        bool granted = s->state == SLOT_HELD; /* the reply was lost, the grant was not */
        if (granted)
            dbt_renewer_ensure(p);
        pthread_mutex_unlock(&p->mu);
        if (granted)
            return NEXT_GRANTED;
        /* The reply was lost, not necessarily the command: Redis may hold a permit or a
         * place under this id that nobody would renew or give back before its lease ends. */
        dbt_defer_op(p, DBT_OWED_WITHDRAW, a->kind, s->id, -1);
        char err[DBT_ERRLEN];
        if (dbt_pool_take_relay_failure(err)) {
            if (!a->relay_retried && !deadline_passed(a)) {
                /* The host's relay failed, not Redis (its speaker stopped, or ended): queue
                 * anew, under a new id, directly or through the next speaker. */
                a->relay_retried = true;
                pthread_mutex_lock(&p->mu);
                dbt_unlink_slot(p, s);
                pthread_mutex_unlock(&p->mu);
                return NEXT_SEND;
            }
            /* Twice, or no time left: an outage, as a direct call's failure is (the backoff
             * refuses the next commands at once, the log and the counters say it). */
            dbt_pool_note_error(p, "acquire", err);
        }
        return give_up(a, true, "redis error", NULL);
    }
    if (st == ACQ_SENT_NOT_GRANTED) {
        return give_up(a, true, NULL, "none free and the caller does not wait");
    }
    if (st == ACQ_SENT_SHELF)
        return NEXT_GRANTED;
    if (st == ACQ_SENT_QUEUE_FULL) {
        /* Redis queued nothing: the slot just goes. Traced, and counted with the timeouts'
         * warn-level line's rate limit (a full queue is a burst of these). */
        note_timeout(p, s, dbt_now_us() - a->start, a->holders, a->queue,
                     "the class's queue cap of waiters is reached");
        drop_slot(p, s);
        a->result = DBT_ACQ_QUEUE_FULL;
        return NEXT_DONE;
    }
    pthread_mutex_lock(&p->mu);
    if (st == ACQ_SENT_GRANTED || s->state == SLOT_HELD) {
        /* Granted at once, or queued and granted before we read the reply. */
        if (s->state != SLOT_HELD) { /* else the listener set and counted it */
            s->state = SLOT_HELD;
            s->t_grant_us = dbt_now_us();
            dbt_slot_doing_begin(s, true, s->t_grant_us);
            p->nheld++;
            dbt_sharing_share_event(p, a->kind, s->id, &(dbt_shev){.type = DBT_SHEV_GRANTED});
        }
        s->over_limit = a->would != DBT_WOULD_RUN;
        if (stale_grant(p, s)) /* the reply took a whole lease to read (stopped?) */
            return give_back_stale(a);
        p->seen_any_grant = true;
        if (st == ACQ_SENT_QUEUED) {
            p->st.waits++;
            if (!a->queued)
                a->queued_at_us = dbt_now_us();
            a->queued = true;
        }
        /* Whether permits may be kept again (pool_core.c). */
        dbt_queue_event ev = {.type = DBT_QEV_GRANTED,
                              /* a shadow grant enforcing would not have made is not kept */
                              .from_queue = st == ACQ_SENT_QUEUED || a->would != DBT_WOULD_RUN,
                              .queue = a->queue,
                              .ticket = a->ticket > 0 ? (uint64_t)a->ticket : 0,
                              .now_us = dbt_now_us(),
                              .lease_us = dbt_lease_shortest_us(p, dbt_now_us())};
        (void)dbt_queue_step(&p->queue[a->kind], &ev);
        dbt_sharing_keep_event(p, a->kind, &ev);
        dbt_renewer_ensure(p);
        pthread_mutex_unlock(&p->mu);
        return NEXT_GRANTED;
    }
    s->state = SLOT_QUEUED;
    s->wakes_queued = atomic_load(&s->wakes); /* a park sees whether one came since */
    p->nqueued++;
    dbt_lw_push(p, s);
    p->st.waits++;
    if (!a->queued)
        a->queued_at_us = dbt_now_us();
    a->queued = true;
    dbt_queue_event queued = {.type = DBT_QEV_QUEUED};
    (void)dbt_queue_step(&p->queue[a->kind], &queued);
    dbt_sharing_keep_event(p, a->kind, &queued);
    /* Not woken if it listens: the thread hands it the role if it waits (wait_turn), and a
     * parked wait leaves it to the renewer (dbt_acquire_wait_park). */
    dbt_renewer_ensure(p);
    struct dbt_slot as_queued; /* its place may be swapped from now on (handover.c) */
    bool tracing = dbt_trace_enabled(p, DBT_LOG_INFO);
    if (tracing)
        dbt_trace_copy(&as_queued, s);
    pthread_mutex_unlock(&p->mu);
    if (tracing)
        dbt_trace(DBT_LOG_INFO, "wait", &as_queued, -1, -1, a->holders, a->queue, NULL, NULL);
    return NEXT_WAIT;
}

/* Waits in the queue, as the listener or on s's eventfd, until s is granted, Redis forgets it or
 * goes away, or the caller gives up (deadline, signal). Without p->mu on entry and exit. */
static acquire_next wait_turn_counted(acquire_run *a);

/* The waiting thread that watched the host's wake socket has left: another registered thread
 * that waits takes the role (woken to), or none is left to (the renewer watches for parked ones:
 * dbt_sharing_parked_registered). p->mu held. */
static void pass_share_watch(dbt_pool *p)
{
    if (p->share_watcher)
        return;
    for (struct dbt_slot *w = p->slots; w; w = w->next)
        if (w->share_reg && w->thread_waits && !w->orphan && w->state == SLOT_QUEUED) {
            dbt_slot_wake(w);
            return;
        }
}

static acquire_next wait_turn(acquire_run *a)
{
    dbt_pool *p = a->p;
    pthread_mutex_lock(&p->mu);
    p->nwait_threads++;
    a->s->thread_waits = true; /* until the slot leaves the queue: only this thread runs it */
    /* The renewer listens while waits are parked with nobody listening (renewer.c): the role is
     * a waiting thread's now. Not a wait that is over already (a parked command served by the
     * thread that passed it a permit, held.c): the renewer would stop listening for the others'
     * grants, once per command. */
    if (p->bg_leading && a->s->state == SLOT_QUEUED && !a->s->share_reg)
        dbt_pool_wake_bg(p);
    pthread_mutex_unlock(&p->mu);
    acquire_next next = wait_turn_counted(a);
    pthread_mutex_lock(&p->mu);
    p->nwait_threads--; /* (a->s may be freed: its thread_waits stays, it leaves the queue) */
    pass_share_watch(p);
    /* The last waiting thread leaves BLPOPs in flight that may pop the host's "f": the renewer
     * reads their replies (renewer.c, blpops_unread), unless it listens already. */
    if (p->nwait_threads == 0 && p->group[0] && p->blpop_in_flight > 0 && !p->leader_active)
        dbt_pool_wake_bg(p);
    pthread_mutex_unlock(&p->mu);
    return next;
}

static acquire_next wait_turn_counted(acquire_run *a)
{
    dbt_pool *p = a->p;
    struct dbt_slot *s = a->s;
    const dbt_acquire_opts *o = a->o;
    bool leader = false;
    dbt_wait_result w = DBT_WAIT_WOKEN;
    for (;;) {
        pthread_mutex_lock(&p->mu);
        dbt_slot_state now = s->state;
        if (now == SLOT_HELD || now == SLOT_REQUEUE || now == SLOT_DOWN || w != DBT_WAIT_WOKEN) {
            if (leader) {
                p->leader_active = false;
                if (now == SLOT_QUEUED) { /* we are leaving: no longer a candidate */
                    dbt_lw_remove(p, s);
                    s->state = SLOT_CANCELLING;
                }
                dbt_listener_pass(p);
            }
            leader = false;
        }
        if (now == SLOT_HELD && !leader && !p->leader_active)
            dbt_listener_pass(p); /* woken to lead, and served first (a local handover) */
        if (now == SLOT_HELD && !stale_grant(p, s)) {
            pthread_mutex_unlock(&p->mu);
            a->holders = a->queue = -1; /* the grant came by push: no counts */
            return NEXT_GRANTED;
        }
        if (now == SLOT_HELD)
            return give_back_stale(a);
        if (now == SLOT_REQUEUE || now == SLOT_DOWN) {
            a->seen_misconfigured |= s->down_misconfigured;
            if (!p->leader_active)
                dbt_listener_pass(p);
            dbt_unlink_slot(p, s);
            pthread_mutex_unlock(&p->mu);
            break;
        }
        if (w != DBT_WAIT_WOKEN) {
            /* Timed out or interrupted: a grant that races in from now on is cancel.lua's
             * to give back. */
            dbt_lw_remove(p, s);
            s->state = SLOT_CANCELLING;
            /* A leader that left may have handed its role to us as we gave up: pass it on,
             * or the remaining waiters would have nobody reading their grants. */
            if (!p->leader_active)
                dbt_listener_pass(p);
            if (w != DBT_WAIT_TIMED_OUT) {
                p->st.interrupts++;
                /* Its command never ran: one the sample lacks, as a refused one (note_timeout
                 * counts a timeout's). */
                if (dbt_sample_kept(p, s->kind))
                    dbt_sample_missed(p, s->kind, dbt_now_us());
            }
            pthread_mutex_unlock(&p->mu);
            if (w == DBT_WAIT_TIMED_OUT) {
                last_class_wait_ms = s->class_wait_ms;
                last_wait_live = s->wait_live;
                note_timeout(p, s, dbt_now_us() - s->t_request_us, -1, -1, class_wait_reason(s));
            } else
                dbt_trace(DBT_LOG_INFO, "interrupted", s, dbt_now_us() - s->t_request_us, -1, -1,
                          -1, NULL, NULL);
            dbt_cancel_in_redis(p, s);
            drop_slot(p, s);
            a->result = w == DBT_WAIT_TIMED_OUT ? DBT_ACQ_TIMEOUT : DBT_ACQ_INTERRUPTED;
            return NEXT_DONE;
        }
        if (!leader && !p->leader_active)
            p->leader_active = leader = true;
        /* One waiting thread watches the host's wake socket (see share_watcher). */
        int share_fd = !leader && s->share_reg && (!p->share_watcher || p->share_watcher == s)
                           ? dbt_sharing_fd(p)
                           : -1;
        if (share_fd >= 0) {
            p->share_watcher = s;
            p->share_threads_watch = true;
        }
        pthread_mutex_unlock(&p->mu);
        /* A signal that came before we sleep is honoured too, not only one that wakes us. */
        if (o->interrupted && o->interrupted(o->arg))
            w = DBT_WAIT_INTERRUPTED;
        else
            w = leader ? dbt_listen(p, s, a->deadline, o)
                       : wait_wake(p, s, share_fd, a->deadline, o);
        if (share_fd >= 0) {
            pthread_mutex_lock(&p->mu);
            if (p->share_watcher == s)
                p->share_watcher = NULL; /* taken again at the loop's top while s waits */
            pthread_mutex_unlock(&p->mu);
        }
    }
    if (s->state == SLOT_DOWN) {
        /* Its place may still be queued in Redis: left there, it would reach the head and be
         * granted to nobody for a whole lease. Withdrawn as soon as Redis answers. */
        dbt_defer_op(p, DBT_OWED_CANCEL, s->kind, s->id, -1);
        return give_up(a, false, "redis lost while waiting", NULL);
    }
    /* SLOT_REQUEUE: Redis forgot the waiter (restarted, or its lease ran out while Redis
     * was unreachable). Its place is gone; join the queue again under a new id. */
    dbt_trace(s->to_shadow ? DBT_LOG_INFO : DBT_LOG_WARN, "requeue", s,
              dbt_now_us() - s->t_request_us, -1, -1, -1, "reason",
              s->to_shadow   ? "the pool turned to shadow mode: sent again, to run at once"
              : s->unrenewed ? "no renewal of its place accepted for a whole lease: queue again"
                             : "Redis no longer had this waiter");
    if (deadline_passed(a))
        return give_up(a, false, NULL, NULL);
    return NEXT_SEND;
}

/* A wait registered in the host's segment that no thread of the program runs (parked): the
 * renewer must watch the wake socket for it again, if it left that to the waiting threads. */
static void watch_share_for_parked(acquire_run *a)
{
    dbt_pool *p = a->p;
    pthread_mutex_lock(&p->mu);
    dbt_sharing_parked_wait(p, a->s);
    pthread_mutex_unlock(&p->mu);
}

/* A queued acquire whose wait another thread runs (dbt_acquire_start). */
struct dbt_acquire_wait {
    acquire_run a;
};

/* Runs an acquire from step `next` to its end. With `park` set, a run that must wait stops
 * there instead: *park receives it (to be finished by dbt_acquire_wait_for) and the result is
 * DBT_ACQ_QUEUED; without memory for it, it waits here after all. */
static dbt_acq_result run(acquire_run *a, acquire_next next, dbt_permit **out,
                          dbt_acquire_wait **park)
{
    for (;;) {
        switch (next) {
        case NEXT_SEND:
            next = read_reply(a, send_or_adopt(a));
            break;
        case NEXT_WAIT:
            if (park && (*park = malloc(sizeof **park))) {
                (*park)->a = *a;
                watch_share_for_parked(a);
                return DBT_ACQ_QUEUED;
            }
            park = NULL;
            next = wait_turn(a);
            break;
        case NEXT_GRANTED:
            return finish_granted(a->p, a->s, out, a->holders, a->queue, a->shadow, a->would,
                                  a->queued       ? DBT_SAMPLE_QUEUED
                                  : a->from_shelf ? DBT_SAMPLE_LOCAL
                                                  : DBT_SAMPLE_AT_ONCE,
                                  a->queued ? a->queued_at_us : 0);
        case NEXT_DONE:
            return a->result;
        }
    }
}

static dbt_acq_result start(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *o, dbt_permit **out,
                            dbt_acquire_wait **park)
{
    *out = NULL;
    last_full.set = false;
    last_class_wait_ms = -1;
    last_wait_live = false;
    /* Attached: the host's segment, which the steps below lock under p->mu up to 4 times
     * (waiters, shelf, sole state), looked at now, before p->mu (hostshare.h). */
    dbt_sharing_precheck(p);
    acquire_run a = {.p = p, .kind = kind, .o = o, .may_wait = o->wait_ms != 0};
    a.start = dbt_now_us();
    dbt_pool_thread_clear_failure();
    a.deadline = o->wait_ms < 0 ? -1 : a.start + o->wait_ms * 1000;
    dbt_acq_result r = (a.s = new_slot(&a)) ? run(&a, NEXT_SEND, out, park) : a.result;
    dbt_sharing_precheck_end();
    return r;
}

dbt_acq_result dbt_acquire(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *o, dbt_permit **out)
{
    return start(p, kind, o, out, NULL);
}

dbt_acq_result dbt_acquire_start(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *o,
                                 dbt_permit **out, dbt_acquire_wait **pending)
{
    *pending = NULL;
    return start(p, kind, o, out, pending);
}

bool dbt_acquire_wait_park(dbt_acquire_wait *w, dbt_waker *waker, void *arg, int notify_fd)
{
    dbt_pool *p = w->a.p;
    struct dbt_slot *s = w->a.s;
    pthread_mutex_lock(&p->mu);
    /* Somebody listens for s's grant: a waiting thread, or the renewer, which listens while
     * waits are parked and no thread waits (renewer.c, waits_unheard); and nothing came for s
     * yet: a wake from before this was told to nobody but its eventfd. */
    bool thread_leads = p->leader_active && !p->bg_leading;
    bool ok = (thread_leads || dbt_pool_bg_may_lead(p)) && s->state == SLOT_QUEUED &&
              atomic_load(&s->wakes) == s->wakes_queued;
    /* The renewer is not listening yet, or only reads the replies of old BLPOPs: it leads now. */
    if (ok && !thread_leads && !(p->bg_leading && !p->bg_reads_only))
        dbt_pool_wake_bg(p);
    if (ok) {
        dbt_waker_publish_fd(s, waker, notify_fd);
        atomic_store(&s->deliver_arg, arg);
        atomic_store(&s->notified, 0);
        atomic_store(&s->notify_plus1, notify_fd + 1);
    }
    pthread_mutex_unlock(&p->mu);
    return ok;
}

bool dbt_acquire_wait_granted(const dbt_acquire_wait *w)
{
    dbt_pool *p = w->a.p;
    pthread_mutex_lock(&p->mu);
    bool granted = w->a.s->state == SLOT_HELD && !stale_grant(p, w->a.s);
    pthread_mutex_unlock(&p->mu);
    return granted;
}

bool dbt_acquire_wait_notified(const dbt_acquire_wait *w)
{
    return atomic_load(&w->a.s->notified) > 0;
}

int64_t dbt_acquire_wait_deadline_us(const dbt_acquire_wait *w)
{
    return w->a.deadline;
}

dbt_acq_result dbt_acquire_wait_for(dbt_acquire_wait *w, const dbt_acquire_opts *o,
                                    dbt_permit **out)
{
    *out = NULL;
    acquire_run a = w->a;
    free(w);
    a.o = o; /* the waiter's own: its signal test and waker; the limit and ids are the same */
    last_class_wait_ms = -1;
    last_wait_live = false;
    atomic_store(&a.s->notify_plus1, 0); /* waited for by this thread now, not the watch */
    dbt_waker_publish(a.s, o->waker);
    dbt_pool_thread_clear_failure();
    return run(&a, NEXT_WAIT, out, NULL);
}
