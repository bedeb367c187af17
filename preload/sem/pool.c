/* pool.c - the primitives every module of a pool uses: its locks, command connections, the outage
 * backoff, slots (waking, recycling, freeing), wakers, deferred operations, a permit's state, and
 * the notices the modules above read (the background thread woken or started, the listener asked
 * to listen anew): a module below calls none above it. */
#include "pool.h"
#include "clock.h"
#include "cluster.h"
#include "fork.h"
#include "lease.h"
#include "log.h"
#include "redis_errors.h"
#include "route.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- locks ------------------------------------------------------------------------------- */

void dbt_pool_mutex_init(pthread_mutex_t *mu)
{
    /* Adaptive: a thread that finds it taken spins a little before it sleeps. Every critical
     * section under it is a few list operations, and many threads of one process pass permits
     * through it (handover.c): sleeping on it cost a futex call and a thread switch per command. */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
}

void dbt_cond_init_mono(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void dbt_cond_wait_until(pthread_cond_t *cv, pthread_mutex_t *mu, int64_t until_us)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t left = until_us - dbt_now_us();
    if (left <= 0)
        return;
    ts.tv_sec += (time_t)(left / 1000000);
    ts.tv_nsec += (long)(left % 1000000) * 1000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

/* ---- notices to the modules above ---------------------------------------------------------- */

/* The mode in force per kind, as live.c sets it (a read of p->mode: here, beside the pool's
 * other state, so that the pool's own paths need nothing of live.c). */
_Static_assert(DBT_MODE_KINDS == DBT_NKINDS && DBT_KIND_QUERY == 0 && DBT_KIND_CONN == 1,
               "DBTHROTTLE_MODE's kinds are dbt_kind's");

bool dbt_pool_shadow(dbt_pool *p, dbt_kind kind)
{
    return kind < DBT_NKINDS && atomic_load(&p->mode[kind]) == DBT_MODE_SHADOW;
}

bool dbt_pool_any_shadow(dbt_pool *p)
{
    for (int k = 0; k < DBT_NKINDS; k++)
        if (dbt_pool_shadow(p, (dbt_kind)k))
            return true;
    return false;
}

void dbt_pool_wake_bg(dbt_pool *p)
{
    pthread_cond_signal(&p->bg_cv);
    if (p->bg_leading)
        dbt_slot_wake(p->bg_slot);
}

void dbt_pool_report_soon(dbt_pool *p)
{
    if (p->thread_started && (p->bg_idle || p->bg_until_us > dbt_now_us() + DBT_DOING_REPORT_US))
        dbt_pool_wake_bg(p);
}

bool dbt_pool_bg_may_lead(const dbt_pool *p)
{
    return p->thread_started && !p->stop && p->bg_slot && p->down_until_us <= dbt_now_us();
}

void dbt_pool_start_bg(dbt_pool *p)
{
    if (p->bg_start)
        p->bg_start(p);
}

/* How soon after a release sent without waiting the background thread reads its reply, if
 * nothing else has: a batch of releases costs one wake-up, and a failed one is sent again well
 * within a second. */
#define DRAIN_DELAY_US INT64_C(200000)

void dbt_pool_drain_soon(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    /* No background thread (stopped, as the pool is freed): the next command on the connection
     * reads it. */
    if (!p->drain_due_us && p->thread_started) {
        p->drain_due_us = dbt_now_us() + DRAIN_DELAY_US;
        if (p->bg_idle || p->bg_until_us > p->drain_due_us)
            dbt_pool_wake_bg(p);
    }
    pthread_mutex_unlock(&p->mu);
}

void dbt_listener_moved(dbt_pool *p)
{
    p->listener_reset = true;
    /* The leader is one of the waiters, or the renewer (bg_slot): each woken one that is not the
     * leader goes back to its wait. */
    for (struct dbt_slot *w = p->slots; w; w = w->next)
        if (w->state == SLOT_QUEUED && !w->orphan)
            dbt_slot_wake(w);
    if (p->bg_leading && p->bg_slot)
        dbt_slot_wake(p->bg_slot);
}

void dbt_pool_set_group(dbt_pool *p, const char *group)
{
    char cid[DBT_POOL_CID_MAX] = "";
    if (group && group[0])
        snprintf(cid, sizeof cid, "%.16s~%s", group, p->client->cid);
    if (strcmp(cid, p->cid) == 0)
        return;
    snprintf(p->prev_cid, sizeof p->prev_cid, "%s", dbt_pool_cid(p));
    snprintf(p->cid, sizeof p->cid, "%s", cid);
    snprintf(p->group, sizeof p->group, "%.16s", cid[0] ? group : "");
    /* The BLPOPs in flight name the old lists: the leader sends new ones. A grant one of them
     * had popped is lost with the connection they go with: a renewal at once brings it (its
     * granted waiters), and any grant of a place whose cid the new BLPOPs cannot name too. */
    dbt_listener_moved(p);
    p->renew_now = true;
    if (p->thread_started)
        dbt_pool_wake_bg(p);
}

void dbt_pool_forget_verdicts(dbt_pool *p)
{
    /* A kind the host was sole for may have permits on its shelf kept only for that (while
     * its places were the queue: docs/design.md, "Keeping while the host is sole"): they go
     * back now rather than at their keepers' idle time. */
    unsigned was_sole = p->share ? dbt_share_reset(p->share) : 0;
    for (int k = 0; k < DBT_NKINDS && !p->exiting; k++)
        if (was_sole & (1u << k)) {
            p->shelf_recall[k] = true;
            dbt_pool_wake_bg(p);
        }
    dbt_queue_event forget = {.type = DBT_QEV_FORGET};
    for (int k = 0; k < DBT_NKINDS; k++)
        (void)dbt_queue_step(&p->queue[k], &forget);
}

/* ---- command connections --------------------------------------------------------------- */

dbt_redis *dbt_pool_connect(dbt_pool *p, char *err)
{
    dbt_redis *r = dbt_redis_connect_for(p->client->cfg, p->keys.base, err);
    if (r) {
        pthread_mutex_lock(&p->mu);
        p->reached_redis = true; /* its name resolved: from now on, not resolving is an outage */
        pthread_mutex_unlock(&p->mu);
    }
    if (r && r->server_problem[0]) {
        snprintf(err, DBT_ERRLEN, "%s", r->server_problem);
        dbt_redis_free(r);
        return NULL;
    }
    if (r && r->info_refused) {
        pthread_mutex_lock(&p->mu);
        bool first = !p->info_warned;
        p->info_warned = true;
        pthread_mutex_unlock(&p->mu);
        if (first) {
            dbt_field f[] = {DBT_S("pool", p->name),
                             DBT_S("redis", p->client->cfg->redis_url_redacted),
                             DBT_S("effect", "cannot verify Redis' maxmemory-policy nor its "
                                             "version, nor detect failovers and restarts: grant "
                                             "+info to the Redis user (docs/operations.md), or "
                                             "un-rename INFO")};
            dbt_log(DBT_LOG_WARN, "redis_unverified", f, sizeof f / sizeof *f);
        }
    }
    return r;
}

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
        /* An idle connection that Redis closed (a restart), or one to a Sentinel master that has
         * changed since (dbt_redis_stale says both), is replaced here, before a command
         * fails on it and the pool takes a healthy Redis for an outage. */
        if (!dbt_redis_stale(r))
            return r;
        dbt_pool_put_conn(p, r); /* broken now: freed */
        pthread_mutex_lock(&p->mu);
    }
    p->nconns++;
    pthread_mutex_unlock(&p->mu);

    dbt_redis *r = dbt_pool_connect(p, err);

    pthread_mutex_lock(&p->mu);
    if (r) {
        for (int i = 0; i < DBT_MAX_CONNS; i++)
            if (!p->all_conns[i]) {
                p->all_conns[i] = r;
                dbt_redis_adopt(r); /* a fork()ed child closes it with all_conns now */
                break;
            }
        /* Another server than the one the pool's state was last met on (a restart, a failover):
         * the holders re-assert their permits at once, not at the next renewal. */
        if (r->run_id[0] && p->era_seen[0] && strcmp(r->run_id, p->era_seen) != 0 &&
            !p->renew_now) {
            p->renew_now = true;
            if (p->thread_started)
                dbt_pool_wake_bg(p);
        }
    } else {
        p->nconns--;
        pthread_cond_signal(&p->conn_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return r;
}

void dbt_op_tag(char *tag, dbt_owed_what what, dbt_kind kind, const char *id)
{
    snprintf(tag, DBT_REDIS_TAG_LEN, "%c%c%s", (char)what, kind == DBT_KIND_QUERY ? 'q' : 'c', id);
}

/* Releases and cancels sent without waiting whose reply said they failed (NOSCRIPT that could
 * not be repaired, OOM, BUSY), or whose connection broke first: owed again, so the renewer sends
 * them until they land (a permit left held would keep others waiting for its whole lease).
 * Without p->mu. */
static void owe_failed(dbt_pool *p, dbt_redis *r)
{
    char tags[DBT_MAX_PENDING][DBT_REDIS_TAG_LEN];
    int n = dbt_redis_take_failed(r, tags, DBT_MAX_PENDING);
    /* (A release owed again counts its hold from the grant: the tag does not carry it.) */
    for (int i = 0; i < n; i++)
        if ((tags[i][0] == DBT_OWED_CANCEL || tags[i][0] == DBT_OWED_WITHDRAW ||
             tags[i][0] == DBT_OWED_RELEASE) &&
            (tags[i][1] == 'q' || tags[i][1] == 'c'))
            dbt_defer_op(p, (dbt_owed_what)tags[i][0],
                         tags[i][1] == 'q' ? DBT_KIND_QUERY : DBT_KIND_CONN, tags[i] + 2, -1);
}

void dbt_pool_put_conn(dbt_pool *p, dbt_redis *r)
{
    if (!r)
        return;
    if (r->nfailed > 0)
        owe_failed(p, r);
    bool drop = dbt_redis_broken(r);
    pthread_mutex_lock(&p->mu);
    if (drop) {
        for (int i = 0; i < DBT_MAX_CONNS; i++)
            if (p->all_conns[i] == r)
                p->all_conns[i] = NULL;
        dbt_redis_disown(r); /* closed below: until then a fork()ed child closes its copy */
        p->nconns--;
    } else {
        p->free_conns[p->nfree++] = r;
    }
    pthread_cond_signal(&p->conn_cv);
    pthread_mutex_unlock(&p->mu);
    if (drop)
        dbt_redis_free(r);
}

void dbt_pool_close_outdated(dbt_pool *p)
{
    dbt_redis *old[DBT_MAX_CONNS];
    int n = 0;
    for (int i = p->nfree - 1; i >= 0; i--) {
        dbt_redis *r = p->free_conns[i];
        /* Only those the host's relay made outdated, with no reply owed (those are read first,
         * by dbt_pool_drain_idle): the others are left to their next use, as before. */
        if ((r->relayed || r->route.relay_retry_us) && r->npending == 0 && dbt_redis_outdated(r)) {
            old[n++] = p->free_conns[i];
            p->free_conns[i] = p->free_conns[--p->nfree];
        }
    }
    if (n == 0)
        return;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n; i++) {
        (void)dbt_redis_stale(old[i]); /* given up (no reply was owed on it) */
        dbt_pool_put_conn(p, old[i]);  /* broken now: freed */
    }
    pthread_mutex_lock(&p->mu);
}

void dbt_pool_drain_idle(dbt_pool *p)
{
    dbt_redis *mine[DBT_MAX_CONNS];
    int n = 0;
    for (int i = p->nfree - 1; i >= 0; i--)
        if (p->free_conns[i]->npending > 0) {
            mine[n++] = p->free_conns[i];
            p->free_conns[i] = p->free_conns[--p->nfree];
        }
    if (n == 0)
        return;
    pthread_mutex_unlock(&p->mu);
    char err[DBT_ERRLEN] = "";
    for (int i = 0; i < n; i++) {
        if (!dbt_redis_drain(mine[i], err) && dbt_redis_broken(mine[i])) {
            /* A cluster's MOVED is no outage: the releases are owed, sent to the new node; nor
             * is a connection to the host's relay that broke (it ended, or stalled): they are
             * sent again through the next connection, which meets an outage if there is one. */
            if (dbt_cluster_redirect_of(err, NULL, NULL) != DBT_REDIR_MOVED && !mine[i]->relayed)
                dbt_pool_note_error(p, "release", err);
        } else if (mine[i]->nfailed > 0 && dbt_log_enabled(DBT_LOG_DEBUG)) {
            dbt_field f[] = {DBT_S("pool", p->name), DBT_S("error", err),
                             DBT_S("effect", "sent again")};
            dbt_log(DBT_LOG_DEBUG, "release_failed", f, 3);
        }
        dbt_pool_put_conn(p, mine[i]);
    }
    pthread_mutex_lock(&p->mu);
}

/* ---- eras ---------------------------------------------------------------------------------- */

void dbt_pool_era_prev(dbt_pool *p, char *out)
{
    pthread_mutex_lock(&p->mu);
    snprintf(out, 41, "%s", p->era_seen);
    pthread_mutex_unlock(&p->mu);
}

void dbt_pool_era_seen(dbt_pool *p, const char *run_id)
{
    if (!run_id[0])
        return;
    pthread_mutex_lock(&p->mu);
    snprintf(p->era_seen, sizeof p->era_seen, "%s", run_id);
    pthread_mutex_unlock(&p->mu);
}

void dbt_pool_renew_now(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->renew_now = true;
    if (p->thread_started)
        dbt_pool_wake_bg(p);
    pthread_mutex_unlock(&p->mu);
}

/* A quarantine heard of again, with an end this much later than the one known, is another. */
#define QUARANTINE_SAME_US INT64_C(1500000)

void dbt_pool_note_quarantine(dbt_pool *p, dbt_kind kind, long long ms, const char *why)
{
    if (ms <= 0)
        return;
    int64_t now = dbt_now_us(), until = now + (int64_t)ms * 1000;
    pthread_mutex_lock(&p->mu);
    int64_t known = p->quarantine_until_us[kind];
    bool fresh = known <= now || until > known + QUARANTINE_SAME_US;
    if (until > known)
        p->quarantine_until_us[kind] = until;
    /* Whoever then waits is granted by the pump of the renewal at its end. */
    if (!p->renew_at_us || p->renew_at_us > until)
        p->renew_at_us = until;
    if (p->thread_started)
        dbt_pool_wake_bg(p);
    pthread_mutex_unlock(&p->mu);
    if (fresh) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("kind", dbt_kind_name(kind)),
                         DBT_S("why", strcmp(why, DBT_WHY_LOST) == 0 ? "data lost"
                                      : strcmp(why, DBT_WHY_RESTARTED) == 0
                                          ? "server restarted without the pool's state"
                                          : "server changed"),
                         DBT_MS("ms", (double)ms),
                         DBT_S("effect", "no grant until the holders re-assert their permits")};
        dbt_log(DBT_LOG_WARN, "quarantine", f, sizeof f / sizeof *f);
    }
}

/* ---- outages ----------------------------------------------------------------------------- */

/* A configuration error: refused like a bad setting whatever DBTHROTTLE_ON_REDIS_ERROR says, and
 * logged at error level when it is new or has lasted another minute (one line a minute, not one
 * per process: the operator must see it while it lasts). */
static void note_misconfig(dbt_pool *p, const char *what, const char *msg, const char *why)
{
    int64_t now = dbt_now_us();
    pthread_mutex_lock(&p->mu);
    p->st.redis_errors++;
    snprintf(p->misconfig, sizeof p->misconfig, "%s", why);
    p->misconfig_at_us = now;
    if (p->misconfig_probe_us <= now)
        p->misconfig_probe_us = now + DBT_MISCONFIG_PROBE_US;
    /* The renewer holds its deferred operations back as in an outage, until the next probe:
     * a broken Redis costs no round trip but that one. */
    p->down_until_us = p->misconfig_probe_us;
    /* The last line logged is remembered across a fix: a cause that only some operations meet
     * (an ACL without BLPOP) is fixed by every other call and back at the next, and must still
     * be one line a minute. */
    bool log = dbt_misconfig_log_due(p->misconfig_logged, p->misconfig_logged_us, why, now);
    if (log) {
        snprintf(p->misconfig_logged, sizeof p->misconfig_logged, "%s", why);
        p->misconfig_logged_us = now;
        p->misconfig_fix_owed = !p->client->cfg->disable; /* its line is logged */
    }
    pthread_mutex_unlock(&p->mu);
    /* A disabled process only reports itself (registry.c): its commands never depend on Redis,
     * and dbthrottle status shows the cause. */
    if (log && !p->client->cfg->disable) {
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_S("during", what),
                         DBT_S("error", msg),
                         DBT_S("cause", why),
                         DBT_S("redis", p->client->cfg->redis_url_redacted),
                         DBT_S("effect", "refusing every command until it is fixed (checked "
                                         "every 2s), whatever DBTHROTTLE_ON_REDIS_ERROR says")};
        dbt_log(DBT_LOG_ERROR, "redis_misconfigured", f, sizeof f / sizeof *f);
    }
}

bool dbt_misconfig_log_due(const char *last, int64_t last_us, const char *why, int64_t now)
{
    return strcmp(last, why) != 0 || now - last_us >= DBT_MISCONFIG_RELOG_US;
}

bool dbt_pool_misconfigured(dbt_pool *p, int64_t now)
{
    if (!p->misconfig[0])
        return false;
    if (now < p->misconfig_probe_us)
        return true;
    p->misconfig_probe_us = now + DBT_MISCONFIG_PROBE_US; /* this one tries; the others not */
    return false;
}

/* Whether the calling thread's last failed Redis call failed for a permanent cause. Its own
 * verdict, not the pool's state: another thread's call that succeeds meanwhile (one command
 * allowed, another denied by the ACL) clears p->misconfig, and a waiter whose BLPOP was just
 * refused must still be refused, not run unthrottled beside the holder. */
static __thread bool thread_failed_permanently;

bool dbt_pool_thread_failed_permanently(void)
{
    return thread_failed_permanently;
}

void dbt_pool_thread_clear_failure(void)
{
    thread_failed_permanently = false;
}

static dbt_outage_view outage_view(const dbt_pool *p)
{
    return (dbt_outage_view){.in_outage = p->in_outage,
                             .last_error_us = p->outage_error_us,
                             .ended_us = p->outage_ended_us};
}

void dbt_pool_note_error(dbt_pool *p, const char *what, const char *msg)
{
    char why[DBT_MISCONFIG_LEN];
    pthread_mutex_lock(&p->mu);
    bool reached = p->reached_redis;
    pthread_mutex_unlock(&p->mu);
    thread_failed_permanently = dbt_redis_error_permanent(msg, reached, why, sizeof why);
    if (thread_failed_permanently) {
        note_misconfig(p, what, msg, why);
        return;
    }
    const dbt_config *cfg = p->client->cfg;
    pthread_mutex_lock(&p->mu);
    p->st.redis_errors++;
    int64_t now = dbt_now_us();
    p->down_until_us = now + DBT_OUTAGE_BACKOFF_US;
    dbt_outage_view ov = outage_view(p);
    bool first = dbt_core_outage_begins(&ov, now, DBT_OUTAGE_BACKOFF_US);
    bool resumed = !p->in_outage && !first;
    int64_t gap_us = now - p->outage_ended_us;
    p->in_outage = true;
    p->outage_error_us = now;
    if (first) { /* a new outage: what it costs is counted from here (registry.c reports it) */
        p->outage_since_ms = dbt_wall_ms();
        p->outage_until_ms = 0;
        p->outage_unthrottled = p->outage_refused = 0;
    } else if (resumed) {
        p->outage_until_ms = 0; /* the last one again: its cost goes on counting */
    }
    /* Said once per outage, by a process some of whose commands depend on Redis: the first
     * error it meets once it does (an exempt connection's heartbeat may have met the outage
     * first). */
    if (first || resumed)
        p->outage_said = false;
    bool say = !p->outage_said && p->takes_permits && !cfg->disable;
    if (say)
        p->outage_said = true;
    pthread_mutex_unlock(&p->mu);
    /* Once per outage: a dead Redis must not flood the host program's stderr. A disabled
     * process only reports itself (registry.c): its commands never depend on Redis; nor do those
     * of a process whose connections are all exempt (it reports, to hear the live settings):
     * nothing of it is refused or runs unthrottled. An outage that resumes says so once more,
     * after its redis_back. */
    if (say) {
        /* shadow mode refuses nothing: its commands run on as open mode's do (a kind in shadow
         * beside one enforced in closed mode: that one's are refused) */
        bool sq = dbt_pool_shadow(p, DBT_KIND_QUERY), sc = dbt_pool_shadow(p, DBT_KIND_CONN);
        bool shadow = sq && sc;
        bool open = shadow || atomic_load(&p->on_redis_error) == DBT_ON_ERROR_OPEN;
        const char *effect = open ? "running unthrottled until Redis is back"
                             : sq ? "refusing connections until Redis is back (queries, in "
                                    "shadow mode, run)"
                             : sc ? "refusing queries until Redis is back (connections, in "
                                    "shadow mode, open)"
                                  : "refusing commands until Redis is back";
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_S("during", what),
                         DBT_S("error", msg),
                         DBT_S("redis", cfg->redis_url_redacted),
                         DBT_S("mode", shadow ? "shadow"
                                       : open ? "open"
                                              : "closed"),
                         DBT_S("effect", effect),
                         DBT_MS("resumes_after_ms", (double)gap_us / 1000)};
        size_t n = sizeof f / sizeof *f - (resumed ? 0 : 1);
        dbt_log(open ? DBT_LOG_WARN : DBT_LOG_ERROR, "redis_error", f, n);
    } else if (dbt_log_enabled(DBT_LOG_DEBUG)) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("during", what), DBT_S("error", msg)};
        dbt_log(DBT_LOG_DEBUG, "redis_error", f, 3);
    }
}

void dbt_pool_note_ok(dbt_pool *p, int64_t sent_us)
{
    pthread_mutex_lock(&p->mu);
    dbt_outage_view ov = outage_view(p);
    bool was = dbt_core_outage_ends(&ov, sent_us);
    /* Sent before the outage's last failure: it lasts, and so does its backoff. */
    bool outage_stands = p->in_outage && !was;
    if (was) {
        p->in_outage = false;
        p->outage_ended_us = dbt_now_us();
    }
    /* A permanent error noted after this call was sent stands, and with it its probe schedule
     * (down_until_us): the call's success tells nothing of the configuration since. */
    bool stands = p->misconfig[0] && sent_us < p->misconfig_at_us;
    if (!stands && !outage_stands)
        p->down_until_us = 0;
    char fixed[sizeof p->misconfig] = "";
    if (!stands) {
        snprintf(fixed, sizeof fixed, "%s", p->misconfig);
        p->misconfig[0] = '\0';
    }
    /* One redis_fixed line per redis_misconfigured line: a cause that comes back within the
     * minute is not logged again (note_misconfig), so neither is its next fix. */
    bool log_fixed = fixed[0] && p->misconfig_fix_owed;
    if (fixed[0])
        p->misconfig_fix_owed = false;
    uint64_t unthrottled = p->outage_unthrottled, refused = p->outage_refused;
    int64_t since = p->outage_since_ms;
    if (was)
        p->outage_until_ms = dbt_wall_ms();
    /* said when its redis_error was (note_error): not by a process none of whose commands
     * depended on Redis */
    bool said = p->outage_said;
    if (was)
        p->outage_said = false;
    pthread_mutex_unlock(&p->mu);
    if (was && said) {
        /* What the outage cost, in the line that ends it: also in dbthrottle status. */
        dbt_field f[] = {DBT_S("pool", p->name),
                         DBT_MS("outage_ms", (double)(dbt_wall_ms() - since)),
                         DBT_I("unthrottled", unthrottled), DBT_I("refused", refused)};
        dbt_log(DBT_LOG_WARN, "redis_back", f, sizeof f / sizeof *f);
    }
    if (log_fixed) {
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("was", fixed),
                         DBT_S("effect", "throttling again")};
        dbt_log(DBT_LOG_WARN, "redis_fixed", f, sizeof f / sizeof *f);
    }
}

bool dbt_pool_warn_due(dbt_pool *p, dbt_warn_kind k, uint64_t *quiet)
{
    int64_t now = dbt_now_us();
    if (now < p->warn_next_us[k]) {
        p->warn_quiet[k]++;
        return false;
    }
    *quiet = p->warn_quiet[k];
    p->warn_quiet[k] = 0;
    p->warn_next_us[k] = now + DBT_WARN_EVERY_US;
    return true;
}

/* ---- slots ------------------------------------------------------------------------------- */

static void write_one(int fd)
{
    uint64_t one = 1;
    ssize_t n;
    do
        n = write(fd, &one, sizeof one);
    while (n < 0 && errno == EINTR);
}

/* The wakes a listening thread keeps back (dbt_deliver_collect). */
enum { DELIVER_MAX = 16 };
static __thread struct {
    dbt_pool *pool; /* collecting for it (p->mu held), or NULL */
    int n;
    struct dbt_slot *slot[DELIVER_MAX];
    bool fresh[DELIVER_MAX];
} kept_back;
static __thread bool thread_is_ours;

void dbt_deliver_thread_is_ours(void)
{
    thread_is_ours = true;
}

void dbt_deliver_collect(dbt_pool *p)
{
    kept_back.pool = thread_is_ours ? p : NULL; /* a program's thread: no delivery here */
    kept_back.n = 0;
}

/* Keeps s's wake back: a parked acquire that holds a permit now. p->mu held. */
static bool keep_back(struct dbt_slot *s)
{
    dbt_pool *p = kept_back.pool;
    if (!p || s->pool != p || kept_back.n >= DELIVER_MAX || s->state != SLOT_HELD ||
        !atomic_load(&s->deliver_arg) || atomic_load(&s->notify_plus1) == 0)
        return false;
    dbt_lease_facts lease = dbt_slot_lease(p, s, dbt_now_us());
    atomic_fetch_add(&s->pending_wakes, 1); /* s is not freed before the flush */
    kept_back.slot[kept_back.n] = s;
    kept_back.fresh[kept_back.n] = !dbt_lease_stale(&lease);
    kept_back.n++;
    return true;
}

void dbt_deliver_flush(void)
{
    int n = kept_back.n;
    kept_back.pool = NULL;
    kept_back.n = 0;
    for (int i = 0; i < n; i++)
        dbt_slot_wake_later(kept_back.slot[i], kept_back.fresh[i]);
}

/* The slot whose wait the calling thread is running itself, while it takes what the host passed
 * (dbt_slot_wake_self): a wake for it needs no write, the thread is awake and looks at it next. */
static __thread struct dbt_slot *waking_self;

void dbt_slot_wake_self(struct dbt_slot *s)
{
    waking_self = s;
}

void dbt_slot_wake(struct dbt_slot *s)
{
    if (kept_back.pool && keep_back(s))
        return;
    atomic_fetch_add(&s->wakes, 1);
    if (s == waking_self && atomic_load(&s->notify_plus1) == 0)
        return;
    if (s->efd >= 0)
        write_one(s->efd);
    int notify = atomic_load(&s->notify_plus1) - 1;
    if (notify >= 0) { /* parked: the watch looks at it (dbt_acquire_wait_park) */
        atomic_fetch_add(&s->notified, 1);
        write_one(notify);
    }
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

void dbt_waker_publish(struct dbt_slot *s, dbt_waker *w)
{
    if (w && s->efd >= 0)
        dbt_waker_publish_fd(s, w, s->efd);
}

void dbt_waker_publish_fd(struct dbt_slot *s, dbt_waker *w, int fd)
{
    if (w && fd >= 0) {
        s->waker = w;
        atomic_store(&w->efd_plus1, fd + 1);
    }
}

/* After this, no firer can write to s->efd: it may be closed. */
void dbt_waker_retract(struct dbt_slot *s)
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

int64_t dbt_renewer_late_us(const dbt_pool *p)
{
    int64_t period = dbt_lease_shortest_us(p, dbt_now_us()) / 3;
    int64_t timeout = p->client->cfg->redis_timeout_ms * 1000;
    return (period > timeout ? period : timeout) + DBT_STALL_SLACK_US;
}

bool dbt_slot_unrenewed_cause(const dbt_pool *p, const struct dbt_slot *s, int64_t now, char *why,
                              size_t cap)
{
    int64_t stall = p->stall_seen_us > s->t_renewed_us ? p->stall_us : 0;
    /* Stalled now: the renewer is not back when it surely would be (this thread runs first). */
    if (p->bg_back_by_us && now > p->bg_back_by_us && now - p->bg_plan_us > stall)
        stall = now - p->bg_plan_us;
    if (stall > 0)
        snprintf(why, cap,
                 "this process was stopped or not scheduled "
                 "(its renewer could not run for %" PRId64 " ms); Redis was not the cause",
                 stall / 1000);
    else if (p->renew_failed_us > s->t_renewed_us)
        snprintf(why, cap, "Redis unreachable (renewals failed)");
    else if (p->renew_in_flight_us)
        snprintf(why, cap, "Redis has not answered a renewal for %" PRId64 " ms",
                 (now - p->renew_in_flight_us) / 1000);
    else {
        snprintf(why, cap, "this process was paused, or Redis unreachable");
        return false;
    }
    return true;
}

dbt_lease_facts dbt_slot_lease(const dbt_pool *p, const struct dbt_slot *s, int64_t now)
{
    return (dbt_lease_facts){.lost = s->lost,
                             .unrenewed_us = now - s->t_renewed_us,
                             .lease_us = s->lease_us,
                             .quarantine_us =
                                 dbt_quarantine_for_ms(s->lease_us / 1000, p->client->cfg) * 1000};
}

bool dbt_slot_expire_unrenewed(dbt_pool *p, struct dbt_slot *s, int64_t now)
{
    if (s->state != SLOT_HELD || s->lost)
        return s->lost;
    if (now - s->t_renewed_us <= s->lease_us)
        return false;
    char cause[160], why[200];
    bool known = dbt_slot_unrenewed_cause(p, s, now, cause, sizeof cause);
    snprintf(why, sizeof why,
             known ? "not renewed for a whole lease: %s" : "not renewed for a whole lease (%s)",
             cause);
    dbt_slot_mark_lost(p, s, DBT_LOG_ERROR, why);
    s->lapsed = true;
    return true;
}

#define MAX_SPARE 64

bool dbt_recycle_slot(dbt_pool *p, struct dbt_slot *s)
{
    /* A slot with a wake promised to it is not reused: that write must find it as it was. No
     * new one can be promised: only waiting slots get them, and nothing refers to s any more. */
    if (s->efd < 0 || s->waker || p->nspare >= MAX_SPARE || atomic_load(&s->pending_wakes) > 0)
        return false;
    /* Not a slot of the parent in a fork()ed child (its eventfd is the parent's object too), nor
     * one released while the pool is freed (its spares are gone already). */
    if (s->gen != p->gen || p->exiting)
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

static const dbt_deliver_ops *_Atomic deliver_ops;

void dbt_acquire_set_deliver(const dbt_deliver_ops *ops)
{
    atomic_store(&deliver_ops, ops);
}

void dbt_slot_wake_later(struct dbt_slot *s, bool deliverable)
{
    /* A parked acquire's own side says whether it takes the permit here (claim): then it is
     * served in this thread, and the promised wake is kept for nobody (the slot is its now). */
    const dbt_deliver_ops *ops = atomic_load(&deliver_ops);
    void *arg = deliverable && ops ? atomic_load(&s->deliver_arg) : NULL;
    if (arg && ops->claim(arg, thread_is_ours)) {
        atomic_fetch_sub(&s->pending_wakes, 1);
        ops->serve(arg);
        return;
    }
    dbt_slot_wake(s);
    atomic_fetch_sub(&s->pending_wakes, 1);
}

void dbt_retire_slot(dbt_pool *p, struct dbt_slot *s)
{
    pthread_mutex_lock(&p->mu);
    bool kept = dbt_recycle_slot(p, s);
    pthread_mutex_unlock(&p->mu);
    if (!kept)
        dbt_free_slot(s);
}

void dbt_free_slot(struct dbt_slot *s)
{
    if (!s)
        return;
    /* A thread that passed this slot a permit may not have written to its eventfd yet: a few
     * instructions away (the owner can see the grant before the wake). */
    while (atomic_load(&s->pending_wakes) > 0)
        sched_yield();
    dbt_waker_retract(s);
    if (s->efd >= 0)
        close(s->efd);
    free(s->query);
    free(s);
}

/* ---- deferred operations ------------------------------------------------------------------ */

/* A release (or a cancel) Redis could not be told of: kept and sent when Redis answers again,
 * so the permit is not lost to the pool for a whole lease after a short outage (a phantom holder
 * that nobody renews still counts until its lease ends). */
void dbt_defer_op(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id, int64_t held_ms)
{
    pthread_mutex_lock(&p->mu);
    dbt_defer_op_held(p, what, kind, id, held_ms);
    pthread_mutex_unlock(&p->mu);
}

void dbt_defer_op_held(dbt_pool *p, dbt_owed_what what, dbt_kind kind, const char *id,
                       int64_t held_ms)
{
    if (p->ndeferred < DBT_MAX_DEFERRED) {
        p->deferred[p->ndeferred].what = what;
        p->deferred[p->ndeferred].kind = kind;
        p->deferred[p->ndeferred].held_ms = held_ms;
        snprintf(p->deferred[p->ndeferred].id, sizeof p->deferred[0].id, "%s", id);
        p->ndeferred++;
        if (!p->exiting) /* a pool being freed has stopped its renewer for good */
            dbt_pool_start_bg(p);
        pthread_cond_signal(&p->bg_cv); /* it sends them as soon as Redis answers */
    } else if (p->deferred_dropped++ == 0) {
        /* Not silent: a dropped release pins its permit, a dropped cancel leaves a place that
         * is granted to nobody, each until its lease ends. Said once a pool (a long outage
         * under heavy traffic would say it for every command); it is in the log under the
         * lock, a write to the log, never a call to Redis. */
        dbt_field f[] = {DBT_S("pool", p->name), DBT_S("kind", dbt_kind_name(kind)),
                         DBT_S("why", "more releases and cancels owed to Redis than can be kept"),
                         DBT_S("effect", "the permits or queue places of those not kept return "
                                         "when their leases end")};
        dbt_log(DBT_LOG_WARN, "owed_dropped", f, sizeof f / sizeof *f);
    }
}

/* ---- a permit's state ------------------------------------------------------------------ */

const char *dbt_permit_id(const dbt_permit *s)
{
    return s->id;
}

void dbt_permit_note_idle(dbt_permit *s, bool idle)
{
    pthread_mutex_lock(&s->pool->mu);
    int64_t now = dbt_now_us();
    s->idle_since_us = idle ? now : 0;
    s->idle_warned = false;
    s->doing_since_us = now;
    pthread_mutex_unlock(&s->pool->mu);
}

void dbt_pool_note_hold(dbt_pool *p, dbt_kind kind, const char *klass, int64_t held_ms)
{
    dbt_local_hist_add(&p->unreported_holds[kind], p->hist_bounds, p->nbounds, klass, held_ms);
}

void dbt_pool_note_kept_hold(dbt_pool *p, const struct dbt_slot *s)
{
    dbt_pool_note_hold(p, s->kind, s->klass, (s->parked_us - s->t_grant_us) / 1000);
}

char dbt_slot_doing(const struct dbt_slot *s)
{
    return s->kind != DBT_KIND_QUERY ? DBT_DOING_UNCHANGED
           : s->parked               ? DBT_DOING_KEPT
           : s->idle_since_us        ? DBT_DOING_IDLE_TX
                                     : DBT_DOING_RUNNING;
}

void dbt_slot_doing_begin(struct dbt_slot *s, bool granted_by_redis, int64_t now)
{
    s->doing_sent = granted_by_redis ? dbt_slot_doing(s) : '\0';
    s->doing_since_us = now;
}

void dbt_pool_count_unthrottled(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->st.unthrottled++;
    if (p->in_outage)
        p->outage_unthrottled++; /* what the outage cost, as dbthrottle status reports it */
    pthread_mutex_unlock(&p->mu);
}

const char *dbt_pool_cid(const dbt_pool *p)
{
    return p->cid[0] ? p->cid : p->client->cid;
}

/* In a fork()ed child: a new lock; the parent's connections closed, its slots and deferred
 * operations forgotten (they stay the parent's), a new generation, no outage. */
static void after_fork(dbt_pool *p)
{
    dbt_pool_mutex_init(&p->mu);
    pthread_cond_init(&p->conn_cv, NULL);
    /* The child has a client cid of its own, and is in no host group until it attaches. */
    p->cid[0] = p->group[0] = p->prev_cid[0] = '\0';
    p->ndeferred = 0; /* the parent's releases: the parent sends them */
    /* Every connection is freed, those another thread of the parent was using too: that thread
     * does not exist here, and a process that forks again and again (a pre-fork server whose
     * parent waits) must not pile them up. Freeing sends nothing: the socket is only closed. */
    for (int i = 0; i < DBT_MAX_CONNS; i++) {
        dbt_redis_free(p->all_conns[i]);
        p->all_conns[i] = NULL;
    }
    p->nfree = p->nconns = 0;
    /* The parent's slots are the parent's: permits it holds stay with it. Places in the queue
     * kept for the parent's next waiter (handover.c) are the pool's own copies here: freed. */
    for (struct dbt_slot *s = p->slots, *next; s; s = next) {
        next = s->next;
        /* A wake another thread of the parent was about to write: that thread is not here. */
        atomic_store(&s->pending_wakes, 0);
        /* So are the waits of the parent's other threads (their threads are not here): their
         * slots and eventfds are freed. A held permit is left to its connection, which forgets
         * it (dbt_release of a permit from before the fork only frees it). */
        bool waiting = s->state != SLOT_HELD && s->state != SLOT_RETURNED;
        if (s->orphan || waiting) {
            if (s->efd >= 0)
                close(s->efd);
            free(s->query);
            free(s);
        }
    }
    p->slots = NULL;
    /* Spare slots' eventfds are the parent's objects too (a fork shares them): closed. */
    dbt_free_spares(p);
    p->nqueued = p->nheld = 0;
    p->gen++;
    p->in_outage = false;
    p->outage_said = false;
    p->down_until_us = 0;
    p->misconfig_probe_us = 0; /* the child checks for itself at its first acquire */
    memset(&p->st, 0, sizeof p->st);
    /* and the periodic summary's marks with them (DBTHROTTLE_LOG_STATS): the child's first line
     * covers the child alone, never its counters minus the parent's */
    memset(&p->stats_shown, 0, sizeof p->stats_shown);
    p->stats_wait_max_us = 0;
    p->stats_line_us = 0;
    p->outage_since_ms = p->outage_until_ms = 0;
    p->outage_unthrottled = p->outage_refused = 0;
    p->outage_error_us = p->outage_ended_us = 0;
    memset(p->warn_next_us, 0, sizeof p->warn_next_us);
    memset(p->warn_quiet, 0, sizeof p->warn_quiet);
    memset(p->quarantine_until_us, 0, sizeof p->quarantine_until_us);
    p->renew_now = false;
    p->renew_at_us = 0;
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_FIRST, after_fork); /* a new lock, the parent's slots gone */
}
