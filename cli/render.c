/* render.c - the pool views as a table (status, top), JSON (status --json) and Prometheus text
 * (status --prometheus). */
#include "cli.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *const kind_json[DBT_NKINDS] = {"queries", "connections"};

void cli_duration(int64_t ms, char *out, size_t cap)
{
    if (ms < 0)
        ms = 0;
    if (ms < 1000)
        snprintf(out, cap, "%" PRId64 "ms", ms);
    else if (ms < 60000)
        snprintf(out, cap, "%.1fs", (double)ms / 1000.0);
    else if (ms < 3600000)
        snprintf(out, cap, "%" PRId64 "m%02" PRId64 "s", ms / 60000, ms / 1000 % 60);
    else
        snprintf(out, cap, "%" PRId64 "h%02" PRId64 "m", ms / 3600000, ms / 60000 % 60);
}

/* ---- text ----------------------------------------------------------------------------------- */

/* Why a semaphore is in quarantine (docs/design.md, "Failover and data loss"), in words. */
static const char *quarantine_why(const char *why)
{
    if (strcmp(why, "lost") == 0)
        return "data lost";
    if (strcmp(why, "restarted") == 0)
        return "server restarted without the pool's state";
    return "server changed";
}

void cli_render_classes(FILE *out, const dbt_status_kind *k)
{
    if (!k->nclasses)
        return;
    char aging[40] = "no aging bound", d[24];
    if (k->aging_ms > 0) {
        cli_duration(k->aging_ms, d, sizeof d);
        snprintf(aging, sizeof aging, "aging bound %s", d);
    }
    fprintf(out, "  classes (%s), %s:\n",
            k->classes_shipped ? "shipped: a worker's DBTHROTTLE_CLASSES" : "operator's", aging);
    fprintf(out, "  %-20s %5s %9s %5s %8s %7s %11s %8s %8s %9s\n", "CLASS", "SHARE", "GUARANTEE",
            "HELD", "BORROWED", "WAITING", "OLDEST WAIT", "PRIORITY", "WAIT", "QUEUE CAP");
    bool limit_known = cli_effective_limit(k) > 0;
    for (int i = 0; i < k->nclasses; i++) {
        const dbt_status_class *c = &k->classes[i];
        char name[80], share[8], g[24] = "?", oldest[24] = "-", wait[24] = "-", cap[24] = "-";
        dbt_escape(c->name, 32, false, name, sizeof name);
        snprintf(share, sizeof share, "%d%%", c->share);
        if (limit_known)
            snprintf(g, sizeof g, "%lld", c->guarantee);
        if (c->waiters && c->oldest_wait_ms > 0)
            cli_duration(c->oldest_wait_ms, oldest, sizeof oldest);
        if (c->wait_ms >= 0)
            cli_duration(c->wait_ms, wait, sizeof wait);
        if (c->cap >= 0)
            snprintf(cap, sizeof cap, "%lld", c->cap);
        fprintf(out, "  %-20s %5s %9s %5lld %8lld %7lld %11s %8d %8s %9s%s\n", name, share, g,
                c->held, c->borrowed, c->waiters, oldest, c->priority, wait, cap,
                c->is_default ? "  (default)" : "");
    }
}

/* Whether any listed entry carries a class tag or a weight (then the table shows both). */
static bool any_tagged(const dbt_status_entry *e, int n)
{
    for (int i = 0; i < n; i++)
        if (e[i].klass[0] || e[i].weight > 1)
            return true;
    return false;
}

/* The class and weight of a tagged entry, after its row; nothing for a table without tags. */
static void text_tag(FILE *out, const dbt_status_entry *e, bool tagged)
{
    if (tagged)
        fprintf(out, " %-12s %6d", e->klass[0] ? e->klass : "-", e->weight > 0 ? e->weight : 1);
    fputc('\n', out);
}

static void text_kind(FILE *out, const cli_pool_view *v, dbt_kind kind, const char *name)
{
    const dbt_status_kind *k = &v->kind[kind];
    char lim[96] = "unknown", d1[24], d2[24];
    if (k->override && k->limit_seen && k->override != k->limit_seen)
        snprintf(lim, sizeof lim, "%lld (operator override; workers ask %lld)", k->override,
                 k->limit_seen);
    else if (k->override)
        snprintf(lim, sizeof lim, "%lld (operator override)", k->override);
    else if (k->limit_seen)
        snprintf(lim, sizeof lim, "%lld", k->limit_seen);
    fprintf(out, "pool %s %s: limit %s, %lld holding, %lld waiting%s\n", name, dbt_kind_name(kind),
            lim, k->nholders, k->nwaiters, k->drained ? ", DRAINING (no new grants)" : "");
    cli_duration(k->counters[DBT_CTR_WAIT_MS], d1, sizeof d1);
    fprintf(out,
            "  grants %lld  queued %lld  refused %lld  cancelled %lld  expired %lld  "
            "evicted %lld  waited %s in all\n",
            k->counters[DBT_CTR_GRANTS], k->counters[DBT_CTR_QUEUED], k->counters[DBT_CTR_REFUSED],
            k->counters[DBT_CTR_CANCELLED], k->counters[DBT_CTR_EXPIRED],
            k->counters[DBT_CTR_EVICTED], d1);
    if (k->quarantine_ms > 0)
        fprintf(out,
                "  QUARANTINE: %lld ms left (%s): no new grants until the holders re-assert their "
                "permits\n",
                k->quarantine_ms, quarantine_why(k->why));
    if (k->counters[DBT_CTR_QUARANTINES] || k->counters[DBT_CTR_REASSERTED] ||
        k->counters[DBT_CTR_REQUEUED])
        fprintf(out, "  quarantines %lld  reasserted %lld  requeued %lld\n",
                k->counters[DBT_CTR_QUARANTINES], k->counters[DBT_CTR_REASSERTED],
                k->counters[DBT_CTR_REQUEUED]);
    if (k->counters[DBT_CTR_CLAMPED] || k->counters[DBT_CTR_CAPPED] || k->counters[DBT_CTR_AGED])
        fprintf(out, "  clamped %lld  capped %lld  aged %lld\n", k->counters[DBT_CTR_CLAMPED],
                k->counters[DBT_CTR_CAPPED], k->counters[DBT_CTR_AGED]);
    cli_render_classes(out, k);
    bool tagged = any_tagged(k->holders, k->nh) || any_tagged(k->waiters, k->nw);
    if (k->nh) {
        fprintf(out, "  %-6s %-4s %-28s %-20s %8s %-8s %9s %10s", "HOLDER", "", "PERMIT", "HOST",
                "PID", "CONN", "HELD", "LEASE LEFT");
        if (tagged)
            fprintf(out, " %-12s %6s", "CLASS", "WEIGHT");
        fputc('\n', out);
        for (int i = 0; i < k->nh; i++) {
            const dbt_status_entry *e = &k->holders[i];
            cli_duration(v->now_ms - e->since_ms, d1, sizeof d1);
            cli_duration(e->expiry_ms - v->now_ms, d2, sizeof d2);
            fprintf(out, "  %-6s %-4s %-28s %-20s %8ld %-8s %9s %10s", "", "", e->permit,
                    e->host[0] ? e->host : "?", e->pid, e->conn[0] ? e->conn : "?",
                    e->since_ms ? d1 : "?", d2);
            text_tag(out, e, tagged);
        }
        /* nholders counts units: a weight-w permit is w of them. */
        long long listed = 0;
        for (int i = 0; i < k->nh; i++)
            listed += k->holders[i].weight > 1 ? k->holders[i].weight : 1;
        if (listed < k->nholders)
            fprintf(out, "  ... and %lld more %s\n", k->nholders - listed,
                    tagged ? "units held" : "holders");
    }
    if (k->nw) {
        fprintf(out, "  %-6s %-4s %-28s %-20s %8s %-8s %9s", "WAITER", "POS", "PERMIT", "HOST",
                "PID", "CONN", "WAITED");
        if (tagged)
            fprintf(out, " %10s %-12s %6s", "", "CLASS", "WEIGHT");
        fputc('\n', out);
        for (int i = 0; i < k->nw; i++) {
            const dbt_status_entry *e = &k->waiters[i];
            cli_duration(v->now_ms - e->since_ms, d1, sizeof d1);
            fprintf(out, "  %-6s %-4d %-28s %-20s %8ld %-8s %9s", "", i + 1, e->permit,
                    e->host[0] ? e->host : "?", e->pid, e->conn[0] ? e->conn : "?",
                    e->since_ms ? d1 : "?");
            if (tagged)
                fprintf(out, " %10s", "");
            text_tag(out, e, tagged);
        }
        if (k->nw < k->nwaiters)
            fprintf(out, "  ... and %lld more waiters\n", k->nwaiters - k->nw);
    }
}

/* ---- the processes -------------------------------------------------------------------------- */

/* How bad a state is: a process listed in several pools shows its worst. */
static int severity(const char *state)
{
    return strcmp(state, "refusing") == 0      ? 3
           : strcmp(state, "unthrottled") == 0 ? 2
           : strcmp(state, "disabled") == 0    ? 1
                                               : 0;
}

/* One record's state, as it says, or, when the process has not reported for longer than it
 * promised, what its mode makes it do if it runs on cut off from Redis. */
static const char *state_of(const dbt_proc_record *r, int64_t now_ms, char *reason, size_t cap)
{
    int64_t silent = now_ms - r->seen_ms;
    if (r->silent_after_ms > 0 && silent > r->silent_after_ms && strcmp(r->state, "disabled")) {
        char d[24];
        cli_duration(silent, d, sizeof d);
        bool open = strcmp(r->mode, "closed") != 0;
        snprintf(reason, cap,
                 "not heard from for %s: cut off from Redis (or stopped, or gone); "
                 "on_redis_error=%s: %s",
                 d, open ? "open" : "closed",
                 open ? "its commands run unthrottled" : "its commands are refused");
        return open ? "unthrottled" : "refusing";
    }
    snprintf(reason, cap, "%s", r->reason);
    return strcmp(r->state, "refusing") == 0   ? "refusing"
           : strcmp(r->state, "disabled") == 0 ? "disabled"
                                               : "throttling";
}

static int by_host_pid(const void *a, const void *b)
{
    const cli_process *x = a, *y = b;
    int c = strcmp(x->rec->host, y->rec->host);
    return c ? c : (x->rec->pid > y->rec->pid) - (x->rec->pid < y->rec->pid);
}

int cli_processes(const cli_pool_view *v, int n, cli_process **out)
{
    int total = 0, np = 0;
    for (int i = 0; i < n; i++)
        total += v[i].nprocs;
    cli_process *ps = calloc((size_t)(total ? total : 1), sizeof *ps);
    if (!ps)
        return -1;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < v[i].nprocs; j++) {
            const dbt_proc_record *r = &v[i].procs[j];
            cli_process *p = NULL;
            for (int k = 0; k < np && !p; k++)
                if (strcmp(ps[k].rec->cid, r->cid) == 0)
                    p = &ps[k];
            if (!p) {
                p = &ps[np++];
                p->rec = r;
                p->state = "throttling";
            } else if (r->seen_ms > p->rec->seen_ms) {
                p->rec = r;
            }
            if (p->npools < (int)(sizeof p->pools / sizeof *p->pools))
                p->pools[p->npools++] = v[i].name;
            char reason[320];
            const char *st = state_of(r, v[i].now_ms, reason, sizeof reason);
            if (severity(st) > severity(p->state) || (p->npools == 1)) {
                p->state = st;
                snprintf(p->reason, sizeof p->reason, "%s", reason);
            }
            int64_t silent = v[i].now_ms - r->seen_ms;
            if (p->npools == 1 || silent < p->silent_ms)
                p->silent_ms = silent;
            p->unthrottled += r->unthrottled;
            p->refused += r->refused;
            p->timeouts += r->timeouts;
            p->held += r->held;
            p->waiting += r->waiting;
            p->idle_in_tx += r->idle_in_tx;
            if (r->outage_since_ms > p->outage_since_ms) {
                p->outage_since_ms = r->outage_since_ms;
                p->outage_until_ms = r->outage_until_ms;
                p->outage_unthrottled = r->outage_unthrottled;
                p->outage_refused = r->outage_refused;
            }
        }
    if (np > 1)
        qsort(ps, (size_t)np, sizeof *ps, by_host_pid);
    *out = ps;
    return np;
}

/* "2026-11-24T01:02:03Z" of a wall-clock time in ms. */
static void utc(long long ms, char *out, size_t cap)
{
    time_t t = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(out, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static void text_processes(FILE *out, const cli_pool_view *v, int n)
{
    cli_process *ps;
    int np = cli_processes(v, n, &ps);
    if (np <= 0) {
        if (np == 0)
            free(ps);
        return;
    }
    fprintf(out, "\nprocesses: %d\n  %-20s %8s %-16s %-8s %-11s %5s %5s %s\n", np, "HOST", "PID",
            "PROGRAM", "VERSION", "STATE", "HELD", "WAIT", "POOLS / DETAIL");
    for (int i = 0; i < np; i++) {
        const cli_process *p = &ps[i];
        char pools[300] = "";
        size_t len = 0;
        for (int k = 0; k < p->npools && len < sizeof pools; k++) {
            char name[300];
            dbt_escape(p->pools[k], 100, true, name, sizeof name);
            len += (size_t)snprintf(pools + len, sizeof pools - len, "%s%s", k ? "," : "", name);
        }
        char prog[64], host[64];
        dbt_escape(p->rec->program, 16, false, prog, sizeof prog);
        dbt_escape(p->rec->host, 20, false, host, sizeof host);
        fprintf(out, "  %-20s %8ld %-16s %-8s %-11s %5ld %5ld %s\n", host, p->rec->pid, prog,
                p->rec->version, p->state, p->held, p->waiting, pools);
        if (p->reason[0])
            fprintf(out, "  %-20s %8s %s\n", "", "", p->reason);
        if (p->idle_in_tx)
            fprintf(out, "  %-20s %8s holds %ld permit%s idle in a transaction\n", "", "",
                    p->idle_in_tx, p->idle_in_tx == 1 ? "" : "s");
        if (p->outage_since_ms) {
            char since[32], until[32] = "now";
            utc(p->outage_since_ms, since, sizeof since);
            if (p->outage_until_ms)
                utc(p->outage_until_ms, until, sizeof until);
            fprintf(out,
                    "  %-20s %8s last Redis outage %s to %s: %llu commands unthrottled, %llu "
                    "refused\n",
                    "", "", since, until, p->outage_unthrottled, p->outage_refused);
        }
    }
    free(ps);
}

void cli_render_text(FILE *out, const cli_pool_view *v, int n, const char *prefix)
{
    char ep[300];
    dbt_escape(prefix, 256, true, ep, sizeof ep);
    if (n == 0) {
        fprintf(out, "no pools under the key prefix %s\n", ep);
        return;
    }
    for (int i = 0; i < n; i++) {
        char name[300];
        dbt_escape(v[i].name, 256, true, name, sizeof name);
        bool any = false;
        for (int kind = 0; kind < DBT_NKINDS; kind++)
            /* A kind with class definitions only is shown too: the operator set them. */
            if (v[i].kind[kind].used || v[i].kind[kind].nclasses) {
                if (any || i)
                    fputc('\n', out);
                text_kind(out, &v[i], (dbt_kind)kind, name);
                any = true;
            }
        if (!any && v[i].nprocs)
            fprintf(out, "%spool %s: idle (%d processes use it)\n", i ? "\n" : "", name,
                    v[i].nprocs);
        else if (!any)
            fprintf(out, "%spool %s: no holders, waiters or counters (its keys are expiring)\n",
                    i ? "\n" : "", name);
    }
    text_processes(out, v, n);
}

/* ---- JSON ----------------------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1-4), or 0 when the bytes there are not one. */
static int utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80             ? 1
            : (s[0] & 0xE0) == 0xC0 ? 2
            : (s[0] & 0xF0) == 0xE0 ? 3
            : (s[0] & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (n == 2 && s[0] < 0xC2)
        return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

/* A JSON string: always valid (control bytes as \u00XX, bytes that are not UTF-8 as U+FFFD). */
static void json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = utf8_len(p);
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else if (n > 0)
            fwrite(p, 1, (size_t)n, out);
        else
            fputs("\\ufffd", out);
        p += n > 0 ? n : 1;
    }
    fputc('"', out);
}

static void json_int_or_null(FILE *out, long long v)
{
    if (v)
        fprintf(out, "%lld", v);
    else
        fputs("null", out);
}

static void json_entry(FILE *out, const dbt_status_entry *e)
{
    fputs("\"permit\":", out);
    json_str(out, e->permit);
    fputs(",\"host\":", out);
    json_str(out, e->host);
    fprintf(out, ",\"pid\":%ld,\"conn\":", e->pid);
    json_str(out, e->conn);
    fprintf(out, ",\"since_ms\":%" PRId64 ",\"class\":", e->since_ms);
    if (e->klass[0])
        json_str(out, e->klass);
    else
        fputs("null", out);
    fprintf(out, ",\"weight\":%d", e->weight > 0 ? e->weight : 1);
}

static void json_kind(FILE *out, const cli_pool_view *v, const dbt_status_kind *k)
{
    fputs("{\"limit\":", out);
    json_int_or_null(out, cli_effective_limit(k));
    fputs(",\"limit_seen\":", out);
    json_int_or_null(out, k->limit_seen);
    fputs(",\"override\":", out);
    json_int_or_null(out, k->override);
    fprintf(out, ",\"draining\":%s,\"quarantine_ms\":%lld,\"quarantine_why\":",
            k->drained ? "true" : "false", k->quarantine_ms);
    if (k->quarantine_ms > 0)
        json_str(out, k->why);
    else
        fputs("null", out);
    fprintf(out, ",\"holders_count\":%lld,\"waiters_count\":%lld,\"holders\":[", k->nholders,
            k->nwaiters);
    for (int i = 0; i < k->nh; i++) {
        fputs(i ? ",{" : "{", out);
        json_entry(out, &k->holders[i]);
        fprintf(out, ",\"held_ms\":%" PRId64 ",\"lease_left_ms\":%" PRId64 "}",
                v->now_ms - k->holders[i].since_ms, k->holders[i].expiry_ms - v->now_ms);
    }
    fputs("],\"waiters\":[", out);
    for (int i = 0; i < k->nw; i++) {
        fprintf(out, "%s{\"position\":%d,", i ? "," : "", i + 1);
        json_entry(out, &k->waiters[i]);
        fprintf(out, ",\"waited_ms\":%" PRId64 "}", v->now_ms - k->waiters[i].since_ms);
    }
    fputs("],\"counters\":{", out);
    for (int c = 0; c < DBT_NCOUNTERS; c++)
        fprintf(out, "%s\"%s\":%lld", c ? "," : "", dbt_counter_names[c], k->counters[c]);
    fprintf(out, "},\"aging_ms\":%lld,\"classes_shipped\":%s,\"classes\":[", k->aging_ms,
            k->classes_shipped ? "true" : "false");
    for (int i = 0; i < k->nclasses; i++) {
        const dbt_status_class *c = &k->classes[i];
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        json_str(out, c->name);
        fprintf(out, ",\"share\":%d,\"priority\":%d,\"wait_ms\":", c->share, c->priority);
        if (c->wait_ms >= 0)
            fprintf(out, "%lld", c->wait_ms);
        else
            fputs("null", out);
        fputs(",\"queue_cap\":", out);
        if (c->cap >= 0)
            fprintf(out, "%lld", c->cap);
        else
            fputs("null", out);
        fprintf(out,
                ",\"guarantee\":%lld,\"held\":%lld,\"borrowed\":%lld,\"waiters\":%lld,"
                "\"oldest_wait_ms\":%lld,\"default\":%s}",
                c->guarantee, c->held, c->borrowed, c->waiters, c->oldest_wait_ms,
                c->is_default ? "true" : "false");
    }
    fputs("]}", out);
}

static void json_processes(FILE *out, const cli_pool_view *v, int n)
{
    cli_process *ps;
    int np = cli_processes(v, n, &ps);
    fputs(",\"processes\":[", out);
    for (int i = 0; i < np; i++) {
        const cli_process *p = &ps[i];
        const dbt_proc_record *r = p->rec;
        fputs(i ? ",{\"id\":" : "{\"id\":", out);
        json_str(out, r->cid);
        fputs(",\"host\":", out);
        json_str(out, r->host);
        fprintf(out, ",\"pid\":%ld,\"ppid\":%ld,\"program\":", r->pid, r->ppid);
        json_str(out, r->program);
        fputs(",\"version\":", out);
        json_str(out, r->version);
        fputs(",\"state\":", out);
        json_str(out, p->state);
        fputs(",\"reason\":", out);
        json_str(out, p->reason);
        fputs(",\"on_redis_error\":", out);
        json_str(out, r->mode);
        fputs(",\"pools\":[", out);
        for (int k = 0; k < p->npools; k++) {
            if (k)
                fputc(',', out);
            json_str(out, p->pools[k]);
        }
        fprintf(out,
                "],\"last_seen_ms\":%lld,\"silent_ms\":%" PRId64 ",\"report_every_ms\":%lld,"
                "\"held\":%ld,\"waiting\":%ld,\"idle_in_transaction\":%ld,"
                "\"unthrottled_commands\":%llu,\"refused_commands\":%llu,\"timeouts\":%llu,"
                "\"last_outage\":",
                r->seen_ms, p->silent_ms, r->every_ms, p->held, p->waiting, p->idle_in_tx,
                p->unthrottled, p->refused, p->timeouts);
        if (p->outage_since_ms) {
            fprintf(out, "{\"since_ms\":%lld,\"until_ms\":", p->outage_since_ms);
            json_int_or_null(out, p->outage_until_ms);
            fprintf(out, ",\"unthrottled_commands\":%llu,\"refused_commands\":%llu}}",
                    p->outage_unthrottled, p->outage_refused);
        } else {
            fputs("null}", out);
        }
    }
    fputc(']', out);
    if (np >= 0)
        free(ps);
}

void cli_render_json(FILE *out, const cli_pool_view *v, int n, const char *prefix)
{
    int64_t now = n ? v[0].now_ms : 0;
    fputs("{\"version\":1,\"prefix\":", out);
    json_str(out, prefix);
    fprintf(out, ",\"time_ms\":%" PRId64 ",\"pools\":[", now);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",{\"name\":" : "{\"name\":", out);
        json_str(out, v[i].name);
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            fprintf(out, ",\"%s\":", kind_json[kind]);
            json_kind(out, &v[i], &v[i].kind[kind]);
        }
        fputc('}', out);
    }
    fputc(']', out);
    json_processes(out, v, n);
    fputs("}\n", out);
}

/* ---- Prometheus ----------------------------------------------------------------------------- */

static void prom_label(FILE *out, const char *s)
{
    for (const char *p = s; *p; p++) {
        if (*p == '\\' || *p == '"')
            fprintf(out, "\\%c", *p);
        else if (*p == '\n')
            fputs("\\n", out);
        else
            fputc(*p, out);
    }
}

typedef enum {
    M_LIMIT,
    M_OVERRIDE,
    M_DRAINING,
    M_QUARANTINE,
    M_HOLDERS,
    M_WAITERS,
    M_COUNTER
} metric_src;

static void prom_metric(FILE *out, const cli_pool_view *v, int n, const char *name,
                        const char *type, const char *help, metric_src src, int counter)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int i = 0; i < n; i++)
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            const dbt_status_kind *k = &v[i].kind[kind];
            if (!k->used)
                continue;
            double val = 0;
            switch (src) {
            case M_LIMIT:
                if (!cli_effective_limit(k))
                    continue;
                val = (double)cli_effective_limit(k);
                break;
            case M_OVERRIDE:
                if (!k->override)
                    continue;
                val = (double)k->override;
                break;
            case M_DRAINING:
                val = k->drained;
                break;
            case M_QUARANTINE:
                val = (double)k->quarantine_ms / 1000.0;
                break;
            case M_HOLDERS:
                val = (double)k->nholders;
                break;
            case M_WAITERS:
                val = (double)k->nwaiters;
                break;
            case M_COUNTER:
                val = (double)k->counters[counter];
                if (counter == DBT_CTR_WAIT_MS)
                    val /= 1000.0;
                break;
            }
            fprintf(out, "%s{pool=\"", name);
            prom_label(out, v[i].name);
            fprintf(out, "\",kind=\"%s\"} %.17g\n", dbt_kind_name((dbt_kind)kind), val);
        }
}

/* One gauge per class: {pool, kind, class}. */
typedef enum { C_SHARE, C_GUARANTEE, C_HELD, C_BORROWED, C_WAITERS, C_OLDEST } class_metric;

static void prom_class_metric(FILE *out, const cli_pool_view *v, int n, const char *name,
                              const char *help, class_metric m)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s gauge\n", name, help, name);
    for (int i = 0; i < n; i++)
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            const dbt_status_kind *k = &v[i].kind[kind];
            if (m == C_GUARANTEE && !cli_effective_limit(k))
                continue; /* no limit known yet: no guarantee to state */
            for (int j = 0; j < k->nclasses; j++) {
                const dbt_status_class *c = &k->classes[j];
                double val = m == C_SHARE       ? c->share / 100.0
                             : m == C_GUARANTEE ? (double)c->guarantee
                             : m == C_HELD      ? (double)c->held
                             : m == C_BORROWED  ? (double)c->borrowed
                             : m == C_WAITERS   ? (double)c->waiters
                                                : (c->waiters ? c->oldest_wait_ms / 1000.0 : 0);
                fprintf(out, "%s{pool=\"", name);
                prom_label(out, v[i].name);
                fprintf(out, "\",kind=\"%s\",class=\"", dbt_kind_name((dbt_kind)kind));
                prom_label(out, c->name);
                fprintf(out, "\"} %.17g\n", val);
            }
        }
}

static void prom_classes(FILE *out, const cli_pool_view *v, int n)
{
    prom_class_metric(out, v, n, "dbthrottle_class_share",
                      "Class' guaranteed share of the limit (0 to 1), from its definition.",
                      C_SHARE);
    prom_class_metric(out, v, n, "dbthrottle_class_guarantee",
                      "Permits guaranteed to the class at the limit in force.", C_GUARANTEE);
    prom_class_metric(out, v, n, "dbthrottle_class_held",
                      "Permit units the class holds (a weight-w permit counts w).", C_HELD);
    prom_class_metric(out, v, n, "dbthrottle_class_borrowed",
                      "Units the class holds beyond its guarantee (idle capacity it borrowed).",
                      C_BORROWED);
    prom_class_metric(out, v, n, "dbthrottle_class_waiters", "Callers of the class queued.",
                      C_WAITERS);
    prom_class_metric(out, v, n, "dbthrottle_class_oldest_wait_seconds",
                      "How long the class' oldest waiter has waited (0: none waits).", C_OLDEST);
}

/* The processes per pool and state, and what their outages cost (a sum over the live processes:
 * a gauge, as processes come and go). */
static void prom_processes(FILE *out, const cli_pool_view *v, int n)
{
    static const char *const states[] = {"throttling", "unthrottled", "refusing", "disabled"};
    fputs("# HELP dbthrottle_processes Processes that use the pool, by state (unthrottled and "
          "refusing include those not heard from).\n# TYPE dbthrottle_processes gauge\n",
          out);
    for (int i = 0; i < n; i++)
        for (size_t st = 0; st < sizeof states / sizeof *states; st++) {
            int count = 0;
            for (int j = 0; j < v[i].nprocs; j++) {
                char reason[320];
                count += strcmp(state_of(&v[i].procs[j], v[i].now_ms, reason, sizeof reason),
                                states[st]) == 0;
            }
            fputs("dbthrottle_processes{pool=\"", out);
            prom_label(out, v[i].name);
            fprintf(out, "\",state=\"%s\"} %d\n", states[st], count);
        }
    fputs("# HELP dbthrottle_processes_unthrottled_commands Commands the live processes ran "
          "unthrottled (Redis unreachable, on_redis_error=open).\n"
          "# TYPE dbthrottle_processes_unthrottled_commands gauge\n",
          out);
    for (int i = 0; i < n; i++) {
        unsigned long long sum = 0;
        for (int j = 0; j < v[i].nprocs; j++)
            sum += v[i].procs[j].unthrottled;
        fputs("dbthrottle_processes_unthrottled_commands{pool=\"", out);
        prom_label(out, v[i].name);
        fprintf(out, "\"} %llu\n", sum);
    }
}

void cli_render_prometheus(FILE *out, const cli_pool_view *v, int n)
{
    prom_metric(out, v, n, "dbthrottle_limit", "gauge",
                "Limit in force: the operator's override, else the last acquirer's.", M_LIMIT, 0);
    prom_metric(out, v, n, "dbthrottle_limit_override", "gauge",
                "Operator's override of the limit (dbthrottle limit), when set.", M_OVERRIDE, 0);
    prom_metric(out, v, n, "dbthrottle_draining", "gauge",
                "1 while the pool is drained (dbthrottle drain): no new grants.", M_DRAINING, 0);
    prom_metric(out, v, n, "dbthrottle_quarantine_seconds", "gauge",
                "Seconds the pool's quarantine still lasts (a failover, restart or data loss): no "
                "new grants.",
                M_QUARANTINE, 0);
    prom_metric(out, v, n, "dbthrottle_holders", "gauge", "Permits held (live leases).", M_HOLDERS,
                0);
    prom_metric(out, v, n, "dbthrottle_waiters", "gauge", "Callers queued for a permit.", M_WAITERS,
                0);
    static const struct {
        const char *name, *help;
        int counter;
    } counters[] = {
        {"dbthrottle_grants_total", "Permits granted.", DBT_CTR_GRANTS},
        {"dbthrottle_queued_total", "Acquires that had to queue.", DBT_CTR_QUEUED},
        {"dbthrottle_refused_total", "Acquires refused at once (wait timeout 0, none free).",
         DBT_CTR_REFUSED},
        {"dbthrottle_cancelled_total", "Waiters that gave up (timeout, cancel, interrupt).",
         DBT_CTR_CANCELLED},
        {"dbthrottle_expired_total", "Permits whose lease ran out (holder died or was cut off).",
         DBT_CTR_EXPIRED},
        {"dbthrottle_evicted_total", "Permits freed by hand (dbthrottle evict).", DBT_CTR_EVICTED},
        {"dbthrottle_wait_seconds_total", "Time granted waiters spent queued.", DBT_CTR_WAIT_MS},
        {"dbthrottle_quarantines_total",
         "Quarantines entered (the pool's state met on another server, or found lost).",
         DBT_CTR_QUARANTINES},
        {"dbthrottle_reasserted_total",
         "Held permits Redis had lost that their holders re-asserted.", DBT_CTR_REASSERTED},
        {"dbthrottle_requeued_total", "Waiters Redis had lost that were queued again.",
         DBT_CTR_REQUEUED},
        {"dbthrottle_clamped_total",
         "Grants of a weight above the limit, clamped to the limit (the command ran alone).",
         DBT_CTR_CLAMPED},
        {"dbthrottle_capped_total", "Acquires refused at once by their class' queue cap.",
         DBT_CTR_CAPPED},
        {"dbthrottle_aged_total",
         "Grants made by the aging bound (a waiter served ahead of its class' turn).",
         DBT_CTR_AGED},
    };
    for (size_t c = 0; c < sizeof counters / sizeof *counters; c++)
        prom_metric(out, v, n, counters[c].name, "counter", counters[c].help, M_COUNTER,
                    counters[c].counter);
    prom_classes(out, v, n);
    prom_processes(out, v, n);
}
