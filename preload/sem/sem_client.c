/* sem_client.c - acquire, wait, release: the caller's side of the distributed semaphore. */
#include "log.h"
#include "pool_internal.h"
#include "script_call.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

/* ---- client and pools ---------------------------------------------------------------- */

dbt_client *dbt_client_new(const dbt_config *cfg)
{
    dbt_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cfg = cfg;
    dbt_new_client_id(c->cid);
    /* No lookup: the kernel's name for this host. A name with a blank would break the one-line
     * record status reads, so blanks become '_'. */
    if (gethostname(c->host, sizeof c->host - 1) != 0 || !c->host[0])
        snprintf(c->host, sizeof c->host, "?");
    for (char *h = c->host; *h; h++)
        if (*h == ' ' || (unsigned char)*h < 0x20)
            *h = '_';
    atomic_init(&c->serial, 0);
    pthread_mutex_init(&c->mu, NULL);
    dbt_fork_register(c);
    return c;
}

const char *dbt_client_id(const dbt_client *c)
{
    return c->cid;
}

dbt_pool *dbt_client_pool(dbt_client *c, const char *name)
{
    pthread_mutex_lock(&c->mu);
    dbt_pool *p;
    for (p = c->pools; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            break;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (p && (p->name = strdup(name)) != NULL &&
            dbt_keys_init(&p->keys, c->cfg->key_prefix, name)) {
            p->client = c;
            dbt_pool_mutex_init(&p->mu);
            pthread_cond_init(&p->conn_cv, NULL);
            dbt_cond_init_mono(&p->bg_cv);
            p->next = c->pools;
            c->pools = p;
        } else if (p) {
            free(p->name);
            free(p);
            p = NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return p;
}

const dbt_keys *dbt_pool_keys(const dbt_pool *p)
{
    return &p->keys;
}

const char *dbt_pool_name(const dbt_pool *p)
{
    return p->name;
}

void dbt_pool_get_stats(dbt_pool *p, dbt_pool_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

/* ---- command connections --------------------------------------------------------------- */

dbt_redis *dbt_pool_get_conn(dbt_pool *p, char *err)
{
    pthread_mutex_lock(&p->mu);
    for (;;) {
        while (p->nfree == 0 && p->nconns >= DBT_MAX_CONNS)
            pthread_cond_wait(&p->conn_cv, &p->mu);
        if (p->nfree == 0)
            break;
        dbt_redis *r = p->free_conns[--p->nfree];
        pthread_mutex_unlock(&p->mu);
        /* An idle connection that Redis closed (a restart) is replaced here, before a command
         * fails on it and the pool takes a healthy Redis for an outage. */
        if (!dbt_redis_stale(r))
            return r;
        dbt_pool_put_conn(p, r); /* broken now: freed */
        pthread_mutex_lock(&p->mu);
    }
    p->nconns++;
    pthread_mutex_unlock(&p->mu);

    dbt_redis *r = dbt_redis_connect(p->client->cfg, err);

    pthread_mutex_lock(&p->mu);
    if (r) {
        for (int i = 0; i < DBT_MAX_CONNS; i++)
            if (!p->all_conns[i]) {
                p->all_conns[i] = r;
                break;
            }
    } else {
        p->nconns--;
        pthread_cond_signal(&p->conn_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

void dbt_pool_put_conn(dbt_pool *p, dbt_redis *r)
{
    if (!r)
        return;
    bool drop = dbt_redis_broken(r);
    pthread_mutex_lock(&p->mu);
    if (drop) {
        for (int i = 0; i < DBT_MAX_CONNS; i++)
            if (p->all_conns[i] == r)
                p->all_conns[i] = NULL;
        p->nconns--;
    } else {
        p->free_conns[p->nfree++] = r;
    }
    pthread_cond_signal(&p->conn_cv);
    pthread_mutex_unlock(&p->mu);
    if (drop)
        dbt_redis_free(r);
}

/* ---- outages ----------------------------------------------------------------------------- */

void dbt_pool_note_error(dbt_pool *p, const char *what, const char *msg)
{
    const dbt_config *cfg = p->client->cfg;
    pthread_mutex_lock(&p->mu);
    p->st.redis_errors++;
    p->down_until_us = dbt_now_us() + DBT_OUTAGE_BACKOFF_US;
    bool first = !p->in_outage;
    p->in_outage = true;
    pthread_mutex_unlock(&p->mu);
    /* Once per outage: a dead Redis must not flood the host program's stderr. */
    if (first) {
        bool open = cfg->on_redis_error == DBT_ON_ERROR_OPEN;
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_S("during", what),
                         DBT_S("error", msg),
                         DBT_S("redis", cfg->redis_url_redacted),
                         DBT_S("mode", open ? "open" : "closed"),
                         DBT_S("effect", open ? "running unthrottled until Redis is back"
                                              : "refusing commands until Redis is back")};
        dbt_log(open ? DBT_LOG_WARN : DBT_LOG_ERROR, "redis_error", f, sizeof f / sizeof *f);
    } else if (dbt_log_enabled(DBT_LOG_DEBUG)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("during", what), DBT_S("error", msg)};
        dbt_log(DBT_LOG_DEBUG, "redis_error", f, 3);
    }
}

void dbt_pool_note_ok(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    bool was = p->in_outage;
    p->in_outage = false;
    p->down_until_us = 0;
    pthread_mutex_unlock(&p->mu);
    if (was) {
        dbt_field f[] = {DBT_S("pool", p->name)};
        dbt_log(DBT_LOG_WARN, "redis_back", f, 1);
    }
}

/* What an acquire returns while Redis is unreachable, traced at info level (the outage itself
 * was logged once as a warning or an error). */
static dbt_acq_result outage_result(const dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *o,
                                    const char *why)
{
    bool open = p->client->cfg->on_redis_error == DBT_ON_ERROR_OPEN;
    if (dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("pool", p->name),   DBT_S("kind", dbt_kind_name(kind)),
                         DBT_I("limit", o->limit), DBT_S("conn", o->conn ? o->conn : "-"),
                         DBT_S("reason", why),     DBT_S("mode", open ? "open" : "closed")};
        dbt_log(DBT_LOG_INFO, open ? "unthrottled" : "refused", f, sizeof f / sizeof *f);
    }
    return open ? DBT_ACQ_UNTHROTTLED : DBT_ACQ_REFUSED;
}

/* ---- slots ------------------------------------------------------------------------------- */

void dbt_slot_wake(struct dbt_slot *s)
{
    if (s->efd >= 0) {
        uint64_t one = 1;
        ssize_t n;
        do
            n = write(s->efd, &one, sizeof one);
        while (n < 0 && errno == EINTR);
    }
}

static void new_id(dbt_pool *p, struct dbt_slot *s)
{
    uint64_t n = atomic_fetch_add(&p->client->serial, 1) + 1;
    snprintf(s->id, sizeof s->id, "%s.%" PRIu64 ".%d", p->client->cid, n, s->limit);
}

static void link_slot(dbt_pool *p, struct dbt_slot *s)
{
    s->prev = NULL;
    s->next = p->slots;
    if (p->slots)
        p->slots->prev = s;
    p->slots = s;
}

void dbt_unlink_slot(dbt_pool *p, struct dbt_slot *s)
{
    dbt_lw_remove(p, s);
    if (s->orphan) {
        s->orphan = false;
        p->norphans--;
    }
    if (s->prev)
        s->prev->next = s->next;
    else if (p->slots == s)
        p->slots = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    if (s->state == SLOT_QUEUED || s->state == SLOT_CANCELLING)
        p->nqueued--;
    else if (s->state == SLOT_HELD)
        p->nheld--;
}

/* ---- wakers ----------------------------------------------------------------------------- */

void dbt_waker_fire(dbt_waker *w)
{
    atomic_fetch_add(&w->users, 1);
    int fd = atomic_load(&w->efd_plus1) - 1;
    if (fd >= 0) {
        int saved = errno; /* a signal handler must leave errno as it found it */
        uint64_t one = 1;
        ssize_t n = write(fd, &one, sizeof one);
        (void)n; /* EAGAIN: the counter is already non-zero, the waiter wakes anyway */
        errno = saved;
    }
    atomic_fetch_sub(&w->users, 1);
}

static void waker_publish(struct dbt_slot *s, dbt_waker *w)
{
    if (w && s->efd >= 0) {
        s->waker = w;
        atomic_store(&w->efd_plus1, s->efd + 1);
    }
}

/* After this, no firer can write to s->efd: it may be closed. */
static void waker_retract(struct dbt_slot *s)
{
    if (!s->waker)
        return;
    atomic_store(&s->waker->efd_plus1, 0);
    while (atomic_load(&s->waker->users) > 0)
        sched_yield(); /* a firer is between its load and its write: a few instructions */
    s->waker = NULL;
}

void dbt_slot_mark_lost(dbt_pool *p, struct dbt_slot *s, dbt_log_level lvl, const char *reason)
{
    s->lost = true;
    p->st.leases_lost++;
    dbt_field f[] = {DBT_S("pool", p->name), DBT_S("kind", dbt_kind_name(s->kind)),
                     DBT_S("permit", s->id), DBT_S("conn", s->conn[0] ? s->conn : "-"),
                     DBT_S("reason", reason)};
    dbt_log(lvl, "lease_lost", f, sizeof f / sizeof *f);
}

bool dbt_slot_expire_unrenewed(dbt_pool *p, struct dbt_slot *s, int64_t now)
{
    if (s->state != SLOT_HELD || s->lost)
        return s->lost;
    if (now - s->t_renewed_us <= p->client->cfg->lease_ms * 1000)
        return false;
    dbt_slot_mark_lost(p, s, DBT_LOG_ERROR, "not renewed for a whole lease: Redis unreachable");
    return true;
}

#define MAX_SPARE 64

bool dbt_recycle_slot(dbt_pool *p, struct dbt_slot *s)
{
    /* A slot with a wake promised to it is not reused: that write must find it as it was. No
     * new one can be promised: only waiting slots get them, and nothing refers to s any more. */
    if (s->efd < 0 || s->waker || p->nspare >= MAX_SPARE || atomic_load(&s->pending_wakes) > 0)
        return false;
    int efd = s->efd;
    free(s->query);
    memset(s, 0, sizeof *s);
    s->efd = efd; /* a wake left counted in it only makes a later wait look once more */
    s->next = p->spare;
    p->spare = s;
    p->nspare++;
    return true;
}

void dbt_free_spares(dbt_pool *p)
{
    while (p->spare) {
        struct dbt_slot *s = p->spare;
        p->spare = s->next;
        close(s->efd);
        free(s);
    }
    p->nspare = 0;
}

void dbt_slot_wake_later(struct dbt_slot *s)
{
    dbt_slot_wake(s);
    atomic_fetch_sub(&s->pending_wakes, 1);
}

void dbt_free_slot(struct dbt_slot *s)
{
    if (!s)
        return;
    /* A thread that passed this slot a permit may not have written to its eventfd yet: a few
     * instructions away (the owner can see the grant before the wake). */
    while (atomic_load(&s->pending_wakes) > 0)
        sched_yield();
    waker_retract(s);
    if (s->efd >= 0)
        close(s->efd);
    free(s->query);
    free(s);
}

/* ---- tracing --------------------------------------------------------------------------- */

/* What the trace says of a slot, copied (not its links, nor its atomics, which another thread may
 * be changing): for a trace made once the slot is no longer ours to read. p->mu held. */
static void trace_copy(struct dbt_slot *to, const struct dbt_slot *s)
{
    memset(to, 0, sizeof *to);
    to->pool = s->pool;
    to->kind = s->kind;
    to->limit = s->limit;
    to->lost = s->lost;
    memcpy(to->id, s->id, sizeof to->id);
    memcpy(to->conn, s->conn, sizeof to->conn);
    to->query = s->query;
    to->t_grant_us = s->t_grant_us;
}

static void trace(dbt_log_level lvl, const char *event, const struct dbt_slot *s, int64_t waited_us,
                  int64_t held_us, long long holders, long long queue, const char *extra_key,
                  const char *extra)
{
    if (!dbt_log_enabled(lvl))
        return;
    dbt_field f[12];
    size_t n = 0;
    f[n++] = DBT_S("pool", s->pool->name);
    f[n++] = DBT_S("kind", dbt_kind_name(s->kind));
    f[n++] = DBT_S("permit", s->id);
    if (waited_us >= 0)
        f[n++] = DBT_MS("waited_ms", (double)waited_us / 1000.0);
    if (held_us >= 0)
        f[n++] = DBT_MS("held_ms", (double)held_us / 1000.0);
    if (holders >= 0)
        f[n++] = DBT_I("holders", holders);
    f[n++] = DBT_I("limit", s->limit);
    if (queue >= 0)
        f[n++] = DBT_I("queue", queue);
    f[n++] = DBT_S("conn", s->conn[0] ? s->conn : "-");
    if (s->query)
        f[n++] = DBT_S("query", s->query);
    if (extra_key)
        f[n++] = DBT_S(extra_key, extra);
    dbt_log(lvl, event, f, n);
}

/* ---- acquire ----------------------------------------------------------------------------- */

/* Withdraws a waiter that gave up. Runs cancel.lua synchronously: if a grant raced with the
 * withdrawal, the script gives that permit back and passes it on, so nothing is lost. */
/* Sends cancel.lua for id: true when Redis answered (*returned: it had granted it meanwhile,
 * and passed it on). */
static bool cancel_id(dbt_pool *p, dbt_kind kind, const char *id, bool *returned)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    dbt_build_cancel(&call, &p->keys, kind, p->client->cfg, id);
    dbt_cancel_outcome outcome;
    redisReply *rep = dbt_pool_run(p, "cancel", &call, dbt_parse_cancel, &outcome, err);
    if (!rep)
        return false;
    *returned = outcome == DBT_CANCEL_RETURNED;
    freeReplyObject(rep);
    return true;
}

static void defer_op(dbt_pool *p, bool cancel, dbt_kind kind, const char *id);

/* cancel.lua for id within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together, or kept and sent
 * when Redis answers again. True when Redis had granted it meanwhile (and passed it on). */
static bool cancel_or_defer(dbt_pool *p, dbt_kind kind, const char *id)
{
    bool returned = false;
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    if (!cancel_id(p, kind, id, &returned))
        defer_op(p, true, kind, id);
    dbt_redis_budget_end(b);
    return returned;
}

void dbt_send_cancel(dbt_pool *p, dbt_kind kind, const char *id)
{
    pthread_mutex_lock(&p->mu);
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    if (down)
        defer_op(p, true, kind, id);
    else
        (void)cancel_or_defer(p, kind, id);
}

static void cancel_in_redis(dbt_pool *p, struct dbt_slot *s)
{
    if (cancel_or_defer(p, s->kind, s->id))
        trace(DBT_LOG_INFO, "grant_returned", s, -1, -1, -1, -1, "reason",
              "granted as the waiter gave up; passed on");
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
    ACQ_SENT_FAILED,     /* Redis failed, or answered what acquire.lua does not */
    ACQ_SENT_GRANTED,    /* granted at once */
    ACQ_SENT_QUEUED,     /* in the queue (or took an orphan's place there: no call) */
    ACQ_SENT_NOT_GRANTED /* none free, and the caller does not wait */
} acq_sent;

/* Sends acquire.lua for s. */
static acq_sent send_acquire_io(dbt_pool *p, struct dbt_slot *s, bool try_only, long long *holders,
                                long long *queue)
{
    char err[DBT_ERRLEN], who[160];
    snprintf(who, sizeof who, "%s %ld %s", p->client->host, (long)getpid(),
             s->conn[0] ? s->conn : "-");
    dbt_acquire_call a = {.id = s->id, .limit = s->limit, .try_only = try_only, .who = who};
    dbt_script_call call;
    dbt_build_acquire(&call, &p->keys, s->kind, p->client->cfg, &a);
    int64_t sent = dbt_now_us();
    dbt_acquire_reply reply;
    redisReply *rep = dbt_pool_run(p, "acquire", &call, dbt_parse_acquire, &reply, err);
    if (!rep)
        return ACQ_SENT_FAILED;
    freeReplyObject(rep);
    dbt_pool_note_ok(p);
    if (reply.limit_seen > 0 && reply.limit_seen != s->limit)
        note_disagreement(p, s, reply.limit_seen);
    *holders = reply.holders;
    *queue = reply.queue;
    pthread_mutex_lock(&p->mu);
    s->t_renewed_us = sent;
    if (reply.status == DBT_ACQUIRE_QUEUED)
        dbt_handover_verdict(p, s->kind, (uint64_t)reply.ticket, reply.sole);
    pthread_mutex_unlock(&p->mu);
    switch (reply.status) {
    case DBT_ACQUIRE_GRANTED:
        return ACQ_SENT_GRANTED;
    case DBT_ACQUIRE_QUEUED:
        return ACQ_SENT_QUEUED;
    case DBT_ACQUIRE_NOT_GRANTED:
        break;
    }
    return ACQ_SENT_NOT_GRANTED;
}

/* send_acquire_io within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together. */
static acq_sent send_acquire(dbt_pool *p, struct dbt_slot *s, bool try_only, long long *holders,
                             long long *queue)
{
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    acq_sent r = send_acquire_io(p, s, try_only, holders, queue);
    dbt_redis_budget_end(b);
    return r;
}

/* Waits on the slot's eventfd until the deadline (-1: none), or a signal interrupts the wait
 * and opts say to stop. */
static dbt_wait_result wait_wake(struct dbt_slot *s, int64_t deadline_us, const dbt_acquire_opts *o)
{
    for (;;) {
        int ms = -1;
        if (deadline_us >= 0) {
            int64_t left = deadline_us - dbt_now_us();
            if (left <= 0)
                return DBT_WAIT_TIMED_OUT;
            ms = (int)((left + 999) / 1000);
        }
        struct pollfd pfd = {.fd = s->efd, .events = POLLIN};
        int n = poll(&pfd, 1, ms);
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

static dbt_acq_result finish_granted(dbt_pool *p, struct dbt_slot *s, dbt_permit **out,
                                     long long holders, long long queue)
{
    pthread_mutex_lock(&p->mu);
    int64_t waited = s->t_grant_us - s->t_request_us;
    p->st.grants++;
    if (waited > 0 && s->t_grant_us > 0) {
        p->st.wait_total_us += waited;
        if (waited > p->st.wait_max_us)
            p->st.wait_max_us = waited;
    }
    pthread_mutex_unlock(&p->mu);
    waker_retract(s);
    trace(DBT_LOG_INFO, "grant", s, waited, -1, holders, queue, NULL, NULL);
    *out = s;
    return DBT_ACQ_GRANTED;
}

/* Unlinks and frees a slot that ends without a permit, counting why. */
static void drop_slot(dbt_pool *p, struct dbt_slot *s)
{
    pthread_mutex_lock(&p->mu);
    dbt_unlink_slot(p, s);
    pthread_mutex_unlock(&p->mu);
    dbt_free_slot(s);
}

static void send_release(dbt_pool *p, dbt_kind kind, const char *id);

/* A grant that reached a waiter whose last accepted renewal is a whole lease old, or that a
 * renewal found gone from Redis (it expired before it was read). p->mu held. */
static bool stale_grant(const dbt_pool *p, const struct dbt_slot *s)
{
    return s->lost || dbt_now_us() - s->t_renewed_us > p->client->cfg->lease_ms * 1000;
}

/* Granted while this process could not renew (stopped, or cut off from Redis) for a whole lease:
 * Redis may have reaped the permit and granted it again. Gives it back so the caller queues anew
 * rather than run a command on a permit that may be gone. Called with p->mu held; returns without
 * it. False (and s freed) when the deadline has passed meanwhile. */
static bool give_back_stale(dbt_pool *p, struct dbt_slot *s, int64_t deadline)
{
    dbt_unlink_slot(p, s);
    bool renewal_said = s->lost; /* counted when the renewal found it gone */
    if (!renewal_said)
        p->st.leases_lost++;
    pthread_mutex_unlock(&p->mu);
    trace(DBT_LOG_WARN, "stale_grant", s, dbt_now_us() - s->t_request_us, -1, -1, -1, "reason",
          renewal_said ? "expired in Redis before it was read: queue again"
                       : "no renewal accepted for a whole lease: queue again");
    send_release(p, s->kind, s->id);
    if (deadline >= 0 && dbt_now_us() >= deadline) {
        dbt_free_slot(s);
        pthread_mutex_lock(&p->mu);
        p->st.timeouts++;
        pthread_mutex_unlock(&p->mu);
        return false;
    }
    return true;
}

dbt_acq_result dbt_acquire(dbt_pool *p, dbt_kind kind, const dbt_acquire_opts *o, dbt_permit **out)
{
    *out = NULL;
    int64_t start = dbt_now_us();

    struct dbt_slot *s = NULL;
    pthread_mutex_lock(&p->mu);
    bool down = p->down_until_us > start;
    if (down) {
        p->st.refusals++;
    } else if (p->spare) {
        s = p->spare;
        p->spare = s->next;
        s->next = NULL;
        p->nspare--;
    }
    pthread_mutex_unlock(&p->mu);
    if (down)
        return outage_result(p, kind, o, "redis unreachable (retrying within 1s)");

    if (!s && (s = calloc(1, sizeof *s)) != NULL)
        s->efd = -1;
    if (!s)
        return outage_result(p, kind, o, "out of memory");
    s->pool = p;
    s->kind = kind;
    s->limit = o->limit > 0 ? o->limit : 1;
    s->t_request_us = start;
    /* A copy: the slot outlives the caller's buffer (the release is traced too). Cut short, as
     * the log line has a bounded size; a failed copy only leaves the text out. */
    if (o->query)
        s->query = strndup(o->query, DBT_QUERY_TRACE_MAX);
    if (o->conn)
        snprintf(s->conn, sizeof s->conn, "%s", o->conn);
    bool may_wait = o->wait_ms != 0;
    if (may_wait && s->efd < 0 && (s->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0) {
        free(s->query);
        free(s);
        return outage_result(p, kind, o, "cannot create an eventfd");
    }
    waker_publish(s, o->waker);
    int64_t deadline = o->wait_ms < 0 ? -1 : start + o->wait_ms * 1000;

    for (;;) {
        pthread_mutex_lock(&p->mu);
        /* While only this process' threads wait, take the place of one that was served by a
         * permit passed on here (handover.c) rather than queue anew: no Redis call. */
        struct dbt_slot *orphan = may_wait ? dbt_handover_adopt(p, kind, s->limit) : NULL;
        if (orphan) {
            memcpy(s->id, orphan->id, sizeof s->id);
            s->t_renewed_us = orphan->t_renewed_us;
            if (dbt_recycle_slot(p, orphan))
                orphan = NULL; /* kept for a later acquire; else freed below, unlocked */
            s->adopted = true;
        } else {
            new_id(p, s);
        }
        s->state = SLOT_PENDING;
        s->lost = false; /* a grant given back as stale is behind us */
        s->gen = p->gen;
        link_slot(p, s);
        pthread_mutex_unlock(&p->mu);

        long long holders = -1, queue = -1;
        acq_sent st;
        if (s->adopted) {
            s->adopted = false;
            dbt_free_slot(orphan); /* NULL when recycled */
            st = ACQ_SENT_QUEUED;  /* as if acquire.lua had said so */
        } else {
            st = send_acquire(p, s, !may_wait, &holders, &queue);
        }
        if (st == ACQ_SENT_FAILED) {
            pthread_mutex_lock(&p->mu);
            bool granted = s->state == SLOT_HELD; /* the reply was lost, the grant was not */
            if (granted)
                dbt_renewer_ensure(p);
            pthread_mutex_unlock(&p->mu);
            if (granted)
                return finish_granted(p, s, out, -1, -1);
            /* The reply was lost, not necessarily the command: Redis may hold a permit or a
             * place under this id that nobody would renew or give back before its lease ends. */
            defer_op(p, true, kind, s->id);
            drop_slot(p, s);
            pthread_mutex_lock(&p->mu);
            p->st.refusals++;
            pthread_mutex_unlock(&p->mu);
            return outage_result(p, kind, o, "redis error");
        }
        if (st == ACQ_SENT_NOT_GRANTED) {
            trace(DBT_LOG_INFO, "timeout", s, dbt_now_us() - start, -1, holders, queue, "reason",
                  "none free and the caller does not wait");
            drop_slot(p, s);
            pthread_mutex_lock(&p->mu);
            p->st.timeouts++;
            pthread_mutex_unlock(&p->mu);
            return DBT_ACQ_TIMEOUT;
        }
        pthread_mutex_lock(&p->mu);
        if (st == ACQ_SENT_GRANTED || s->state == SLOT_HELD) {
            /* Granted at once, or queued and granted before we read the reply. */
            if (s->state != SLOT_HELD) { /* else the listener set and counted it */
                s->state = SLOT_HELD;
                s->t_grant_us = dbt_now_us();
                p->nheld++;
            }
            if (stale_grant(p, s)) { /* the reply took a whole lease to read (stopped?) */
                if (!give_back_stale(p, s, deadline))
                    return DBT_ACQ_TIMEOUT;
                continue;
            }
            p->seen_any_grant = true;
            if (st == ACQ_SENT_QUEUED)
                p->st.waits++;
            /* Granted with nobody queued: permits may be kept again. From the queue: not. */
            p->contended[kind] = st == ACQ_SENT_QUEUED;
            dbt_renewer_ensure(p);
            pthread_mutex_unlock(&p->mu);
            return finish_granted(p, s, out, holders, queue);
        }
        s->state = SLOT_QUEUED;
        p->nqueued++;
        dbt_lw_push(p, s);
        p->st.waits++;
        p->contended[kind] = true;
        dbt_renewer_ensure(p);
        if (p->bg_leading) /* the renewer listens: it hands the role to a waiting thread */
            dbt_wake_renewer(p);
        struct dbt_slot as_queued; /* its place may be swapped from now on (handover.c) */
        if (dbt_log_enabled(DBT_LOG_INFO))
            trace_copy(&as_queued, s);
        pthread_mutex_unlock(&p->mu);
        if (dbt_log_enabled(DBT_LOG_INFO))
            trace(DBT_LOG_INFO, "wait", &as_queued, -1, -1, holders, queue, NULL, NULL);

        bool leader = false, requeue = false;
        dbt_wait_result w = DBT_WAIT_WOKEN;
        for (;;) {
            pthread_mutex_lock(&p->mu);
            dbt_slot_state now = s->state;
            if (now == SLOT_HELD || now == SLOT_REQUEUE || now == SLOT_DOWN ||
                w != DBT_WAIT_WOKEN) {
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
                return finish_granted(p, s, out, -1, -1);
            }
            if (now == SLOT_HELD) {
                if (!give_back_stale(p, s, deadline))
                    return DBT_ACQ_TIMEOUT;
                requeue = true;
                break;
            }
            if (now == SLOT_REQUEUE || now == SLOT_DOWN) {
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
                if (w == DBT_WAIT_TIMED_OUT)
                    p->st.timeouts++;
                else
                    p->st.interrupts++;
                pthread_mutex_unlock(&p->mu);
                trace(DBT_LOG_INFO, w == DBT_WAIT_TIMED_OUT ? "timeout" : "interrupted", s,
                      dbt_now_us() - s->t_request_us, -1, -1, -1, NULL, NULL);
                cancel_in_redis(p, s);
                drop_slot(p, s);
                return w == DBT_WAIT_TIMED_OUT ? DBT_ACQ_TIMEOUT : DBT_ACQ_INTERRUPTED;
            }
            if (!leader && !p->leader_active)
                p->leader_active = leader = true;
            pthread_mutex_unlock(&p->mu);
            /* A signal that came before we sleep is honoured too, not only one that wakes us. */
            if (o->interrupted && o->interrupted(o->arg))
                w = DBT_WAIT_INTERRUPTED;
            else
                w = leader ? dbt_listen(p, s, deadline, o) : wait_wake(s, deadline, o);
        }
        if (requeue)
            continue;
        if (s->state == SLOT_DOWN) {
            dbt_free_slot(s);
            pthread_mutex_lock(&p->mu);
            p->st.refusals++;
            pthread_mutex_unlock(&p->mu);
            return outage_result(p, kind, o, "redis lost while waiting");
        }
        /* SLOT_REQUEUE: Redis forgot the waiter (restarted, or its lease ran out while Redis
         * was unreachable). Its place is gone; join the queue again under a new id. */
        trace(DBT_LOG_WARN, "requeue", s, dbt_now_us() - s->t_request_us, -1, -1, -1, "reason",
              "Redis no longer had this waiter");
        if (deadline >= 0 && dbt_now_us() >= deadline) {
            dbt_free_slot(s);
            pthread_mutex_lock(&p->mu);
            p->st.timeouts++;
            pthread_mutex_unlock(&p->mu);
            return DBT_ACQ_TIMEOUT;
        }
    }
}

/* ---- release ----------------------------------------------------------------------------- */

/* A release (or a cancel) Redis could not be told of: kept and sent when Redis answers again,
 * so the permit is not lost to the pool for a whole lease after a short outage (a phantom holder
 * that nobody renews still counts until its lease ends). */
static void defer_op(dbt_pool *p, bool cancel, dbt_kind kind, const char *id)
{
    pthread_mutex_lock(&p->mu);
    if (p->ndeferred < DBT_MAX_DEFERRED) {
        p->deferred[p->ndeferred].cancel = cancel;
        p->deferred[p->ndeferred].kind = kind;
        snprintf(p->deferred[p->ndeferred].id, sizeof p->deferred[0].id, "%s", id);
        p->ndeferred++;
        dbt_renewer_ensure(p);
        pthread_cond_signal(&p->bg_cv); /* it sends them as soon as Redis answers */
    }
    pthread_mutex_unlock(&p->mu);
}

static void send_release_io(dbt_pool *p, dbt_kind kind, const char *id)
{
    char err[DBT_ERRLEN];
    dbt_script_call call;
    dbt_build_release(&call, &p->keys, kind, p->client->cfg, id);
    if (!dbt_pool_send(p, "release", &call, err))
        defer_op(p, false, kind, id);
}

/* send_release_io within one DBTHROTTLE_REDIS_TIMEOUT, all its steps together. */
static void send_release(dbt_pool *p, dbt_kind kind, const char *id)
{
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    send_release_io(p, kind, id);
    dbt_redis_budget_end(b);
}

void dbt_release(dbt_permit *s)
{
    if (!s)
        return;
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    if (s->state == SLOT_RETURNED) {
        /* A kept permit the renewer already gave back (and traced). */
        pthread_mutex_unlock(&p->mu);
        dbt_free_slot(s);
        return;
    }
    if (s->parked) {
        s->parked = false;
        if (s->gen == p->gen)
            p->nparked--;
    }
    if (s->gen != p->gen) {
        /* A permit of the parent process: the child must neither use nor release it. */
        pthread_mutex_unlock(&p->mu);
        dbt_free_slot(s);
        return;
    }
    /* What the trace says of the permit, before it may move to another thread (handover.c):
     * then s becomes a place in the queue that the pool keeps, and is not ours to free (nor its
     * query text, which the trace then owns). */
    bool tracing = dbt_log_enabled(DBT_LOG_INFO);
    struct dbt_slot before;
    if (tracing) {
        trace_copy(&before, s);
        s->query = NULL;
    }
    struct dbt_slot *to = dbt_handover_release(p, s);
    if (to) {
        pthread_mutex_unlock(&p->mu);
        dbt_slot_wake_later(to);
        if (tracing) {
            trace(DBT_LOG_INFO, "release", &before, -1, dbt_now_us() - before.t_grant_us, -1, -1,
                  "to", "a waiting thread of this process");
            free(before.query);
        }
        return;
    }
    if (tracing)
        s->query = before.query;
    dbt_unlink_slot(p, s);
    struct dbt_slot *idle_places[16];
    int nplaces = dbt_orphans_take_if_idle(p, s->kind, idle_places, 16);
    bool down = p->down_until_us > dbt_now_us();
    pthread_mutex_unlock(&p->mu);
    if (!down)
        send_release(p, s->kind, s->id);
    else
        defer_op(p, false, s->kind, s->id);
    trace(DBT_LOG_INFO, "release", s, -1, dbt_now_us() - s->t_grant_us, -1, -1,
          s->lost ? "lease" : NULL, "lost");
    dbt_free_slot(s);
    for (int i = 0; i < nplaces; i++) { /* the process went idle: see dbt_orphans_take_if_idle */
        dbt_send_cancel(p, idle_places[i]->kind, idle_places[i]->id);
        dbt_free_slot(idle_places[i]);
    }
}

/* ---- kept permits (DBTHROTTLE_CACHE_PERMITS) ------------------------------------------------ */

bool dbt_permit_park(dbt_permit *s)
{
    if (!s || !s->pool->client->cfg->cache_permits)
        return false; /* caching off: the common query path pays no lock for asking */
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us();
    bool keep = s->state == SLOT_HELD && !s->parked && s->gen == p->gen && !s->lost &&
                !p->contended[s->kind] && p->down_until_us <= now &&
                !dbt_slot_expire_unrenewed(p, s, now);
    if (keep) {
        s->parked = true;
        s->parked_us = now;
        p->nparked++;
        /* The renewer gives it back after DBTHROTTLE_CACHE_IDLE (it listens for a waiter's
         * arrival already: it does while the process holds permits). Woken only when it would
         * sleep past that: once per idle period at most, not once per command. */
        int64_t back = now + p->client->cfg->cache_idle_ms * 1000;
        if (!p->thread_started)
            dbt_renewer_ensure(p);
        else if (p->bg_until_us > back)
            dbt_wake_renewer(p);
    }
    pthread_mutex_unlock(&p->mu);
    if (keep)
        trace(DBT_LOG_DEBUG, "keep", s, -1, -1, -1, -1, NULL, NULL);
    return keep;
}

bool dbt_permit_unpark(dbt_permit **slot)
{
    dbt_permit *s = *slot;
    if (!s)
        return false;
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    bool ours = s->state == SLOT_HELD && s->parked && s->gen == p->gen;
    if (s->parked) {
        s->parked = false;
        if (s->gen == p->gen)
            p->nparked--;
    }
    pthread_mutex_unlock(&p->mu);
    if (ours) {
        trace(DBT_LOG_DEBUG, "reuse", s, -1, -1, -1, -1, NULL, NULL);
        return true;
    }
    /* Given back meanwhile (a waiter came, or it sat idle too long), or the parent's. */
    dbt_release(s);
    *slot = NULL;
    return false;
}

int64_t dbt_parked_due_us(dbt_pool *p)
{
    if (p->nparked == 0)
        return -1;
    int64_t idle = p->client->cfg->cache_idle_ms * 1000, due = -1;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->parked) {
            int64_t at = p->contended[s->kind] ? 0 : s->parked_us + idle;
            if (due < 0 || at < due)
                due = at;
        }
    return due;
}

void dbt_return_parked(dbt_pool *p)
{
    enum { BATCH = 64 };
    struct dbt_slot copies[BATCH];
    const char *why[BATCH];
    int n = 0;
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us(), idle = p->client->cfg->cache_idle_ms * 1000;
    for (struct dbt_slot *s = p->slots, *next; s && n < BATCH; s = next) {
        next = s->next;
        if (!s->parked || (!p->contended[s->kind] && now < s->parked_us + idle))
            continue;
        if (p->ninflight >= (int)(sizeof p->inflight / sizeof p->inflight[0]))
            break;
        p->inflight[p->ninflight].cancel = false;
        p->inflight[p->ninflight].kind = s->kind;
        memcpy(p->inflight[p->ninflight].id, s->id, sizeof s->id);
        p->ninflight++;
        why[n] = p->contended[s->kind] ? "a waiter queued" : "kept idle for DBTHROTTLE_CACHE_IDLE";
        /* What the trace and the release need, copied: once RETURNED, the owner may free s. */
        trace_copy(&copies[n], s);
        copies[n].query = NULL;
        n++;
        s->parked = false;
        p->nparked--;
        dbt_unlink_slot(p, s); /* no longer renewed, nor counted as held */
        s->state = SLOT_RETURNED;
    }
    bool down = p->down_until_us > now;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n; i++) {
        if (!down)
            send_release(p, copies[i].kind, copies[i].id);
        else
            defer_op(p, false, copies[i].kind, copies[i].id);
        trace(DBT_LOG_INFO, "release", &copies[i], -1, dbt_now_us() - copies[i].t_grant_us, -1, -1,
              "reason", why[i]);
    }
    pthread_mutex_lock(&p->mu);
    p->ninflight = 0; /* only the renewer adds to it */
    pthread_mutex_unlock(&p->mu);
}

void dbt_flush_deferred(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    int n = p->ndeferred;
    __typeof__(p->deferred[0]) *todo = n ? malloc((size_t)n * sizeof *todo) : NULL;
    if (todo) {
        memcpy(todo, p->deferred, (size_t)n * sizeof *todo);
        p->ndeferred = 0;
    }
    pthread_mutex_unlock(&p->mu);
    if (!todo)
        return;
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    for (int i = 0; i < n; i++) { /* one that fails is kept again */
        bool returned;
        if (!todo[i].cancel)
            send_release_io(p, todo[i].kind, todo[i].id);
        else if (!cancel_id(p, todo[i].kind, todo[i].id, &returned))
            defer_op(p, true, todo[i].kind, todo[i].id);
    }
    dbt_redis_budget_end(b);
    free(todo);
    if (dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_I("releases", n)};
        dbt_log(DBT_LOG_INFO, "deferred_releases_sent", f, 2);
    }
}

const char *dbt_permit_id(const dbt_permit *s)
{
    return s->id;
}

void dbt_permit_note_idle(dbt_permit *s, bool idle)
{
    pthread_mutex_lock(&s->pool->mu);
    s->idle_since_us = idle ? dbt_now_us() : 0;
    s->idle_warned = false;
    pthread_mutex_unlock(&s->pool->mu);
}

bool dbt_permit_lost(dbt_permit *s)
{
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    bool lost = s->gen != p->gen || dbt_slot_expire_unrenewed(p, s, dbt_now_us());
    pthread_mutex_unlock(&p->mu);
    return lost;
}

/* ---- shutdown ---------------------------------------------------------------------------- */

static void log_summary_of(const char *name, const dbt_pool_stats *st)
{
    if (st->grants == 0 && st->refusals == 0 && st->redis_errors == 0 && st->timeouts == 0)
        return;
    dbt_field f[] = {DBT_S("pool", name),
                     DBT_I("grants", st->grants),
                     DBT_I("waits", st->waits),
                     DBT_MS("wait_total_ms", (double)st->wait_total_us / 1000.0),
                     DBT_MS("wait_max_ms", (double)st->wait_max_us / 1000.0),
                     DBT_I("timeouts", st->timeouts),
                     DBT_I("refusals", st->refusals),
                     DBT_I("redis_errors", st->redis_errors),
                     DBT_I("leases_lost", st->leases_lost)};
    dbt_log(DBT_LOG_INFO, "summary", f, sizeof f / sizeof *f);
}

static void free_pool(dbt_pool *p)
{
    dbt_renewer_stop(p);
    dbt_listener_close(p);
    if (p->bg_slot) {
        close(p->bg_slot->efd);
        free(p->bg_slot);
    }
    dbt_free_spares(p);
    dbt_report_local(p);
    /* Give back what is still held: a process that exits cleanly should not make others wait
     * out its leases. Sent without waiting, then the replies are read (bounded by the
     * Redis timeout) so the commands surely left before the sockets close. */
    struct dbt_slot *s = p->slots;
    p->slots = NULL;
    bool down = p->down_until_us > dbt_now_us();
    while (s) {
        struct dbt_slot *next = s->next;
        if (s->state == SLOT_HELD && s->gen == p->gen && !down)
            send_release(p, s->kind, s->id);
        else if (s->orphan && s->gen == p->gen && !down) /* a place kept for a next waiter */
            cancel_in_redis(p, s);
        dbt_free_slot(s);
        s = next;
    }
    log_summary_of(p->name, &p->st);
    char err[DBT_ERRLEN];
    for (int i = 0; i < p->nfree; i++) {
        (void)dbt_redis_drain(p->free_conns[i], err);
        dbt_redis_free(p->free_conns[i]);
    }
    dbt_keys_free(&p->keys);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->conn_cv);
    pthread_cond_destroy(&p->bg_cv);
    free(p->name);
    free(p);
}

void dbt_client_exit(dbt_client *c)
{
    pthread_mutex_lock(&c->mu);
    dbt_pool *pools = c->pools;
    pthread_mutex_unlock(&c->mu);
    for (dbt_pool *p = pools; p; p = p->next) {
        /* Copy the ids first: the network calls happen without the lock. */
        enum { MAX_EXIT = 256 };
        char ids[MAX_EXIT][64];
        dbt_kind kinds[MAX_EXIT];
        bool place[MAX_EXIT];
        int n = 0;
        pthread_mutex_lock(&p->mu);
        /* Threads may still run: none may pass on a permit this gives back. */
        p->exiting = true;
        bool down = p->down_until_us > dbt_now_us();
        for (struct dbt_slot *s = p->slots; s && n < MAX_EXIT; s = s->next)
            if ((s->state == SLOT_HELD || s->orphan) && s->gen == p->gen) {
                memcpy(ids[n], s->id, sizeof ids[n]);
                place[n] = s->state != SLOT_HELD; /* a queued place kept for a next waiter */
                kinds[n++] = s->kind;
            }
        /* What the renewer was giving back as the process exits: it may not get to send it. */
        for (int i = 0; i < p->ninflight && n < MAX_EXIT; i++) {
            memcpy(ids[n], p->inflight[i].id, sizeof ids[n]);
            place[n] = p->inflight[i].cancel;
            kinds[n++] = p->inflight[i].kind;
        }
        dbt_pool_stats st = p->st;
        pthread_mutex_unlock(&p->mu);
        dbt_report_local(p);
        for (int i = 0; i < n && !down; i++) {
            if (!place[i]) {
                send_release(p, kinds[i], ids[i]);
            } else {
                bool returned;
                int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
                (void)cancel_id(p, kinds[i], ids[i], &returned);
                dbt_redis_budget_end(b);
            }
        }
        log_summary_of(p->name, &st);
    }
}

void dbt_client_free(dbt_client *c)
{
    if (!c)
        return;
    dbt_fork_unregister(c);
    dbt_pool *p = c->pools;
    while (p) {
        dbt_pool *next = p->next;
        free_pool(p);
        p = next;
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}
