/* cmd_forget.c - dbthrottle forget: removes a pool nobody uses from Redis, every key of it. */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: dbthrottle forget POOL... [--redis URL] [--key-prefix P]\n"
    "\n"
    "Removes every key of each POOL from Redis: its counters and histograms, its limit\n"
    "override, class definitions and drain, its adaptive controller's record and the records of\n"
    "the processes that used it. status and the exporter then list it no more. Refuses a pool\n"
    "in use (exit 1, naming what uses it): a holder or waiter, a holder whose lease ran out but\n"
    "that never gave its permit back (its statement may still run), a live process record, or\n"
    "an adaptive controller that leads; forgetting it then would reset its limit under its\n"
    "workers. A POOL Redis has no key of is an error (exit 1). A worker that uses the pool\n"
    "again starts it afresh.\n"
    "\n"
    "  --redis URL     Redis to change (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

/* Why the pool in v is in use, in why (""): what forget must not reset. */
static void in_use(const cli_pool_view *v, char *why, size_t cap)
{
    size_t len = 0;
    why[0] = '\0';
#define SAY(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(why + len, cap - len, "%s", len ? ", " : "");                            \
        if (w_ > 0 && (size_t)w_ < cap - len)                                                      \
            len += (size_t)w_;                                                                     \
        w_ = snprintf(why + len, cap - len, __VA_ARGS__);                                          \
        if (w_ > 0 && (size_t)w_ < cap - len)                                                      \
            len += (size_t)w_;                                                                     \
    } while (0)
    for (int k = 0; k < DBT_NKINDS; k++) {
        const dbt_status_kind *kd = &v->kind[k];
        const char *kind = dbt_kind_name((dbt_kind)k);
        if (kd->nholders)
            SAY("%lld %s unit%s held", kd->nholders, kind, kd->nholders == 1 ? "" : "s");
        if (kd->nwaiters)
            SAY("%lld %s waiter%s", kd->nwaiters, kind, kd->nwaiters == 1 ? "" : "s");
        if (kd->nlapsed)
            SAY("%lld %s unit%s whose lease ran out never given back", kd->nlapsed, kind,
                kd->nlapsed == 1 ? "" : "s");
        if (dbt_status_adapt_leads(kd->adapt, v->now_ms))
            SAY("an adaptive controller leads its %s limit (pid %lld)", kind, kd->adapt->pid);
    }
    for (int i = 0; i < v->nprocs && i < 8; i++) {
        char host[80];
        dbt_escape(v->procs[i].host, 64, false, host, sizeof host);
        SAY("process %s pid %ld", host, v->procs[i].pid);
    }
    if (v->nprocs > 8)
        SAY("%d more processes", v->nprocs - 8);
#undef SAY
}

/* A batch of SCAN's keys of the pool: UNLINKed on the server they came from, counted in *arg. */
static bool unlink_batch(dbt_redis *server, const redisReply *keys, void *arg, char *err)
{
    if (!keys->elements)
        return true;
    const char **argv = calloc(keys->elements + 1, sizeof *argv);
    if (!argv)
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    argv[0] = "UNLINK";
    for (size_t i = 0; i < keys->elements; i++)
        argv[i + 1] = keys->element[i]->str;
    redisReply *del = dbt_redis_command(server, (int)keys->elements + 1, argv, NULL, err);
    free(argv);
    bool ok = del && del->type == REDIS_REPLY_INTEGER;
    if (ok)
        *(long long *)arg += del->integer;
    else if (del)
        snprintf(err, DBT_ERRLEN, "UNLINK: %s",
                 del->type == REDIS_REPLY_ERROR ? del->str : "unexpected reply");
    freeReplyObject(del);
    return ok;
}

/* Every key of the pool: "<prefix>{<pool>}:..." (both escaped: no glob byte in them), on the
 * server, or on each primary of a Cluster (they are all on the one its hash tag names). */
static bool forget_keys(dbt_redis *r, const dbt_config *cfg, const char *pool, long long *n,
                        char *err)
{
    dbt_keys k;
    if (!dbt_keys_init(&k, cfg->key_prefix, pool))
        return snprintf(err, DBT_ERRLEN, "out of memory"), false;
    size_t lm = strlen(k.base) + 3;
    char *match = malloc(lm);
    bool ok = match != NULL;
    if (match) {
        snprintf(match, lm, "%s:*", k.base);
        ok = cli_scan_keys(cfg, r, match, unlink_batch, n, err);
    } else {
        snprintf(err, DBT_ERRLEN, "out of memory");
    }
    free(match);
    dbt_keys_free(&k);
    return ok;
}

int cmd_forget(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (!cli_redis_opt(&ro, opt, optarg))
            return cli_option_error("forget", longopts, argv);
    }
    if (optind == argc)
        return cli_usage_error("forget", "which POOL?");
    dbt_config cfg;
    if (!cli_load_config("forget", &ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("forget", &cfg);
    if (!r) {
        dbt_config_free(&cfg);
        return 1;
    }
    int rc = 0;
    char err[DBT_ERRLEN];
    for (int i = optind; i < argc; i++) {
        const char *pool = argv[i];
        char name[220], why[1200];
        cli_escape_name(pool, 200, true, name, sizeof name);
        cli_pool_view v = {0};
        if (!cli_view_pool(r, &cfg, pool, 0, &v, err)) {
            rc = cli_fail("forget", "pool %s: %s", name, err);
            continue;
        }
        int found = cli_pool_exists(r, &cfg, &v, err);
        in_use(&v, why, sizeof why);
        cli_view_free(&v);
        long long n = 0;
        if (found < 0)
            rc = cli_fail("forget", "pool %s: %s", name, err);
        else if (found == 0)
            rc = cli_fail("forget", "no pool %s under this key prefix", name);
        else if (why[0])
            rc = cli_fail("forget", "pool %s is in use (%s): not forgotten", name, why);
        else if (!forget_keys(r, &cfg, pool, &n, err))
            rc = cli_fail("forget", "pool %s: %s (some of its keys may be gone)", name, err);
        else
            printf("forgot pool %s: %lld key%s removed\n", name, n, n == 1 ? "" : "s");
    }
    if (fflush(stdout) != 0)
        rc = cli_fail("forget", "cannot write the output");
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
