/* summary.c - a pool's counters in the log: one line per pool at exit, and with
 * DBTHROTTLE_LOG_STATS one every period from the renewer thread, for processes that run for
 * weeks and would otherwise say what the throttle cost them only when they end. */
#include "summary.h"
#include "clock.h"
#include "log.h"
#include "version.h"

#include <stdio.h>

/* Commands the throttle cost something: the line is a warning then. */
static bool costly(const dbt_pool_stats *st)
{
    return st->refusals || st->unthrottled || st->timeouts;
}

void dbt_summary_at_exit(const char *pool, const dbt_pool_stats *st)
{
    if (st->grants == 0 && st->refusals == 0 && st->unthrottled == 0 && st->redis_errors == 0 &&
        st->timeouts == 0)
        return;
    dbt_field f[] = {DBT_S("pool", pool),
                     DBT_I("grants", st->grants),
                     DBT_I("waits", st->waits),
                     DBT_MS("wait_total_ms", (double)st->wait_total_us / 1000.0),
                     DBT_MS("wait_max_ms", (double)st->wait_max_us / 1000.0),
                     DBT_I("timeouts", st->timeouts),
                     DBT_I("refusals", st->refusals),
                     DBT_I("unthrottled", st->unthrottled),
                     DBT_I("redis_errors", st->redis_errors),
                     DBT_I("leases_lost", st->leases_lost),
                     DBT_S("version", DBT_VERSION)};
    dbt_log(costly(st) ? DBT_LOG_WARN : DBT_LOG_INFO, "summary", f, sizeof f / sizeof *f);
}

static int64_t period_us(const dbt_pool *p)
{
    return p->client->cfg->log_stats_ms * 1000;
}

int64_t dbt_summary_sooner(dbt_pool *p, int64_t t)
{
    if (period_us(p) <= 0)
        return t;
    if (!p->stats_line_us) /* the first period starts with the renewer, at the pool's first use */
        p->stats_line_us = dbt_now_us();
    int64_t due = p->stats_line_us + period_us(p);
    return due < t ? due : t;
}

bool dbt_summary_periodic(dbt_pool *p)
{
    int64_t now = dbt_now_us();
    if (period_us(p) <= 0 || dbt_summary_sooner(p, INT64_MAX) > now)
        return false;
    int64_t interval_us = now - p->stats_line_us;
    /* The next line is a period after this one was due, not after it was written: no drift. */
    p->stats_line_us += period_us(p);
    if (p->stats_line_us + period_us(p) <= now)
        p->stats_line_us = now; /* stopped (SIGSTOP) for periods: one line, then on from now */
    dbt_pool_stats all = p->st, was = p->stats_shown;
    int64_t max_us = p->stats_wait_max_us;
    p->stats_shown = all;
    p->stats_wait_max_us = 0;
    pthread_mutex_unlock(&p->mu);
    dbt_pool_stats d = {
        .grants = all.grants - was.grants,
        .waits = all.waits - was.waits,
        .timeouts = all.timeouts - was.timeouts,
        .refusals = all.refusals - was.refusals,
        .unthrottled = all.unthrottled - was.unthrottled,
        .redis_errors = all.redis_errors - was.redis_errors,
        .leases_lost = all.leases_lost - was.leases_lost,
        .wait_total_us = all.wait_total_us - was.wait_total_us,
    };
    dbt_field f[] = {DBT_S("pool", p->name),
                     DBT_MS("interval_ms", (double)interval_us / 1000.0),
                     DBT_I("grants", d.grants),
                     DBT_I("waits", d.waits),
                     DBT_MS("wait_total_ms", (double)d.wait_total_us / 1000.0),
                     DBT_MS("wait_max_ms", (double)max_us / 1000.0),
                     DBT_I("timeouts", d.timeouts),
                     DBT_I("refusals", d.refusals),
                     DBT_I("unthrottled", d.unthrottled),
                     DBT_I("redis_errors", d.redis_errors),
                     DBT_I("leases_lost", d.leases_lost),
                     DBT_I("total_grants", all.grants),
                     DBT_I("total_waits", all.waits),
                     DBT_MS("total_wait_ms", (double)all.wait_total_us / 1000.0),
                     DBT_MS("total_wait_max_ms", (double)all.wait_max_us / 1000.0),
                     DBT_I("total_timeouts", all.timeouts),
                     DBT_I("total_refusals", all.refusals),
                     DBT_I("total_unthrottled", all.unthrottled),
                     DBT_I("total_redis_errors", all.redis_errors),
                     DBT_I("total_leases_lost", all.leases_lost),
                     DBT_S("version", DBT_VERSION)};
    dbt_log_requested(costly(&d) ? DBT_LOG_WARN : DBT_LOG_INFO, "stats", f, sizeof f / sizeof *f);
    pthread_mutex_lock(&p->mu);
    return true;
}
