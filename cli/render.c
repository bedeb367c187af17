/* render.c - the pool views as a table (status, top), JSON (status --json) and Prometheus text
 * (status --prometheus). */
#include "cli.h"

#include <inttypes.h>
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
    if (k->nh) {
        fprintf(out, "  %-6s %-4s %-28s %-20s %8s %-8s %9s %10s\n", "HOLDER", "", "PERMIT", "HOST",
                "PID", "CONN", "HELD", "LEASE LEFT");
        for (int i = 0; i < k->nh; i++) {
            const dbt_status_entry *e = &k->holders[i];
            cli_duration(v->now_ms - e->since_ms, d1, sizeof d1);
            cli_duration(e->expiry_ms - v->now_ms, d2, sizeof d2);
            fprintf(out, "  %-6s %-4s %-28s %-20s %8ld %-8s %9s %10s\n", "", "", e->permit,
                    e->host[0] ? e->host : "?", e->pid, e->conn[0] ? e->conn : "?",
                    e->since_ms ? d1 : "?", d2);
        }
        if (k->nh < k->nholders)
            fprintf(out, "  ... and %lld more holders\n", k->nholders - k->nh);
    }
    if (k->nw) {
        fprintf(out, "  %-6s %-4s %-28s %-20s %8s %-8s %9s\n", "WAITER", "POS", "PERMIT", "HOST",
                "PID", "CONN", "WAITED");
        for (int i = 0; i < k->nw; i++) {
            const dbt_status_entry *e = &k->waiters[i];
            cli_duration(v->now_ms - e->since_ms, d1, sizeof d1);
            fprintf(out, "  %-6s %-4d %-28s %-20s %8ld %-8s %9s\n", "", i + 1, e->permit,
                    e->host[0] ? e->host : "?", e->pid, e->conn[0] ? e->conn : "?",
                    e->since_ms ? d1 : "?");
        }
        if (k->nw < k->nwaiters)
            fprintf(out, "  ... and %lld more waiters\n", k->nwaiters - k->nw);
    }
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
            if (v[i].kind[kind].used) {
                if (any || i)
                    fputc('\n', out);
                text_kind(out, &v[i], (dbt_kind)kind, name);
                any = true;
            }
        if (!any)
            fprintf(out, "%spool %s: no holders, waiters or counters (its keys are expiring)\n",
                    i ? "\n" : "", name);
    }
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
    fprintf(out, ",\"since_ms\":%" PRId64, e->since_ms);
}

static void json_kind(FILE *out, const cli_pool_view *v, const dbt_status_kind *k)
{
    fputs("{\"limit\":", out);
    json_int_or_null(out, cli_effective_limit(k));
    fputs(",\"limit_seen\":", out);
    json_int_or_null(out, k->limit_seen);
    fputs(",\"override\":", out);
    json_int_or_null(out, k->override);
    fprintf(out, ",\"draining\":%s,\"holders_count\":%lld,\"waiters_count\":%lld,\"holders\":[",
            k->drained ? "true" : "false", k->nholders, k->nwaiters);
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
    fputs("}}", out);
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
    fputs("]}\n", out);
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

typedef enum { M_LIMIT, M_OVERRIDE, M_DRAINING, M_HOLDERS, M_WAITERS, M_COUNTER } metric_src;

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

void cli_render_prometheus(FILE *out, const cli_pool_view *v, int n)
{
    prom_metric(out, v, n, "dbthrottle_limit", "gauge",
                "Limit in force: the operator's override, else the last acquirer's.", M_LIMIT, 0);
    prom_metric(out, v, n, "dbthrottle_limit_override", "gauge",
                "Operator's override of the limit (dbthrottle limit), when set.", M_OVERRIDE, 0);
    prom_metric(out, v, n, "dbthrottle_draining", "gauge",
                "1 while the pool is drained (dbthrottle drain): no new grants.", M_DRAINING, 0);
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
    };
    for (size_t c = 0; c < sizeof counters / sizeof *counters; c++)
        prom_metric(out, v, n, counters[c].name, "counter", counters[c].help, M_COUNTER,
                    counters[c].counter);
}
