/* cmd_status.c - dbthrottle status: every pool's limit, holders, waiters and counters, and the
 * processes that use them. */
#include "cli.h"

#include <getopt.h>
#include <string.h>

static const char usage[] =
    "usage: dbthrottle status [POOL...] [--json | --prometheus] [--max-rows N]\n"
    "                         [--redis URL] [--key-prefix P]\n"
    "\n"
    "Shows each pool (all pools under the key prefix when none is named): its limit, the\n"
    "holders (host, pid, connection, held for, lease left), the waiters in queue order (host,\n"
    "pid, connection, waited so far) and the counters the scripts keep (grants, queued,\n"
    "refused, cancelled, expired, evicted, total wait). Then the processes that use them\n"
    "(host, pid, program, version, pools) and their state: throttling, unthrottled (cut off\n"
    "from Redis in open mode), refusing (a permanent error, or cut off in closed mode) or\n"
    "disabled, with what their last Redis outage cost. Reads Redis only, by SCAN and one\n"
    "script call per pool: safe on a production coordinator.\n"
    "\n"
    "  --json          one JSON document (format in dbthrottle(1): stable, version 1)\n"
    "  --prometheus    the counters and gauges in Prometheus' text format\n"
    "  --max-rows N    list at most N holders and N waiters per pool and kind (default 50\n"
    "                  for the table, all for --json; the counts are always whole)\n"
    "  --redis URL     Redis to read (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

int cmd_status(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"json", no_argument, NULL, 'j'},
        {"prometheus", no_argument, NULL, 'p'},
        {"max-rows", required_argument, NULL, 'm'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    bool json = false, prom = false;
    int max_rows = -1, opt;
    char err[DBT_ERRLEN];
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
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            if (cli_redis_opt(&ro, opt, optarg))
                break;
            return cli_usage_error("status", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (json && prom)
        return cli_usage_error("status", "--json and --prometheus exclude each other");
    if (max_rows < 0)
        max_rows = json || prom ? 0 : 50;
    dbt_config cfg;
    if (!cli_load_config("status", &ro, &cfg))
        return 1;
    int rc = 1;
    dbt_redis *r = cli_connect("status", &cfg);
    cli_pool_view *v = NULL;
    int n = r ? cli_view_pools(r, &cfg, argv + optind, argc - optind, max_rows, &v, err) : -1;
    if (r && n < 0)
        cli_fail("status", "%s", err);
    if (n >= 0) {
        if (json)
            cli_render_json(stdout, v, n, cfg.key_prefix);
        else if (prom)
            cli_render_prometheus(stdout, v, n);
        else
            cli_render_text(stdout, v, n, cfg.key_prefix);
        rc = fflush(stdout) == 0 ? 0 : cli_fail("status", "cannot write the output");
        cli_views_free(v, n);
    }
    if (r)
        dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
