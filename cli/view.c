/* view.c - a pool's state as status.lua reports it: holders, waiters, controls, counters. */
#include "cli.h"

#include "clock.h"
#include "cluster.h"

#include <stdlib.h>
#include <string.h>

long long cli_effective_limit(const dbt_status_kind *k)
{
    return k->override ? k->override : k->limit_seen;
}

cli_adapt_state cli_adapt_of(const dbt_status_kind *k, int64_t now_ms)
{
    const dbt_status_adapt *a = k->adapt;
    bool timed = k->override && k->override_pttl_ms > 0;
    if (!a)
        return timed ? CLI_ADAPT_GONE : CLI_ADAPT_NONE;
    if (a->lease_unknown)
        return CLI_ADAPT_UNKNOWN;
    if (!dbt_status_adapt_leads(a, now_ms))
        return timed ? CLI_ADAPT_GONE : CLI_ADAPT_STOPPED;
    if (timed)
        return CLI_ADAPT_LEADING;
    return k->override ? CLI_ADAPT_OPERATOR : CLI_ADAPT_WAITING;
}

const char *cli_adapt_name(cli_adapt_state s)
{
    static const char *const names[] = {
        [CLI_ADAPT_NONE] = NULL,           [CLI_ADAPT_STOPPED] = "stopped",
        [CLI_ADAPT_LEADING] = "adaptive",  [CLI_ADAPT_GONE] = "gone",
        [CLI_ADAPT_OPERATOR] = "operator", [CLI_ADAPT_WAITING] = "waiting",
        [CLI_ADAPT_UNKNOWN] = "unknown"};
    return names[s];
}

void cli_view_free(cli_pool_view *v)
{
    free(v->name);
    dbt_status_reply state = {
        .now_ms = v->now_ms, .procs = v->procs, .nprocs = v->nprocs, .settings = v->settings};
    memcpy(state.kind, v->kind, sizeof state.kind);
    dbt_status_free(&state);
    memset(v, 0, sizeof *v);
}

int64_t cli_pool_idle_ms(const cli_pool_view *v)
{
    int64_t idle = -1;
    for (int k = 0; k < DBT_NKINDS; k++) {
        if (v->kind[k].idle_ms == 0)
            return 0;
        if (v->kind[k].idle_ms > 0 && (idle < 0 || v->kind[k].idle_ms < idle))
            idle = v->kind[k].idle_ms;
    }
    return idle;
}

int cli_hide_idle(cli_pool_view *v, int n, int64_t after_ms, int *hidden)
{
    int kept = 0;
    for (int i = 0; i < n; i++) {
        int64_t idle = cli_pool_idle_ms(&v[i]);
        /* Never a pool a live process names (a process that refuses or runs unthrottled must
         * stay in view, whatever its pool's traffic), nor a drained one (an operator's act). */
        bool drained = false;
        for (int k = 0; k < DBT_NKINDS; k++)
            drained = drained || v[i].kind[k].drained;
        if (after_ms > 0 && idle > after_ms && v[i].nprocs == 0 && !drained && !v[i].missing) {
            cli_view_free(&v[i]);
            (*hidden)++;
            continue;
        }
        v[kept++] = v[i];
    }
    return kept;
}

bool cli_parse_idle_after(const char *text, int64_t *ms, char *err)
{
    if (strcmp(text, "off") == 0) {
        *ms = 0;
        return true;
    }
    return dbt_parse_duration("--idle-after", text, false, false, ms, err);
}

bool cli_view_pool(dbt_redis *r, const dbt_config *cfg, const char *pool, int max_rows,
                   cli_pool_view *v, char *err)
{
    memset(v, 0, sizeof *v);
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, pool) || !(v->name = strdup(pool))) {
        snprintf(err, DBT_ERRLEN, "out of memory");
        dbt_keys_free(&k);
        return false;
    }
    dbt_script_call call;
    dbt_build_status(&call, &k, max_rows);
    dbt_status_reply state;
    redisReply *rep = cli_pool_script(r, cfg, &k, &call, dbt_parse_status, &state, err);
    dbt_keys_free(&k);
    if (!rep) {
        cli_view_free(v);
        return false;
    }
    freeReplyObject(rep);
    v->now_ms = state.now_ms; /* the entries are the view's now */
    memcpy(v->kind, state.kind, sizeof v->kind);
    v->procs = state.procs;
    v->nprocs = state.nprocs;
    v->settings = state.settings;
    return true;
}

void cli_views_free(cli_pool_view *v, int n)
{
    for (int i = 0; i < n; i++)
        cli_view_free(&v[i]);
    free(v);
}

int cli_view_pools(dbt_redis *r, const dbt_config *cfg, char **names, int n, int max_rows,
                   cli_pool_view **out, char *err)
{
    char **all = NULL;
    if (n == 0) {
        n = cli_list_pools(r, cfg, &all, err);
        if (n < 0)
            return -1;
        names = all;
    }
    cli_pool_view *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (!v) {
        cli_free_names(all, all ? n : 0);
        return snprintf(err, DBT_ERRLEN, "out of memory"), -1;
    }
    for (int i = 0; i < n; i++) {
        if (!cli_view_pool(r, cfg, names[i], max_rows, &v[i], err)) {
            cli_views_free(v, i);
            cli_free_names(all, all ? n : 0);
            return -1;
        }
    }
    cli_free_names(all, all ? n : 0);
    *out = v;
    return n;
}

/* Whether a view shows nothing at all: then the pool may have no key left (or never had one). */
static bool view_empty(const cli_pool_view *v)
{
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        if (v->kind[kind].used || v->kind[kind].nclasses || v->kind[kind].nhists ||
            v->kind[kind].classes_problem[0])
            return false;
    return v->nprocs == 0;
}

int cli_pool_exists(dbt_redis *r, const dbt_config *cfg, const cli_pool_view *v, char *err)
{
    if (!view_empty(v))
        return 1;
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, v->name))
        return snprintf(err, DBT_ERRLEN, "out of memory"), -1;
    /* EXISTS on every key the pool has: they share its hash tag, so one node (with Redis
     * Cluster, the primary that serves the pool's slot) answers for all of them. */
    const char *argv[1 + DBT_NKINDS * DBT_NKEYS + 3];
    int argc = 0;
    argv[argc++] = "EXISTS";
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        for (int i = 0; i < DBT_NKEYS; i++)
            argv[argc++] = k.keys[kind][i];
    argv[argc++] = k.procs;
    argv[argc++] = k.procinfo;
    argv[argc++] = k.settings;
    dbt_redis *own = NULL;
    if (dbt_cluster_routing(cfg))
        r = own = dbt_redis_connect_for(cfg, k.base, err);
    redisReply *rep = r ? dbt_redis_command(r, argc, argv, NULL, err) : NULL;
    dbt_redis_free(own);
    dbt_keys_free(&k);
    if (!rep)
        return -1;
    int found = rep->type == REDIS_REPLY_INTEGER && rep->integer > 0;
    freeReplyObject(rep);
    return found;
}

bool cli_read_pools(const dbt_config *cfg, dbt_redis **r, char **names, int n, int max_rows,
                    cli_pool_view **out, int *count, double *seconds, char *err)
{
    int64_t t0 = dbt_now_us();
    /* One budget for the whole read: each step's timeout would add up over many pools. */
    int64_t saved = dbt_redis_budget_begin(cfg->redis_timeout_ms);
    if (*r && dbt_redis_stale(*r)) { /* Redis restarted, or a timeout broke it: connect again */
        dbt_redis_free(*r);
        *r = NULL;
    }
    if (!*r)
        *r = dbt_redis_connect(cfg, err);
    *count = *r ? cli_view_pools(*r, cfg, names, n, max_rows, out, err) : -1;
    dbt_redis_budget_end(saved);
    *seconds = (double)(dbt_now_us() - t0) / 1e6;
    return *count >= 0;
}
