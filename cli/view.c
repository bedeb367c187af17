/* view.c - a pool's state as status.lua reports it: holders, waiters, controls, counters. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

long long cli_effective_limit(const dbt_status_kind *k)
{
    return k->override ? k->override : k->limit_seen;
}

void cli_view_free(cli_pool_view *v)
{
    free(v->name);
    dbt_status_reply state = {.now_ms = v->now_ms, .procs = v->procs, .nprocs = v->nprocs};
    memcpy(state.kind, v->kind, sizeof state.kind);
    dbt_status_free(&state);
    memset(v, 0, sizeof *v);
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
