/* prom.c - the pool views in Prometheus' text exposition format (version 0.0.4): what status
 * --prometheus prints and dbthrottle exporter serves, written by this one function. */
#include "cli.h"
#include "version.h"

#include <stdlib.h>
#include <string.h>

static void put_number(FILE *out, double v)
{
    char text[40];
    cli_prom_number(v, text, sizeof text);
    fputs(text, out);
}

/* A label value: the name as the table shows it, one-to-one (a backslash doubled, a byte that
 * is not UTF-8, which a label value must be, as the text \xNN), then the format's own escapes
 * ('\\', '"', newline) on top. */
static void prom_label(FILE *out, const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = cli_utf8_len(p);
        if (*p == '\\')
            fputs("\\\\\\\\", out);
        else if (*p == '"')
            fputs("\\\"", out);
        else if (*p == '\n')
            fputs("\\n", out);
        else if (n == 0)
            fprintf(out, "\\\\x%02x", *p);
        else
            fwrite(p, 1, (size_t)n, out);
        p += n ? n : 1;
    }
}

/* `{pool="...",kind="..."` without the closing brace (a class or le may follow). */
static void pool_kind_labels(FILE *out, const char *name, const cli_pool_view *v, int kind)
{
    fprintf(out, "%s{pool=\"", name);
    prom_label(out, v->name);
    fprintf(out, "\",kind=\"%s\"", dbt_kind_name((dbt_kind)kind));
}

static void help_type(FILE *out, const char *name, const char *type, const char *help)
{
    fprintf(out, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

typedef enum {
    M_LIMIT,
    M_OVERRIDE,
    M_DRAINING,
    M_QUARANTINE,
    M_HOLDERS,
    M_WAITERS,
    M_OLDEST,
    M_ADAPTIVE,
    M_ADAPTIVE_MIN,
    M_ADAPTIVE_MAX,
    M_COUNTER
} metric_src;

/* The bounds of the adaptive controller that leads the semaphore (acting, or standing by while
 * an operator's override is in force); NULL when none leads. */
static const dbt_status_adapt *leading(const dbt_status_kind *k, int64_t now_ms)
{
    return dbt_status_adapt_leads(k->adapt, now_ms) && !k->adapt->lease_unknown ? k->adapt : NULL;
}

static void prom_metric(FILE *out, const cli_pool_view *v, int n, const char *name,
                        const char *type, const char *help, metric_src src, int counter)
{
    help_type(out, name, type, help);
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
            case M_OLDEST:
                val = (double)k->oldest_wait_ms / 1000.0;
                break;
            case M_ADAPTIVE:
                val = cli_adapt_of(k, v[i].now_ms) == CLI_ADAPT_LEADING;
                break;
            case M_ADAPTIVE_MIN:
            case M_ADAPTIVE_MAX: {
                const dbt_status_adapt *a = leading(k, v[i].now_ms);
                long long bound = !a ? 0 : src == M_ADAPTIVE_MIN ? a->min : a->max;
                if (!bound)
                    continue;
                val = (double)bound;
                break;
            }
            case M_COUNTER:
                val = (double)k->counters[counter];
                if (counter == DBT_CTR_WAIT_MS)
                    val /= 1000.0;
                break;
            }
            pool_kind_labels(out, name, &v[i], kind);
            fputs("} ", out);
            put_number(out, val);
            fputc('\n', out);
        }
}

/* One histogram family (the scripts' 'w' waits or 'h' holds): the scripts keep the buckets
 * apart, the format wants them cumulative, ending with le="+Inf" equal to _count. */
static void prom_histogram(FILE *out, const cli_pool_view *v, int n, const char *name, char series,
                           const char *help)
{
    help_type(out, name, "histogram", help);
    for (int i = 0; i < n; i++)
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            const dbt_status_kind *k = &v[i].kind[kind];
            int nb = k->nbounds < DBT_HIST_MAX ? k->nbounds : DBT_HIST_MAX - 1;
            for (int j = 0; j < k->nhists; j++) {
                const dbt_status_hist *h = &k->hists[j];
                if (h->series != series)
                    continue;
                char sample[80];
                long long cum = 0;
                for (int b = 0; b <= nb; b++) {
                    cum += h->bucket[b];
                    snprintf(sample, sizeof sample, "%s_bucket", name);
                    pool_kind_labels(out, sample, &v[i], kind);
                    fputs(",class=\"", out);
                    prom_label(out, h->klass);
                    fputs("\",le=\"", out);
                    if (b < nb)
                        put_number(out, k->hist_bound_ms[b] / 1000.0);
                    else
                        fputs("+Inf", out);
                    fprintf(out, "\"} %lld\n", cum);
                }
                snprintf(sample, sizeof sample, "%s_sum", name);
                pool_kind_labels(out, sample, &v[i], kind);
                fputs(",class=\"", out);
                prom_label(out, h->klass);
                fputs("\"} ", out);
                put_number(out, (double)h->sum_ms / 1000.0);
                snprintf(sample, sizeof sample, "%s_count", name);
                fputc('\n', out);
                pool_kind_labels(out, sample, &v[i], kind);
                fputs(",class=\"", out);
                prom_label(out, h->klass);
                fprintf(out, "\"} %lld\n", cum);
            }
        }
}

/* One gauge per class: {pool, kind, class}. */
typedef enum { C_SHARE, C_GUARANTEE, C_HELD, C_BORROWED, C_WAITERS, C_OLDEST } class_metric;

static void prom_class_metric(FILE *out, const cli_pool_view *v, int n, const char *name,
                              const char *help, class_metric m)
{
    help_type(out, name, "gauge", help);
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
                pool_kind_labels(out, name, &v[i], kind);
                fputs(",class=\"", out);
                prom_label(out, c->name);
                fputs("\"} ", out);
                put_number(out, val);
                fputc('\n', out);
            }
        }
}

static void prom_classes(FILE *out, const cli_pool_view *v, int n)
{
    /* 1 while the stored definitions are not what is in force (status' CLASSES MISCONFIGURED):
     * for every semaphore, so that an alert on it sees the 0 too. */
    help_type(out, "dbthrottle_classes_misconfigured", "gauge",
              "1 when the class definitions in Redis are not valid or hold more than the cap "
              "(status says CLASSES MISCONFIGURED).");
    for (int i = 0; i < n; i++)
        for (int kind = 0; kind < DBT_NKINDS; kind++) {
            pool_kind_labels(out, "dbthrottle_classes_misconfigured", &v[i], kind);
            fprintf(out, "} %d\n", v[i].kind[kind].classes_problem[0] ? 1 : 0);
        }
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
    static const char *const states[] = {"throttling", "unthrottled", "refusing", "disabled",
                                         "shadow"};
    help_type(out, "dbthrottle_processes", "gauge",
              "Processes that use the pool, by state (unthrottled and refusing include those not "
              "heard from).");
    for (int i = 0; i < n; i++)
        for (size_t st = 0; st < sizeof states / sizeof *states; st++) {
            int count = 0;
            for (int j = 0; j < v[i].nprocs; j++) {
                char reason[320];
                count +=
                    strcmp(cli_record_state(&v[i].procs[j], v[i].now_ms, reason, sizeof reason),
                           states[st]) == 0;
            }
            fputs("dbthrottle_processes{pool=\"", out);
            prom_label(out, v[i].name);
            fprintf(out, "\",state=\"%s\"} %d\n", states[st], count);
        }
    help_type(out, "dbthrottle_processes_unthrottled_commands", "gauge",
              "Commands the live processes ran unthrottled (Redis unreachable, "
              "on_redis_error=open).");
    for (int i = 0; i < n; i++) {
        unsigned long long sum = 0;
        for (int j = 0; j < v[i].nprocs; j++)
            sum += v[i].procs[j].unthrottled;
        fputs("dbthrottle_processes_unthrottled_commands{pool=\"", out);
        prom_label(out, v[i].name);
        fprintf(out, "\"} %llu\n", sum);
    }
}

/* What is there whether Redis answered or not: an outage must not look like an empty scrape. */
static void prom_self(FILE *out, bool up, double scrape_seconds)
{
    help_type(out, "dbthrottle_up", "gauge",
              "1 when Redis was read for this scrape, 0 when it could not be (the pools' series "
              "are then absent).");
    fprintf(out, "dbthrottle_up %d\n", up ? 1 : 0);
    help_type(out, "dbthrottle_build_info", "gauge", "The dbthrottle command's version.");
    fputs("dbthrottle_build_info{version=\"", out);
    prom_label(out, DBT_VERSION);
    fputs("\"} 1\n", out);
    help_type(out, "dbthrottle_scrape_duration_seconds", "gauge",
              "How long reading Redis took for this scrape.");
    fputs("dbthrottle_scrape_duration_seconds ", out);
    put_number(out, scrape_seconds);
    fputc('\n', out);
}

void cli_render_prometheus(FILE *out, const cli_pool_view *v, int n, double scrape_seconds)
{
    prom_self(out, n >= 0, scrape_seconds);
    if (n < 0)
        return;
    prom_metric(out, v, n, "dbthrottle_limit", "gauge",
                "Limit in force: the override (an operator's, or the adaptive controller's), else "
                "the last acquirer's.",
                M_LIMIT, 0);
    prom_metric(out, v, n, "dbthrottle_limit_override", "gauge",
                "Override of the limit, when set: an operator's (dbthrottle limit) or the adaptive "
                "controller's (dbthrottle adapt).",
                M_OVERRIDE, 0);
    prom_metric(out, v, n, "dbthrottle_adaptive", "gauge",
                "1 while the limit in force is an adaptive controller's that leads (dbthrottle "
                "adapt), else 0.",
                M_ADAPTIVE, 0);
    prom_metric(out, v, n, "dbthrottle_adaptive_min", "gauge",
                "Lowest limit the leading adaptive controller may set.", M_ADAPTIVE_MIN, 0);
    prom_metric(out, v, n, "dbthrottle_adaptive_max", "gauge",
                "Highest limit the leading adaptive controller may set.", M_ADAPTIVE_MAX, 0);
    prom_metric(out, v, n, "dbthrottle_draining", "gauge",
                "1 while the pool is drained (dbthrottle drain): no new grants.", M_DRAINING, 0);
    prom_metric(out, v, n, "dbthrottle_quarantine_seconds", "gauge",
                "Seconds the pool's quarantine still lasts (a failover, restart or data loss): no "
                "new grants.",
                M_QUARANTINE, 0);
    prom_metric(out, v, n, "dbthrottle_holders", "gauge",
                "Units held by live leases (a permit of weight w counts w).", M_HOLDERS, 0);
    prom_metric(out, v, n, "dbthrottle_waiters", "gauge", "Callers queued for a permit.", M_WAITERS,
                0);
    prom_metric(out, v, n, "dbthrottle_oldest_wait_seconds", "gauge",
                "How long the longest current waiter has waited (0: none waits).", M_OLDEST, 0);
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
        {"dbthrottle_would_wait_total",
         "Shadow mode: grants that enforcing the limit would have queued.", DBT_CTR_WOULD_WAIT},
        {"dbthrottle_would_refuse_total",
         "Shadow mode: grants that enforcing the limit would have refused.", DBT_CTR_WOULD_REFUSE},
    };
    for (size_t c = 0; c < sizeof counters / sizeof *counters; c++)
        prom_metric(out, v, n, counters[c].name, "counter", counters[c].help, M_COUNTER,
                    counters[c].counter);
    prom_histogram(out, v, n, "dbthrottle_wait_seconds", 'w',
                   "Time from queued to granted, by Redis' clock (0 for a grant at once).");
    prom_histogram(out, v, n, "dbthrottle_hold_seconds", 'h',
                   "Time a permit was held, from grant to release, cancel, eviction or expiry.");
    prom_classes(out, v, n);
    prom_processes(out, v, n);
}
