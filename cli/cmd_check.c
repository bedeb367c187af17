/* cmd_check.c - dbthrottle check: the settings as the library reads them, Redis, the scripts. */
#include "cli.h"

#include "log.h"
#include "scripts.h"
#include "settings.h"
#include "version.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: dbthrottle check [--redis URL] [--key-prefix P] [--library PATH]\n"
    "\n"
    "Validates the configuration exactly as the library would (DBTHROTTLE_CONFIG's file, then\n"
    "the DBTHROTTLE_* variables; same parser, same messages), opens the log, and prints every\n"
    "effective setting with where it came from (default, file, environment). Then it makes the\n"
    "checks dbthrottle run makes before it starts a worker: the library loads; Redis answers with\n"
    "these credentials, is 7.0 or newer and has no maxmemory-policy that evicts keys; and this\n"
    "Redis user may run every command a worker sends, the scripts' own included (a dry run on the\n"
    "keys of DBTHROTTLE_POOL, or of the pool \"" CLI_CHECK_POOL "\" when none is set: nothing\n"
    "changes). It warns when Redis persists nothing (a restart would lose drains and overrides).\n"
    "It prints this command's version and the library's, and warns when the library, or one\n"
    "that LD_PRELOAD names, is of another version; one that LD_PRELOAD names but that does not\n"
    "load fails the check (ld.so skips it: the program would run unthrottled).\n"
    "Exit code 0 only when all is well.\n"
    "\n"
    "  --redis URL       the coordinating Redis (as DBTHROTTLE_REDIS_URL)\n"
    "  --key-prefix P    the prefix of dbthrottle's keys (as DBTHROTTLE_KEY_PREFIX)\n"
    "  --library PATH    the library to try (default: the one dbthrottle run would preload)\n";

/* Warns when the library at path is not of this command's version (or its version cannot be
 * read); `what` names where it came from. Fills version ("" when unknown). */
static void compare_version(const char *what, const char *path, char *version, size_t cap)
{
    char err[200];
    version[0] = '\0';
    if (!cli_library_version(path, version, cap, err, sizeof err))
        fprintf(stderr, "dbthrottle check: warning: %s %s: cannot tell its version: %s\n", what,
                path, err);
    else if (strcmp(version, DBT_VERSION) != 0)
        fprintf(stderr,
                "dbthrottle check: warning: %s %s is version %s, this command %s: install "
                "both of one version\n",
                what, path, version, DBT_VERSION);
}

/* The libdbthrottle libraries LD_PRELOAD names (a drop-in that preloads the library also runs
 * check with it): each must load, or ld.so prints one line, goes on without it, and the program
 * runs unthrottled with exit code 0; a failure here. One of another version only warns: it
 * loads and throttles. Returns how many would not load. */
static int check_preloaded(void)
{
    const char *pre = getenv("LD_PRELOAD");
    char *copy = pre ? strdup(pre) : NULL, *save = NULL;
    int failed = 0;
    for (char *t = copy ? strtok_r(copy, ": ", &save) : NULL; t; t = strtok_r(NULL, ": ", &save)) {
        if (!cli_is_our_library(t))
            continue;
        char version[40], err[DBT_ERRLEN], found[PATH_MAX];
        /* A path as written (ld.so expands $LIB, $PLATFORM and $ORIGIN: dlopen below does). */
        if (strchr(t, '/') && !strchr(t, '$') && access(t, R_OK) != 0) {
            failed += cli_fail("check",
                               "LD_PRELOAD names %s: %s: ld.so skips it and the program runs "
                               "unthrottled",
                               t, strerror(errno));
            continue;
        }
        /* A bare name is found as ld.so finds it (LD_LIBRARY_PATH, its cache, /lib, /usr/lib). */
        if (!cli_load_library(t, found, sizeof found, err)) {
            failed += cli_fail("check",
                               "LD_PRELOAD names %s, which does not load (%s): ld.so skips it and "
                               "the program runs unthrottled",
                               t, err);
            continue;
        }
        compare_version("LD_PRELOAD's", found, version, sizeof version);
        if (strcmp(found, t) != 0)
            printf("preloaded: %s (%s), version %s\n", t, found, version[0] ? version : "unknown");
        else
            printf("preloaded: %s, version %s\n", t, version[0] ? version : "unknown");
    }
    free(copy);
    return failed;
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {"library", required_argument, NULL, 'l'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    const char *library = NULL;
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        if (opt == 'l') {
            library = optarg;
            continue;
        }
        if (opt != '?' && opt != ':' && cli_redis_opt(&ro, opt, optarg))
            continue;
        return cli_usage_error("check", "bad option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error("check", "unexpected argument '%s'", argv[optind]);

    dbt_config cfg;
    char err[DBT_ERRLEN];
    /* The library's own message, as it would log it before refusing every command. */
    if (!cli_load_config("check", &ro, &cfg))
        return 1;
    /* The operator commands ignore errors in the settings only workers read; check reads as a
     * worker does. */
    const char *bad = dbt_config_error_for(&cfg, DBT_READER_WORKER);
    if (bad) {
        cli_fail("check", "%s", bad);
        dbt_config_free(&cfg);
        return 1;
    }
    printf("dbthrottle %s\n", DBT_VERSION);
    printf("settings, as the library reads them:\n");
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        char value[512];
        s->kind->show(s, &cfg, value, sizeof value);
        dbt_source src = dbt_setting_source(&cfg, s);
        printf("  %-27s %-44s %s%s%s\n", s->env, value, dbt_source_name(src),
               src == DBT_SRC_FILE ? " " : "", src == DBT_SRC_FILE ? cfg.config_file : "");
    }
    if (cfg.password_file_warning)
        fprintf(stderr, "dbthrottle check: warning: %s\n", cfg.password_file_warning);
    if (cfg.config_password_warning)
        fprintf(stderr, "dbthrottle check: warning: %s\n", cfg.config_password_warning);
    int rc = 0;
    if (!cli_check_log(&cfg, err))
        rc = cli_fail("check", "%s", err);

    char lib[PATH_MAX];
    if (library ? !realpath(library, lib) : !cli_find_library(lib, sizeof lib)) {
        rc = cli_fail("check", "%s: %s", library ? library : "libdbthrottle.so",
                      library ? strerror(errno) : "not found (give --library PATH)");
    } else if (!cli_check_library(lib, err)) {
        rc = cli_fail("check", "%s: %s", lib, err);
    } else {
        char version[40];
        compare_version("the library", lib, version, sizeof version);
        printf("library: %s loads, version %s\n", lib, version[0] ? version : "unknown");
    }
    if (check_preloaded())
        rc = 1;

    double t0 = now_ms();
    char version[32] = "";
    bool permanent; /* a check fails on an outage too: dbthrottle run starts workers through it */
    if (!cli_check_redis(&cfg, cfg.pool ? cfg.pool : CLI_CHECK_POOL, version, sizeof version, err,
                         &permanent)) {
        rc = cli_fail("check", "%s", err);
    } else {
        printf("redis: %s: connected and checked in %.1f ms, Redis %s, %d scripts loaded, "
               "every command a worker sends allowed (dry run on pool %s)\n",
               cfg.redis_url_redacted, now_ms() - t0, version, dbt_nscripts,
               cfg.pool ? cfg.pool : CLI_CHECK_POOL);
        int persists = cli_redis_persists(&cfg, err);
        if (persists == 0)
            fprintf(stderr,
                    "dbthrottle check: warning: Redis persists nothing (no RDB save points, "
                    "appendonly no): a restart loses every drain and limit override (dbthrottle "
                    "drain, limit); set save or appendonly yes in that Redis\n");
        else if (persists < 0)
            fprintf(stderr,
                    "dbthrottle check: warning: cannot tell whether Redis persists drains and "
                    "overrides (%s)\n",
                    err);
    }

    if (cfg.disable) {
        printf("DBTHROTTLE_DISABLE is on: the library would do nothing\n");
    } else if (!cfg.max_queries && !cfg.max_connections) {
        rc = cli_fail("check", "not throttled: neither DBTHROTTLE_MAX_QUERIES nor "
                               "DBTHROTTLE_MAX_CONNECTIONS is set");
    }
    if (rc == 0)
        printf("ok\n");
    dbt_config_free(&cfg);
    return rc;
}
