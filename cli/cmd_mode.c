/* cmd_mode.c - dbthrottle mode: a pool's mode (enforce or shadow), shown as its processes have it,
 * or switched for every worker: the live setting `mode` (cmd_settings.c writes it, checked by the
 * library's own parser), the command an operator rolling out looks for (docs/operations.md,
 * "Rolling out"). */
#include "cli.h"
#include "settings.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: dbthrottle mode POOL                    the mode in force in its processes\n"
    "       dbthrottle mode POOL shadow|enforce     switch every worker of POOL\n"
    "       dbthrottle mode POOL --clear            each worker back to its own\n"
    "                           [--queries|--connections] [--create] [--redis URL]\n"
    "                           [--key-prefix P]\n"
    "\n"
    "shadow: no command waits or is refused; each is still counted in Redis, and the pool's\n"
    "sample feeds dbthrottle report. enforce: the limit holds. The switch is the live setting\n"
    "mode (as dbthrottle set POOL mode VALUE): every worker takes it within a renewal (a lease\n"
    "while idle), in place of its own DBTHROTTLE_MODE, until --clear. Without a mode, lists the\n"
    "modes in force in the pool's processes and where each came from.\n"
    "\n"
    "  --queries       switch (or --clear) the query permits' mode only: the connections keep\n"
    "                  the live mode they have, else each worker's own\n"
    "  --connections   the connection permits' only (DBTHROTTLE_MAX_CONNECTIONS)\n"
    "  --clear         remove the live mode: each worker goes back to its own\n"
    "  --create        a pool Redis has never seen\n"
    "  --redis URL     Redis to use (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P  key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

/* The modes in force in the pool's processes: "pool "app": shadow (live) in 3 processes, ...". */
static int show_mode(const cli_redis_opts *ro, const char *pool)
{
    dbt_config cfg;
    if (!cli_load_config("mode", ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("mode", &cfg);
    if (!r) {
        dbt_config_free(&cfg);
        return 1;
    }
    char name[220], err[DBT_ERRLEN];
    cli_escape_name(pool, 200, true, name, sizeof name);
    int rc = cli_refuse_unused_pool("mode", r, &cfg, pool);
    cli_pool_view v;
    bool viewed = false;
    if (rc < 0 && !(viewed = cli_view_pool(r, &cfg, pool, 0, &v, err)))
        rc = cli_fail("mode", "pool %s: %s", name, err);
    if (rc < 0) {
        rc = 0;
        const dbt_setting *row = dbt_live_find("mode");
        dbt_live live;
        char refused[256];
        bool have_live = v.settings && dbt_live_parse(v.settings, &live, refused, sizeof refused);
        bool live_mode = have_live && row && live.set[row - dbt_settings];
        char shown[64] = "";
        if (live_mode)
            dbt_mode_show(live.cfg.mode, live.cfg.mode_named, shown, sizeof shown);
        printf(
            "pool %s: live mode %s%s\n", name,
            live_mode ? shown : "unset (each worker has its own: DBTHROTTLE_MODE, default enforce)",
            live_mode && strchr(shown, '=') ? " (each worker has its own for the other kind)" : "");
        cli_in_force g[4];
        int n = row ? cli_in_force_of(&v, have_live ? &live : NULL, row, g, 4) : 0;
        if (v.nprocs == 0)
            printf("  in force: no process reports using the pool now\n");
        for (int i = 0; i < n; i++)
            printf("  %-8s in %d of its %d process%s (%s)\n", g[i].value, g[i].processes, v.nprocs,
                   v.nprocs == 1 ? "" : "es", g[i].from);
        if (have_live)
            dbt_live_free(&live);
    }
    if (viewed)
        cli_view_free(&v);
    if (fflush(stdout) != 0)
        rc = cli_fail("mode", "cannot write the output");
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}

/* The live mode to write for `mode POOL [MODE] --queries|--connections` (kind), from the one Redis
 * holds now: that kind set to mode (clear: left out), the other kind as it was. "" when no kind is
 * left (then the live mode is cleared). 1 on a failure (said), else -1. */
static int mode_for_kind(const cli_redis_opts *ro, const char *pool, int kind, const char *mode,
                         bool clear, char *out, size_t cap)
{
    dbt_config cfg;
    if (!cli_load_config("mode", ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("mode", &cfg);
    if (!r) {
        dbt_config_free(&cfg);
        return 1;
    }
    char name[220], err[DBT_ERRLEN];
    cli_escape_name(pool, 200, true, name, sizeof name);
    cli_pool_view v;
    int rc = -1;
    if (!cli_view_pool(r, &cfg, pool, 0, &v, err)) {
        rc = cli_fail("mode", "pool %s: %s", name, err);
    } else {
        const dbt_setting *row = dbt_live_find("mode");
        dbt_live live;
        char refused[256];
        bool have_live = v.settings && dbt_live_parse(v.settings, &live, refused, sizeof refused);
        dbt_mode m[DBT_MODE_KINDS] = {DBT_MODE_ENFORCE, DBT_MODE_ENFORCE};
        unsigned named = 0;
        if (have_live && row && live.set[row - dbt_settings]) {
            memcpy(m, live.cfg.mode, sizeof m);
            named = live.cfg.mode_named;
        }
        if (have_live)
            dbt_live_free(&live);
        cli_view_free(&v);
        if (clear) {
            named &= ~(1u << kind);
        } else {
            m[kind] = strcmp(mode, "shadow") == 0 ? DBT_MODE_SHADOW : DBT_MODE_ENFORCE;
            named |= 1u << kind;
        }
        out[0] = '\0';
        if (named)
            dbt_mode_show(m, named, out, cap);
    }
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}

int cmd_mode(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"clear", no_argument, NULL, 'x'},
        {"create", no_argument, NULL, 'N'},
        {"queries", no_argument, NULL, 'q'},
        {"connections", no_argument, NULL, 'c'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    bool clear = false, create = false;
    int kind = -1; /* both */
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'x':
            clear = true;
            break;
        case 'N':
            create = true;
            break;
        case 'q':
        case 'c':
            if (kind >= 0 && kind != (opt == 'c'))
                return cli_usage_error("mode", "--queries or --connections, not both (without "
                                               "either: both kinds)");
            kind = opt == 'c';
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            if (!cli_redis_opt(&ro, opt, optarg))
                return cli_option_error("mode", longopts, argv);
        }
    }
    int npos = argc - optind;
    char **pos = argv + optind;
    if (npos == 0)
        return cli_usage_error("mode", "which POOL?");
    if (npos > 2)
        return cli_usage_error("mode", "too many arguments (POOL, then shadow or enforce)");
    if (clear && npos == 2)
        return cli_usage_error("mode", "--clear takes no mode (mode POOL --clear)");
    if (npos == 1 && !clear && create)
        return cli_usage_error("mode", "--create goes with a mode to set (mode POOL shadow)");
    if (npos == 1 && !clear && kind >= 0)
        return cli_usage_error("mode",
                               "--%s goes with a mode to set or --clear (mode POOL "
                               "shadow --%s)",
                               dbt_mode_kind_word(kind), dbt_mode_kind_word(kind));
    if (npos == 1 && !clear)
        return show_mode(&ro, pos[0]);
    if (npos == 2 && strcmp(pos[1], "shadow") != 0 && strcmp(pos[1], "enforce") != 0) {
        char shown[120];
        cli_escape_name(pos[1], 80, true, shown, sizeof shown);
        return cli_usage_error("mode", "%s: the mode is shadow or enforce", shown);
    }
    /* One kind: the live value for both kinds, that kind changed (no kind left: cleared). */
    char value[64];
    snprintf(value, sizeof value, "%s", npos == 2 ? pos[1] : "");
    if (kind >= 0) {
        int rc = mode_for_kind(&ro, pos[0], kind, value, clear, value, sizeof value);
        if (rc >= 0)
            return rc;
        clear = value[0] == '\0';
    }
    /* The live setting, as dbthrottle set writes it: one path, one check, one message. Its
     * options first, then "--": a pool named "-p" is a pool, not an option. */
    char *set_argv[12];
    int n = 0;
    set_argv[n++] = "set";
    if (clear)
        set_argv[n++] = "--clear";
    if (create)
        set_argv[n++] = "--create";
    if (ro.redis_url) {
        set_argv[n++] = "--redis";
        set_argv[n++] = (char *)ro.redis_url;
    }
    if (ro.key_prefix) {
        set_argv[n++] = "--key-prefix";
        set_argv[n++] = (char *)ro.key_prefix;
    }
    set_argv[n++] = "--";
    set_argv[n++] = pos[0];
    set_argv[n++] = "mode";
    if (!clear)
        set_argv[n++] = value;
    set_argv[n] = NULL;
    optind = 0; /* getopt_long starts afresh (glibc: 0 also re-reads its environment) */
    return cmd_set(n, set_argv);
}
