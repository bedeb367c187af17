/* cmd_status.c - dbthrottle status: every pool's limit, holders, waiters and counters, and the
 * processes that use them. */
#include "cli.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: dbthrottle status [POOL...] [--json | --prometheus] [--max-rows N]\n"
    "                         [--idle-after T] [--redis URL] [--key-prefix P]\n"
    "\n"
    "Shows each pool (all pools under the key prefix when none is named): its limit and who\n"
    "set it (by hand, or an adaptive controller: its host, pid, lease, bounds, last change), the\n"
    "holders (host, pid, connection, held for, lease left), the waiters in queue order (host,\n"
    "pid, connection, waited so far) and the counters the scripts keep (grants, queued,\n"
    "refused, cancelled, expired, evicted, total wait). Then the processes that use them\n"
    "(host, pid, program, version, pools) and their state: throttling, unthrottled (cut off\n"
    "from Redis in open mode), refusing (a permanent error, or cut off in closed mode),\n"
    "disabled, or shadow (DBTHROTTLE_MODE=shadow: counted, never held back), with what their\n"
    "last Redis outage cost. Reads Redis only, by SCAN and one script call per pool: safe on a\n"
    "production coordinator. A POOL named that has no key in Redis is an error (exit 1). When\n"
    "Redis cannot be read, --json prints {\"error\": ...} and --prometheus dbthrottle_up 0\n"
    "(exit 1).\n"
    "\n"
    "  --json          one JSON document (format in dbthrottle(1): stable, version 1)\n"
    "  --prometheus    the counters and gauges in Prometheus' text format\n"
    "  --max-rows N    list at most N holders and N waiters per pool and kind (default 50\n"
    "                  for the table, all for --json; the counts are always whole)\n"
    "  --idle-after T  leave out the pools nobody used for longer than T (default 1h; off:\n"
    "                  none) that no live process names; a POOL named is always shown\n"
    "  --redis URL     Redis to read (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

/* The error forms: a machine reading --json or --prometheus gets a document that says what went
 * wrong instead of an empty output (the message also goes to stderr, as ever). */
static void print_error(bool json, bool prom, const char *err)
{
    if (prom) {
        cli_render_prometheus(stdout, NULL, -1, 0);
    } else if (json) {
        fputs("{\"error\":", stdout);
        cli_json_str(stdout, err);
        fputs("}\n", stdout);
    }
}

/* The pools that exist, in the order named (a missing one's view is empty: left out). */
static void render_found(const cli_pool_view *v, int n, double seconds)
{
    cli_pool_view *found = calloc((size_t)n + 1, sizeof *found);
    int nf = 0;
    for (int i = 0; found && i < n; i++)
        if (!v[i].missing)
            found[nf++] = v[i];
    cli_render_prometheus(stdout, found ? found : v, found ? nf : n, seconds);
    free(found);
}

int cmd_status(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"prometheus", no_argument, NULL, 'p'},
        {"max-rows", required_argument, NULL, 'm'},
        {"idle-after", required_argument, NULL, 'I'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    bool json = false, prom = false;
    int max_rows = -1, opt;
    char err[DBT_ERRLEN];
    cli_hidden_idle hidden = {0};
    if (!cli_parse_idle_after(CLI_IDLE_AFTER_DEFAULT, &hidden.after_ms, err))
        return cli_fail("status", "%s", err);
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'j':
            json = true;
            break;
        case 'p':
            prom = true;
            break;
        case 'm':
            if (!dbt_parse_limit("--max-rows", optarg, &max_rows, err))
                return cli_usage_error("status", "%s", err);
            break;
        case 'I':
            if (!cli_parse_idle_after(optarg, &hidden.after_ms, err))
                return cli_usage_error("status", "%s", err);
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            if (cli_redis_opt(&ro, opt, optarg))
                break;
            return cli_option_error("status", longopts, argv);
        }
    }
    if (json && prom)
        return cli_usage_error("status", "--json and --prometheus exclude each other");
    if (max_rows < 0)
        max_rows = json || prom ? 0 : 50;
    dbt_config cfg;
    if (!cli_load_config("status", &ro, &cfg)) {
        print_error(json, prom, "a bad setting (see the message on stderr)");
        return 1;
    }
    dbt_redis *r = NULL;
    cli_pool_view *v = NULL;
    int n = -1;
    double seconds = 0;
    char **names = argv + optind;
    int nnames = argc - optind;
    bool read = cli_read_pools(&cfg, &r, names, nnames, max_rows, &v, &n, &seconds, err);
    /* A pool named on the command line that has no key at all: a typo, or a pool that never
     * existed (or whose keys all expired), not an empty pool. --prometheus still prints the rest
     * with dbthrottle_up 1 (Redis was read: up 0 would say it could not be) and nothing for the
     * missing pool; the message goes to stderr and the exit status is 1. */
    bool missing = false;
    for (int i = 0; read && i < nnames; i++) {
        int found = cli_pool_exists(r, &cfg, &v[i], err);
        if (found == 0) {
            char name[220], ep[220];
            cli_escape_name(names[i], 200, true, name, sizeof name);
            cli_escape_name(cfg.key_prefix, 200, true, ep, sizeof ep);
            snprintf(err, sizeof err, "no pool %s under the key prefix %s", name, ep);
            if (prom) {
                cli_fail("status", "%s", err);
                v[i].missing = true;
                missing = true;
                continue;
            }
        }
        read = found == 1;
    }
    if (read && nnames == 0)
        n = cli_hide_idle(v, n, hidden.after_ms, &hidden.pools);
    int rc = 1;
    if (read) {
        if (json)
            cli_render_json(stdout, v, n, cfg.key_prefix, &hidden);
        else if (prom)
            render_found(v, n, seconds);
        else
            cli_render_text(stdout, v, n, cfg.key_prefix, &hidden);
        rc =
            fflush(stdout) == 0 ? (missing ? 1 : 0) : cli_fail("status", "cannot write the output");
    } else {
        cli_fail("status", "%s", err);
        if (prom)
            cli_render_prometheus(stdout, NULL, -1, seconds);
        else
            print_error(json, false, err);
        fflush(stdout);
    }
    if (n >= 0)
        cli_views_free(v, n);
    if (r)
        dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
