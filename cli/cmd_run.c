/* cmd_run.c - dbthrottle run: start a program with the library preloaded and the settings set. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef DBT_LIBDIR
#define DBT_LIBDIR "/usr/local/lib"
#endif
/* Debian's multiarch directory name (x86_64-linux-gnu): the package's and a PREFIX=/usr install's
 * library is in ../lib/<multiarch> beside the command, also in a tree unpacked elsewhere. */
#ifndef DBT_MULTIARCH
#define DBT_MULTIARCH ""
#endif

extern char **environ;

static const char usage[] =
    "usage: dbthrottle run [--max-queries N] [--max-connections N] [--pool P] [--redis URL]\n"
    "                      [--trace] [--library PATH] [--no-check] [--] CMD [ARG...]\n"
    "\n"
    "Runs CMD with libdbthrottle.so preloaded and these settings in its environment (each\n"
    "option sets the DBTHROTTLE_ variable of the same name; the others, and DBTHROTTLE_CONFIG,\n"
    "are passed on as they are). Before it starts CMD it checks, and refuses with exit code 2 and\n"
    "the reason: the settings (the library's parser), that the library loads, that Redis answers\n"
    "with these credentials and will not evict the pool's keys, and that this Redis user may run\n"
    "every command a worker sends (a dry run of the scripts on the pool's keys: nothing changes).\n"
    "A Redis only unreachable now (refused, timed out, LOADING, BUSY) is no reason to refuse: a\n"
    "warning, and CMD starts (it follows DBTHROTTLE_ON_REDIS_ERROR until Redis answers). With\n"
    "DBTHROTTLE_DISABLE=on nothing is checked: the library would do nothing.\n"
    "\n"
    "  --max-queries N      at most N queries at once in the pool, across all hosts\n"
    "  --max-connections N  at most N connections at once in the pool\n"
    "  --pool P             the pool's name (default: each connection's host:port/dbname)\n"
    "  --redis URL          the coordinating Redis (redis://[user:pass@]host:port[/db])\n"
    "  --trace              log every acquisition and release (DBTHROTTLE_LOG_LEVEL=info)\n"
    "  --library PATH       the library to preload (default: found beside this program, in\n"
    "                       ../lib or ../lib/<multiarch>, or in " DBT_LIBDIR "); always\n"
    "                       preloaded by its absolute path\n"
    "  --no-check           start CMD without checking the library and Redis first\n";

bool cli_find_library(char *out, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    char cand[4][PATH_MAX + 64];
    int nc = 0;
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            snprintf(cand[nc++], sizeof cand[0], "%s/libdbthrottle.so", exe);
            snprintf(cand[nc++], sizeof cand[0], "%s/../lib/libdbthrottle.so", exe);
            if (DBT_MULTIARCH[0])
                snprintf(cand[nc++], sizeof cand[0], "%s/../lib/%s/libdbthrottle.so", exe,
                         DBT_MULTIARCH);
        }
    }
    snprintf(cand[nc++], sizeof cand[0], "%s/libdbthrottle.so", DBT_LIBDIR);
    for (int i = 0; i < nc; i++) {
        char real[PATH_MAX];
        if (access(cand[i], R_OK) == 0 && realpath(cand[i], real) && strlen(real) < cap) {
            snprintf(out, cap, "%s", real);
            return true;
        }
    }
    return false;
}

/* Puts lib first in LD_PRELOAD, keeping what was there but other copies of this library (a
 * second copy's constructor would start a second client in the worker; one that is not there
 * would make ld.so print a line). */
static bool set_preload(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    size_t cap = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *v = malloc(cap);
    if (!v)
        return false;
    snprintf(v, cap, "%s", lib);
    if (old) {
        char *copy = strdup(old), *save = NULL;
        for (char *t = copy ? strtok_r(copy, ": ", &save) : NULL; t;
             t = strtok_r(NULL, ": ", &save))
            if (cli_is_our_library(t)) {
                if (strcmp(t, lib) != 0)
                    fprintf(stderr,
                            "dbthrottle run: note: LD_PRELOAD's %s left out: the worker preloads "
                            "%s\n",
                            t, lib);
            } else {
                strcat(v, ":");
                strcat(v, t);
            }
        free(copy);
    }
    bool ok = setenv("LD_PRELOAD", v, 1) == 0;
    free(v);
    return ok;
}

int cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {{"max-queries", required_argument, NULL, 'q'},
                                             {"max-connections", required_argument, NULL, 'c'},
                                             {"pool", required_argument, NULL, 'p'},
                                             {"redis", required_argument, NULL, 'r'},
                                             {"trace", no_argument, NULL, 't'},
                                             {"library", required_argument, NULL, 'l'},
                                             {"no-check", no_argument, NULL, 'n'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    /* Each option is checked by the library's own parser before it is exported. */
    static const struct {
        int opt;
        const char *var;
    } vars[] = {{'q', "DBTHROTTLE_MAX_QUERIES"},
                {'c', "DBTHROTTLE_MAX_CONNECTIONS"},
                {'p', "DBTHROTTLE_POOL"},
                {'r', "DBTHROTTLE_REDIS_URL"}};
    const char *library = NULL;
    bool preflight = true;
    char err[DBT_ERRLEN];
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "+h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            fputs(usage, stdout);
            return 0;
        case 't':
            setenv("DBTHROTTLE_LOG_LEVEL", "info", 1);
            continue;
        case 'l':
            library = optarg;
            continue;
        case 'n':
            preflight = false;
            continue;
        case '?':
        case ':':
            return cli_usage_error("run", "bad option '%s'", argv[optind - 1]);
        }
        for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) {
            if (vars[i].opt != opt)
                continue;
            dbt_config scratch;
            dbt_config_defaults(&scratch);
            bool ok = dbt_config_set(&scratch, vars[i].var, optarg, DBT_SRC_ENV, err);
            dbt_config_free(&scratch);
            if (!ok)
                return cli_usage_error("run", "%s", err);
            setenv(vars[i].var, optarg, 1);
        }
    }
    if (optind >= argc)
        return cli_usage_error("run", "no command to run");

    /* The whole configuration, file included, as the worker's library will read it, judged by
     * the library's own rule (dbt_config_error_for: the value in effect counts). A worker that
     * would start refusing or unthrottled (a bad setting, no limit, a library that does not
     * load, a Redis it can never use) is refused here, before it runs, rather than found out
     * later. */
    dbt_config cfg;
    (void)dbt_config_load(&cfg, environ, err);
    /* DBTHROTTLE_DISABLE=on, itself well formed, is the way out whatever else is wrong: the
     * library would do nothing but load, so nothing else is checked. */
    bool disabled = cfg.disable && dbt_config_value_ok(&cfg, "disable");
    const char *bad = disabled ? NULL : dbt_config_error_for(&cfg, DBT_READER_WORKER);
    if (bad) {
        cli_fail("run", "%s", bad);
        dbt_config_free(&cfg);
        return EXIT_USAGE;
    }
    if (!disabled && !cfg.max_queries && !cfg.max_connections) {
        dbt_config_free(&cfg);
        cli_fail("run", "nothing to throttle: give --max-queries or --max-connections "
                        "(or set DBTHROTTLE_MAX_QUERIES or DBTHROTTLE_MAX_CONNECTIONS)");
        return EXIT_USAGE;
    }

    char lib[PATH_MAX];
    if (library) {
        if (access(library, R_OK) != 0 || !realpath(library, lib)) {
            dbt_config_free(&cfg);
            cli_fail("run", "--library %s: %s", library, strerror(errno));
            return EXIT_USAGE;
        }
    } else if (!cli_find_library(lib, sizeof lib)) {
        dbt_config_free(&cfg);
        cli_fail("run",
                 "libdbthrottle.so not found beside this program, in ../lib, ../lib/<multiarch> "
                 "or in %s: give "
                 "--library PATH",
                 DBT_LIBDIR);
        return EXIT_USAGE;
    }
    bool ok = true;
    if (disabled) {
        fprintf(stderr,
                "dbthrottle run: note: DBTHROTTLE_DISABLE is on: %s runs unthrottled, "
                "nothing checked\n",
                argv[optind]);
    } else if (preflight) {
        char version[32];
        bool permanent = false;
        ok = cli_check_library(lib, err);
        if (!ok) {
            cli_fail("run", "%s: %s", lib, err);
        } else if (!cli_check_log(&cfg, err)) {
            /* As check says: the worker's lines would go to the program's stderr instead. A
             * syslog daemon that does not answer now is an outage the library rides out (its
             * lines go to stderr until it answers), as a Redis that is down: a warning. */
            if (strncmp(cfg.log_path, "syslog", 6) == 0)
                fprintf(stderr, "dbthrottle run: warning: %s\n", err);
            else
                ok = !cli_fail("run", "%s (or --no-check to start anyway)", err);
        }
        if (ok && !cli_check_redis(&cfg, cfg.pool ? cfg.pool : CLI_CHECK_POOL, version,
                                   sizeof version, err, &permanent)) {
            /* An outage is not a mistake in the configuration: the worker meets it as it meets
             * any outage (DBTHROTTLE_ON_REDIS_ERROR), and starts throttled once Redis is back. */
            if (permanent)
                ok = !cli_fail("run", "%s (or --no-check to start anyway)", err);
            else
                fprintf(stderr,
                        "dbthrottle run: warning: Redis unreachable now (%s): starting %s, which "
                        "runs per DBTHROTTLE_ON_REDIS_ERROR=%s until Redis answers\n",
                        err, argv[optind],
                        cfg.on_redis_error == DBT_ON_ERROR_OPEN ? "open (unthrottled)"
                        : cfg.mode[0] == DBT_MODE_SHADOW && cfg.mode[1] == DBT_MODE_SHADOW
                            ? "open (shadow mode refuses nothing)"
                        : cfg.mode[0] == DBT_MODE_SHADOW || cfg.mode[1] == DBT_MODE_SHADOW
                            ? "closed (refusing, but for the kind in shadow mode)"
                            : "closed (refusing)");
        }
    }
    dbt_config_free(&cfg);
    if (!ok)
        return EXIT_USAGE;
    if (!set_preload(lib))
        return cli_fail("run", "out of memory");
    execvp(argv[optind], argv + optind);
    int e = errno;
    cli_fail("run", "cannot run %s: %s", argv[optind], strerror(e));
    return e == ENOENT ? 127 : 126;
}
