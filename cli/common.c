/* common.c - settings, the Redis connection and the pool list, for every subcommand. */
#include "cli.h"

#include "cluster.h"
#include "sem_client.h"

#include <ctype.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

extern char **environ;

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dbthrottle %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see dbthrottle %s --help)\n", cmd);
    va_end(ap);
    return EXIT_USAGE;
}

int cli_option_error(const char *cmd, const struct option *longopts, char **argv)
{
    if (optopt == 0) /* a long option that is none of the command's */
        return cli_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
    for (const struct option *o = longopts; o->name; o++) {
        if (o->val != optopt)
            continue;
        if (o->has_arg == required_argument)
            return cli_usage_error(cmd, "option '--%s' needs a value", o->name);
        const char *arg = argv[optind - 1]; /* --clear=x, not the short -x */
        if (strncmp(arg, "--", 2) == 0 && strchr(arg, '='))
            return cli_usage_error(cmd, "option '--%s' takes no value ('%s')", o->name, arg);
    }
    /* getopt reads "-5s" as the options 5 and s: a value meant, not an option */
    if (isdigit(optopt))
        return cli_usage_error(cmd,
                               "'-%c' is read as an option: a value that begins with '-' goes "
                               "after --, every option before it (dbthrottle %s [OPTION...] ... "
                               "-- VALUE)",
                               optopt, cmd);
    return cli_usage_error(cmd, "unknown option '-%c'", isprint(optopt) ? optopt : '?');
}

int cli_fail(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dbthrottle %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

bool cli_redis_opt(cli_redis_opts *o, int opt, const char *arg)
{
    if (opt == CLI_OPT_REDIS)
        o->redis_url = arg;
    else if (opt == CLI_OPT_KEY_PREFIX)
        o->key_prefix = arg;
    else
        return false;
    return true;
}

/* The operator's commands read only the settings not marked worker_only (settings.c): a stray
 * DBTHROTTLE_MAX_QUERIES=abc in the operator's shell is the workers' business, not theirs. An
 * option given here replaces the setting's value, refused or not. */
bool cli_load_config(const char *cmd, const cli_redis_opts *o, dbt_config *cfg)
{
    char err[DBT_ERRLEN];
    (void)dbt_config_load(cfg, environ, err);
    bool ok = true;
    if (o && o->redis_url)
        ok = dbt_config_set(cfg, "DBTHROTTLE_REDIS_URL", o->redis_url, DBT_SRC_ENV, err);
    if (ok && o && o->key_prefix)
        ok = dbt_config_set(cfg, "DBTHROTTLE_KEY_PREFIX", o->key_prefix, DBT_SRC_ENV, err);
    const char *bad = ok ? dbt_config_error_for(cfg, DBT_READER_OPERATOR) : err;
    if (bad) {
        cli_fail(cmd, "%s", bad);
        dbt_config_free(cfg);
    }
    return !bad;
}

dbt_redis *cli_connect(const char *cmd, const dbt_config *cfg)
{
    char err[DBT_ERRLEN];
    dbt_redis *r = dbt_redis_connect(cfg, err);
    if (!r)
        cli_fail(cmd, "%s", err);
    return r;
}

void cli_free_names(char **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The pool name of a key "<escaped prefix>{<escaped pool>}...": the inverse of dbt_key_escape.
 * NULL when the key is not one of ours. */
static char *pool_of_key(const char *key, const char *eprefix)
{
    size_t lp = strlen(eprefix);
    if (strncmp(key, eprefix, lp) != 0 || key[lp] != '{')
        return NULL;
    const char *s = key + lp + 1, *e = strchr(s, '}');
    if (!e)
        return NULL;
    char *name = malloc((size_t)(e - s) + 1), *o = name;
    if (!name)
        return NULL;
    for (const char *p = s; p < e; p++) {
        if (*p == '%' && p + 2 < e && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
            *o++ = (char)(hexval(p[1]) << 4 | hexval(p[2]));
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return name;
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool add_name(char ***names, int *n, int *cap, char *name)
{
    for (int i = 0; i < *n; i++)
        if (strcmp((*names)[i], name) == 0) {
            free(name);
            return true;
        }
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 16;
        char **nn = realloc(*names, (size_t)nc * sizeof *nn);
        if (!nn) {
            free(name);
            return false;
        }
        *names = nn;
        *cap = nc;
    }
    (*names)[(*n)++] = name;
    return true;
}

typedef struct {
    dbt_script_call *c;
    dbt_reply_parser parse;
    void *out;
} script_op;

static redisReply *run_script(dbt_redis *r, void *arg, char *err)
{
    script_op *o = arg;
    return dbt_script_run(r, o->c, o->parse, o->out, err);
}

redisReply *cli_pool_script(dbt_redis *r, const dbt_config *cfg, const dbt_keys *k,
                            dbt_script_call *c, dbt_reply_parser parse, void *out, char *err)
{
    script_op o = {.c = c, .parse = parse, .out = out};
    return dbt_route_run_for(cfg, r, k->base, run_script, &o, err);
}

typedef struct {
    const dbt_keys *k;
} exists_op;

/* EXISTS on every key of the pool, both kinds and its processes' records: one command, as they
 * share the pool's hash tag (one slot in Redis Cluster). */
static redisReply *run_exists(dbt_redis *r, void *arg, char *err)
{
    const dbt_keys *k = ((exists_op *)arg)->k;
    const char *argv[1 + DBT_NKINDS * DBT_NKEYS + 3];
    int argc = 0;
    argv[argc++] = "EXISTS";
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        for (int i = 0; i < DBT_NKEYS; i++)
            argv[argc++] = k->keys[kind][i];
    argv[argc++] = k->procs;
    argv[argc++] = k->procinfo;
    argv[argc++] = k->settings;
    return dbt_redis_command(r, argc, argv, NULL, err);
}

int cli_pool_seen(dbt_redis *r, const dbt_config *cfg, const char *pool, char *err)
{
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, pool))
        return snprintf(err, DBT_ERRLEN, "out of memory"), -1;
    exists_op o = {.k = &k};
    redisReply *rep = dbt_route_run_for(cfg, r, k.base, run_exists, &o, err);
    dbt_keys_free(&k);
    if (!rep)
        return -1;
    int seen = rep->type == REDIS_REPLY_INTEGER ? rep->integer > 0 : -1;
    if (seen < 0)
        snprintf(err, DBT_ERRLEN, "unexpected reply to EXISTS");
    freeReplyObject(rep);
    return seen;
}

/* -1 when Redis knows the pool; else its exit status, said in one line: "no worker has used it"
 * then `more` (what else is true of it), the pools there, and `hint`. */
static int refuse_pool(const char *cmd, dbt_redis *r, const dbt_config *cfg, const char *pool,
                       const char *more, const char *hint)
{
    char err[DBT_ERRLEN], name[256];
    cli_escape_name(pool, 200, true, name, sizeof name);
    int seen = cli_pool_seen(r, cfg, pool, err);
    if (seen < 0)
        return cli_fail(cmd, "pool %s: %s", name, err);
    if (seen)
        return -1;
    char known[CLI_KNOWN_POOLS_LEN];
    cli_known_pools(r, cfg, known, sizeof known);
    fprintf(stderr, "dbthrottle %s: pool %s: no worker has used it%s (a typo?); %s%s\n", cmd, name,
            more, known, hint);
    return EXIT_USAGE;
}

int cli_refuse_unknown_pool(const char *cmd, dbt_redis *r, const dbt_config *cfg, const char *pool,
                            bool create)
{
    return create ? -1
                  : refuse_pool(cmd, r, cfg, pool, " and nothing is set for it in Redis",
                                "; give --create to act on a new pool");
}

int cli_refuse_unused_pool(const char *cmd, dbt_redis *r, const dbt_config *cfg, const char *pool)
{
    return refuse_pool(cmd, r, cfg, pool, "", "");
}

void cli_known_pools(dbt_redis *r, const dbt_config *cfg, char *out, size_t cap)
{
    char err[DBT_ERRLEN];
    char **names = NULL;
    int n = cli_list_pools(r, cfg, &names, err);
    char known[600] = "";
    size_t len = 0;
    for (int i = 0; i < n && i < 12; i++) {
        char one[256];
        cli_escape_name(names[i], 60, true, one, sizeof one);
        int w = snprintf(known + len, sizeof known - len, "%s%s", i ? ", " : "", one);
        if (w < 0 || (size_t)w >= sizeof known - len)
            break;
        len += (size_t)w;
    }
    char more[40] = "";
    if (n > 12)
        snprintf(more, sizeof more, " and %d more", n - 12);
    const char *lead = n < 0    ? "the pools could not be listed: "
                       : n == 0 ? "no pool is there under this key prefix"
                                : "the pools there: ";
    snprintf(out, cap, "%s%s%s", lead, n < 0 ? err : known, more);
    cli_free_names(names, n > 0 ? n : 0);
}

/* SCANs one server for the keys that match `match`, a batch at a time to `each`. */
static bool scan_one(dbt_redis *r, const char *match, cli_scan_fn each, void *arg, char *err)
{
    char cursor[32] = "0";
    bool ok = true;
    do {
        const char *argv[] = {"SCAN", cursor, "MATCH", match, "COUNT", "1000"};
        redisReply *rep = dbt_redis_command(r, 6, argv, NULL, err);
        if (!rep || rep->type != REDIS_REPLY_ARRAY || rep->elements != 2 ||
            rep->element[0]->type != REDIS_REPLY_STRING ||
            rep->element[1]->type != REDIS_REPLY_ARRAY) {
            if (rep)
                snprintf(err, DBT_ERRLEN, "unexpected reply to SCAN");
            freeReplyObject(rep);
            return false;
        }
        snprintf(cursor, sizeof cursor, "%s", rep->element[0]->str);
        ok = each(r, rep->element[1], arg, err);
        freeReplyObject(rep);
    } while (ok && strcmp(cursor, "0") != 0);
    return ok;
}

bool cli_scan_keys(const dbt_config *cfg, dbt_redis *r, const char *match, cli_scan_fn each,
                   void *arg, char *err)
{
    if (!dbt_cluster_routing(cfg))
        return scan_one(r, match, each, arg, err);
    /* With Redis Cluster each primary holds the keys of its slots: every one is scanned. */
    enum { MAX_PRIMARIES = 64 };
    dbt_cluster_node *nodes = malloc(MAX_PRIMARIES * sizeof *nodes);
    if (!nodes)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    int np = dbt_cluster_primaries(cfg, nodes, MAX_PRIMARIES, err);
    bool ok = np >= 0;
    for (int i = 0; ok && i < np; i++) {
        dbt_endpoint ep = {.host = nodes[i].host, .port = nodes[i].port};
        dbt_redis *node = dbt_redis_open(cfg, &ep, cfg->redis.user, cfg->redis.password, err);
        ok = node && scan_one(node, match, each, arg, err);
        dbt_redis_free(node);
    }
    free(nodes);
    return ok;
}

/* What cli_list_pools gathers: the escaped prefix, and the pools' names so far. */
typedef struct {
    const char *eprefix;
    char **names;
    int n, cap;
} pool_names;

/* A batch of SCAN's keys: the pools they belong to, added to the names. */
static bool add_pools(dbt_redis *r, const redisReply *keys, void *arg, char *err)
{
    (void)r;
    pool_names *pn = arg;
    for (size_t i = 0; i < keys->elements; i++) {
        const redisReply *k = keys->element[i];
        char *name = k->type == REDIS_REPLY_STRING ? pool_of_key(k->str, pn->eprefix) : NULL;
        if (name && !add_name(&pn->names, &pn->n, &pn->cap, name))
            return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    }
    return true;
}

int cli_list_pools(dbt_redis *r, const dbt_config *cfg, char ***out, char *err)
{
    char *eprefix = dbt_key_escape(cfg->key_prefix);
    if (!eprefix)
        return snprintf(err, DBT_ERRLEN, "out of memory"), -1;
    /* The escaped prefix holds none of the glob's special bytes (* ? [ ] \). */
    size_t lm = strlen(eprefix) + 3;
    char *match = malloc(lm);
    if (!match) {
        free(eprefix);
        return snprintf(err, DBT_ERRLEN, "out of memory"), -1;
    }
    snprintf(match, lm, "%s{*", eprefix);
    pool_names pn = {.eprefix = eprefix};
    bool ok = cli_scan_keys(cfg, r, match, add_pools, &pn, err);
    free(match);
    free(eprefix);
    char **names = pn.names;
    int n = pn.n;
    if (!ok) {
        cli_free_names(names, n);
        return -1;
    }
    if (n > 1)
        qsort(names, (size_t)n, sizeof *names, by_name);
    *out = names;
    return n;
}
