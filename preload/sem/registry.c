/* registry.c - the process registry: who uses a pool, and whether it throttles.
 *
 * Each renewal (renew.lua, every lease/3 while the process holds or waits) carries the process'
 * record: host, pid, program, version, its state (throttling, refusing for a permanent error,
 * disabled), what the last Redis outage cost (commands run unthrottled or refused, since and until
 * when), how many permits it holds idle in a transaction, and the host group it shares permits
 * with (host-level sharing), if any. A process with nothing to renew
 * sends an empty renewal once a lease (its heartbeat, from the same thread), so it stays listed;
 * a program that never uses libpq has no pool and sends nothing. The record expires in Redis a
 * little after the process stops reporting, and the exit removes it. A process cut off from Redis
 * cannot write: dbthrottle status tells it by the record's age (silent_after_ms) and shows what
 * its mode makes it do meanwhile. No command pays a round trip for any of this. */
#include "registry.h"
#include "clock.h"
#include "lease.h"
#include "live.h"
#include "pool.h"
#include "settings.h"
#include "version.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int64_t dbt_registry_heartbeat_us(const dbt_pool *p)
{
    return dbt_lease_us(p);
}

void dbt_registry_record(dbt_pool *p, char *out, int64_t *ttl_ms)
{
    const dbt_config *cfg = p->client->cfg;
    dbt_proc_record r = {0};
    snprintf(r.host, sizeof r.host, "%s", p->client->host);
    r.pid = (long)getpid();
    r.ppid = (long)getppid();
    r.pgid = (long)getpgrp();
    snprintf(r.program, sizeof r.program, "%s", program_invocation_short_name);
    snprintf(r.version, sizeof r.version, "%s", DBT_VERSION);
    if (cfg->disable) {
        snprintf(r.state, sizeof r.state, "disabled");
        snprintf(r.reason, sizeof r.reason, "DBTHROTTLE_DISABLE=on");
    } else if (p->misconfig[0]) {
        snprintf(r.state, sizeof r.state, "refusing");
        snprintf(r.reason, sizeof r.reason, "%s", p->misconfig);
    } else if (dbt_pool_any_shadow(p)) {
        /* Counted, never held back: status says so, as loudly as a refusing process; and of
         * which kinds, when not all (the others are enforced). */
        snprintf(r.state, sizeof r.state, "shadow");
        dbt_mode m[DBT_NKINDS];
        for (int k = 0; k < DBT_NKINDS; k++)
            m[k] = (dbt_mode)atomic_load(&p->mode[k]);
        char mode[64];
        dbt_mode_show(m, (1u << DBT_NKINDS) - 1, mode, sizeof mode);
        bool all = !strchr(mode, '=');
        const char *what = all                                    ? "nothing waits or is refused"
                           : m[DBT_KIND_QUERY] == DBT_MODE_SHADOW ? "no query waits or is refused"
                                                                  : "no connection waits or is "
                                                                    "refused";
        /* where the mode came from: the process' own, or the operator's live switch */
        if (dbt_pool_live_sets(p, offsetof(dbt_config, mode)))
            snprintf(r.reason, sizeof r.reason, "mode %s, live (dbthrottle mode): %s", mode, what);
        else
            snprintf(r.reason, sizeof r.reason, "DBTHROTTLE_MODE=%s: %s", mode, what);
    } else {
        snprintf(r.state, sizeof r.state, "throttling");
    }
    /* What it does cut off from Redis: shadow mode runs its commands, as open mode does (closed
     * while a kind enforces closed). */
    snprintf(r.mode, sizeof r.mode, "%s",
             (dbt_pool_shadow(p, DBT_KIND_QUERY) && dbt_pool_shadow(p, DBT_KIND_CONN)) ||
                     atomic_load(&p->on_redis_error) == DBT_ON_ERROR_OPEN
                 ? "open"
                 : "closed");
    r.unthrottled = p->st.unthrottled;
    r.refused = p->st.refusals;
    r.timeouts = p->st.timeouts;
    r.outage_since_ms = p->outage_since_ms;
    /* An outage still on as this is sent ends with it, if it reaches Redis. */
    r.outage_until_ms = p->in_outage && p->outage_since_ms ? dbt_wall_ms() : p->outage_until_ms;
    r.outage_unthrottled = p->outage_unthrottled;
    r.outage_refused = p->outage_refused;
    /* The promise: a report at least this often (the heartbeat's period; renewals come every
     * lease/3 while the process holds or waits). */
    r.every_ms = dbt_registry_heartbeat_us(p) / 1000;
    r.silent_after_ms = r.every_ms + cfg->redis_timeout_ms + 1000;
    r.held = p->nheld;
    r.waiting = p->nqueued;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_HELD && s->idle_since_us)
            r.idle_in_tx++;
    /* Which host group it passes permits with, so that status shows who shares with whom. */
    snprintf(r.group, sizeof r.group, "%s", p->group);
    /* Which live settings it applied (live.c), so that status shows who lags or refuses. */
    r.live_version = p->live ? p->live->version : 0;
    snprintf(r.live_refused, sizeof r.live_refused, "%s", p->live ? p->live->refused_keys : "");
    dbt_live_own_format(cfg, r.own, sizeof r.own);
    if (!dbt_format_record(&r, out, DBT_RECORD_MAX))
        out[0] = '\0';
    /* Listed as silent (cut off, stopped) for a lease before it goes. */
    *ttl_ms = r.silent_after_ms + dbt_lease_us(p) / 1000;
}

void dbt_pool_announce(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    if (!p->thread_started)
        dbt_pool_start_bg(p);
    pthread_mutex_unlock(&p->mu);
}

/* Who else may hold what this process waits for: on this host, its parent or a process of its
 * process group (pg_dump -j's workers are its children; a shell pipeline is one process group). */
static bool related(const dbt_proc_record *r, const char *host, bool *parent)
{
    *parent = r->pid == (long)getppid();
    return strcmp(r->host, host) == 0 && r->pid != (long)getpid() &&
           (*parent || r->pgid == (long)getpgrp()) && r->idle_in_tx > 0;
}

/* The related process that holds permits idle in a transaction, from the pool's registry: false
 * when none (or Redis did not answer). */
static bool related_idle_holder(dbt_pool *p, dbt_proc_record *found, bool *parent)
{
    char err[DBT_ERRLEN];
    int64_t b = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    dbt_redis *r = dbt_pool_get_conn(p, err);
    const char *argv[] = {"HGETALL", p->keys.procinfo};
    redisReply *rep = r ? dbt_redis_command(r, 2, argv, NULL, err) : NULL;
    dbt_pool_put_conn(p, r);
    dbt_redis_budget_end(b);
    bool ok = false;
    if (rep && rep->type == REDIS_REPLY_ARRAY)
        for (size_t i = 1; i < rep->elements && !ok; i += 2) {
            const redisReply *v = rep->element[i];
            ok = v->type == REDIS_REPLY_STRING && dbt_parse_record(v->str, found) &&
                 related(found, p->client->host, parent);
        }
    if (rep)
        freeReplyObject(rep);
    return ok;
}

bool dbt_pool_explain_wait(dbt_pool *p, char *out, size_t cap)
{
    out[0] = '\0';
    long mine = 0;
    pthread_mutex_lock(&p->mu);
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->state == SLOT_HELD && s->idle_since_us && s->gen == p->gen)
            mine++;
    pthread_mutex_unlock(&p->mu);
    char who[160];
    long n = mine;
    dbt_proc_record r;
    bool parent = false;
    if (mine > 0)
        snprintf(who, sizeof who, "this process itself");
    else if (related_idle_holder(p, &r, &parent)) {
        snprintf(who, sizeof who, "%s %ld (%.40s)", parent ? "its parent process" : "process",
                 r.pid, r.program);
        n = r.idle_in_tx;
    } else {
        return false;
    }
    snprintf(out, cap,
             "%s%s holds %ld permit%s of this pool idle in a transaction while this one waits: "
             "probably a deadlock (a program waiting for its own sessions, as pg_dump -j does, or "
             "the writer of a pipeline waiting for its reader). Fix: a limit above the sessions "
             "it opens at once (pg_dump/pg_restore -j N needs at least N + 1), exempt one side "
             "(DBTHROTTLE_EXEMPT=application_name=pg_dump), or run it without the throttle; see "
             "\"Deadlocks\" in dbthrottle's docs/operations.md",
             who, parent || mine ? "" : " of its process group", n, n == 1 ? "" : "s");
    return true;
}
