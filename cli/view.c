/* view.c - a pool's state as status.lua reports it: holders, waiters, controls, counters. */
#include "cli.h"

#include "scripts.h"

#include <stdlib.h>
#include <string.h>

const char *const cli_counter_names[NCOUNTERS] = {"grants",  "queued",  "refused", "cancelled",
                                                  "expired", "evicted", "wait_ms"};

long long cli_effective_limit(const cli_kind_view *k)
{
    return k->override ? k->override : k->limit_seen;
}

static long long int_of(const redisReply *r)
{
    if (r->type == REDIS_REPLY_INTEGER)
        return r->integer;
    if (r->type == REDIS_REPLY_STRING)
        return strtoll(r->str, NULL, 10);
    return 0;
}

/* "<since> <host> <pid> <conn>" as the scripts record it; fields stay empty when absent. */
static bool parse_entry(const redisReply *id, const redisReply *info, cli_entry *e)
{
    memset(e, 0, sizeof *e);
    if (id->type != REDIS_REPLY_STRING || !(e->permit = strdup(id->str)))
        return false;
    if (info->type == REDIS_REPLY_STRING) {
        long long since = 0;
        if (sscanf(info->str, "%lld %63s %ld %63s", &since, e->host, &e->pid, e->conn) >= 1)
            e->since_ms = since;
    }
    return true;
}

static int by_since(const void *a, const void *b)
{
    const cli_entry *x = a, *y = b;
    return (x->since_ms > y->since_ms) - (x->since_ms < y->since_ms);
}

static bool parse_kind(const redisReply *r, cli_kind_view *k)
{
    if (r->type != REDIS_REPLY_ARRAY || r->elements != 8)
        return false;
    const redisReply *const *e = (const redisReply *const *)r->element;
    k->limit_seen = int_of(e[0]);
    k->override = int_of(e[1]);
    k->drained = int_of(e[2]) != 0;
    k->nholders = int_of(e[3]);
    k->nwaiters = int_of(e[4]);
    const redisReply *h = e[5], *w = e[6], *st = e[7];
    if (h->type != REDIS_REPLY_ARRAY || w->type != REDIS_REPLY_ARRAY ||
        st->type != REDIS_REPLY_ARRAY)
        return false;
    if (h->elements) {
        k->holders = calloc(h->elements / 3, sizeof *k->holders);
        if (!k->holders)
            return false;
        for (size_t i = 0; i + 2 < h->elements; i += 3) {
            if (!parse_entry(h->element[i], h->element[i + 2], &k->holders[k->nh]))
                return false;
            k->holders[k->nh++].expiry_ms = int_of(h->element[i + 1]);
        }
        qsort(k->holders, (size_t)k->nh, sizeof *k->holders, by_since);
    }
    if (w->elements) {
        k->waiters = calloc(w->elements / 2, sizeof *k->waiters);
        if (!k->waiters)
            return false;
        for (size_t i = 0; i + 1 < w->elements; i += 2)
            if (!parse_entry(w->element[i], w->element[i + 1], &k->waiters[k->nw++]))
                return false;
    }
    bool any_counter = false;
    for (size_t i = 0; i + 1 < st->elements; i += 2)
        for (int c = 0; c < NCOUNTERS; c++)
            if (st->element[i]->type == REDIS_REPLY_STRING &&
                strcmp(st->element[i]->str, cli_counter_names[c]) == 0) {
                k->counters[c] = int_of(st->element[i + 1]);
                any_counter = true;
            }
    k->used =
        k->limit_seen || k->override || k->drained || k->nholders || k->nwaiters || any_counter;
    return true;
}

static void free_entries(cli_entry *e, int n)
{
    for (int i = 0; i < n; i++)
        free(e[i].permit);
    free(e);
}

void cli_view_free(cli_pool_view *v)
{
    free(v->name);
    for (int k = 0; k < DBT_NKINDS; k++) {
        free_entries(v->kind[k].holders, v->kind[k].nh);
        free_entries(v->kind[k].waiters, v->kind[k].nw);
    }
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
    const char *keys[2 * DBT_NKEYS];
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        for (int i = 0; i < DBT_NKEYS; i++)
            keys[kind * DBT_NKEYS + i] = k.keys[kind][i];
    char rows[16];
    snprintf(rows, sizeof rows, "%d", max_rows);
    const char *args[] = {k.wake_prefix, "q", "0", "0", rows};
    redisReply *rep = dbt_redis_eval(r, &dbt_script_status, 2 * DBT_NKEYS, keys, 5, args, err);
    dbt_keys_free(&k);
    if (!rep)
        return false;
    bool ok = rep->type == REDIS_REPLY_ARRAY && rep->elements == 3;
    if (ok) {
        v->now_ms = int_of(rep->element[0]);
        ok = parse_kind(rep->element[1], &v->kind[DBT_KIND_QUERY]) &&
             parse_kind(rep->element[2], &v->kind[DBT_KIND_CONN]);
    }
    freeReplyObject(rep);
    if (!ok) {
        snprintf(err, DBT_ERRLEN, "status.lua returned an unexpected reply");
        cli_view_free(v);
    }
    return ok;
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
