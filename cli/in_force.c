/* in_force.c - the values of a pool's live-able settings in force in its processes, and where
 * each came from (dbthrottle settings, status --json): the pool's live value for a process that
 * applied the version Redis holds and did not refuse that key; "?" for one that applied another
 * version (it may keep a value of that one); else the process' own, from its record (environment,
 * file or default). PgBouncer's SHOW CONFIG for a fleet without one file. */
#include "cli.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const dbt_setting *row;
    cli_in_force *groups;
    int n, cap;
    bool found;
} own_scan;

static void add(cli_in_force *g, int *n, int cap, const char *value, const char *from)
{
    for (int i = 0; i < *n; i++)
        if (strcmp(g[i].value, value) == 0 && strcmp(g[i].from, from) == 0) {
            g[i].processes++;
            return;
        }
    if (*n == cap)
        return; /* more distinct values than shown: the counts of those shown stay right */
    snprintf(g[*n].value, sizeof g[*n].value, "%s", value);
    snprintf(g[*n].from, sizeof g[*n].from, "%s", from);
    g[*n].processes = 1;
    (*n)++;
}

static void on_own(const char *key, dbt_source src, const char *value, void *arg)
{
    own_scan *o = arg;
    if (o->found || strcmp(key, o->row->key) != 0)
        return;
    o->found = true;
    add(o->groups, &o->n, o->cap, value,
        src == DBT_SRC_ENV    ? "environment"
        : src == DBT_SRC_FILE ? "file"
                              : "default");
}

/* Whether record r refused key (its comma-separated list). */
static bool refused(const dbt_proc_record *r, const char *key)
{
    size_t k = strlen(key);
    for (const char *p = r->live_refused; *p;) {
        size_t n = strcspn(p, ",");
        if (n == k && strncmp(p, key, k) == 0)
            return true;
        p += n + (p[n] == ',');
    }
    return false;
}

/* Most processes first; a tie by value, then by where from: the same order whatever order Redis
 * listed the records in (qsort keeps none of its own). */
static int by_processes(const void *a, const void *b)
{
    const cli_in_force *x = a, *y = b;
    int c = (y->processes > x->processes) - (y->processes < x->processes);
    if (c == 0)
        c = strcmp(x->value, y->value);
    return c != 0 ? c : strcmp(x->from, y->from);
}

typedef struct {
    const char *key;
    char *out;
    size_t cap;
    bool found;
} own_value_scan;

static void on_own_value(const char *key, dbt_source src, const char *value, void *arg)
{
    own_value_scan *o = arg;
    (void)src;
    if (!o->found && strcmp(key, o->key) == 0) {
        o->found = true;
        snprintf(o->out, o->cap, "%s", value);
    }
}

/* Record r's own value of row (as its record shows it), false when it does not say. */
static bool own_of(const dbt_proc_record *r, const dbt_setting *row, char *out, size_t cap)
{
    own_value_scan o = {.key = row->key, .out = out, .cap = cap};
    if (r->own[0])
        (void)dbt_live_own_each(r->own, on_own_value, &o);
    return o.found;
}

/* A live mode that names some kinds only (dbthrottle mode POOL shadow --queries): a process has
 * its own mode (own_value, as its record shows it) for the others; the two together into out. */
static void merged_mode(const dbt_setting *row, const dbt_live *live, const char *own_value,
                        char *out, size_t cap)
{
    dbt_config own = {0};
    char err[DBT_ERRLEN];
    if (!row->kind->parse(row, &own, own_value, err)) {
        snprintf(out, cap, "?");
        return;
    }
    for (int k = 0; k < DBT_MODE_KINDS; k++)
        if (live->cfg.mode_named >> k & 1)
            own.mode[k] = live->cfg.mode[k];
    dbt_mode_show(own.mode, (1u << DBT_MODE_KINDS) - 1, out, cap);
}

int cli_in_force_of(const cli_pool_view *v, const dbt_live *live, const dbt_setting *row,
                    cli_in_force *groups, int cap)
{
    bool partial = live && live->set[row - dbt_settings] && row == dbt_live_find("mode") &&
                   live->cfg.mode_named != (1u << DBT_MODE_KINDS) - 1;
    own_scan o = {.row = row, .groups = groups, .cap = cap};
    char live_value[256] = "";
    bool is_live = live && live->set[row - dbt_settings];
    if (is_live)
        row->kind->show(row, &live->cfg, live_value, sizeof live_value);
    for (int i = 0; i < v->nprocs; i++) {
        const dbt_proc_record *r = &v->procs[i];
        if (is_live && r->live_version == live->version && !refused(r, row->key)) {
            if (!partial) {
                add(groups, &o.n, cap, live_value, "live");
                continue;
            }
            char own_value[256], merged[256];
            if (own_of(r, row, own_value, sizeof own_value))
                merged_mode(row, live, own_value, merged, sizeof merged);
            else
                snprintf(merged, sizeof merged, "?");
            add(groups, &o.n, cap, merged, "live and own");
            continue;
        }
        /* behind the version Redis holds, after applying another: it may still use a value of
         * that one, which no record says (a stopped or cut-off worker keeps what it applied) */
        if (r->live_version > 0 && (!live || r->live_version != live->version)) {
            char from[24];
            snprintf(from, sizeof from, "behind, v%lld", r->live_version);
            add(groups, &o.n, cap, "?", from);
            continue;
        }
        o.found = false;
        if (r->own[0])
            (void)dbt_live_own_each(r->own, on_own, &o);
        if (!o.found) /* an older version's record, or the item cut to fit */
            add(groups, &o.n, cap, "?", r->live_version < 0 ? "an older version" : "not said");
    }
    qsort(groups, (size_t)o.n, sizeof *groups, by_processes);
    return o.n;
}
