/* trace.c - a slot's events in the log (grant, wait, release, ...), with what the operator needs to
 * tell them apart. */
#include "trace.h"
#include "log.h"

#include <string.h>

/* ---- tracing --------------------------------------------------------------------------- */

void dbt_trace_copy(struct dbt_slot *to, const struct dbt_slot *s)
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

bool dbt_trace_enabled(const dbt_pool *p, dbt_log_level lvl)
{
    int live = atomic_load(&p->log_level);
    return live >= 0 ? lvl != DBT_LOG_OFF && (int)lvl <= live : dbt_log_enabled(lvl);
}

void dbt_trace(dbt_log_level lvl, const char *event, const struct dbt_slot *s, int64_t waited_us,
               int64_t held_us, long long holders, long long queue, const char *extra_key,
               const char *extra)
{
    if (!dbt_trace_enabled(s->pool, lvl))
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
    dbt_log_at_own_level(lvl, event, f, n); /* decided above */
}
