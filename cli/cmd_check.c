/* cmd_check.c - dbthrottle check: the settings as the library reads them, Redis, the scripts. */
#include "cli.h"

#include "log.h"
#include "scripts.h"
#include "settings.h"

#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

extern char **environ;

static const char usage[] =
    "usage: dbthrottle check\n"
    "\n"
    "Validates the configuration exactly as the library would (DBTHROTTLE_CONFIG's file, then\n"
    "the DBTHROTTLE_* variables; same parser, same messages), opens the log, connects to Redis,\n"
    "loads the scripts, and prints every effective setting with where it came from (default,\n"
    "file, environment). Exit code 0 only when all is well.\n";

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* "7.0.15" from INFO server; true when it is at least 7 (the scripts use PEXPIRE ... NX). */
static bool redis_version(dbt_redis *r, char *out, size_t cap, char *err)
{
    const char *argv[] = {"INFO", "server"};
    redisReply *rep = dbt_redis_command(r, 2, argv, NULL, err);
    if (!rep)
        return false;
    snprintf(out, cap, "unknown");
    const char *v = rep->type == REDIS_REPLY_STRING || rep->type == REDIS_REPLY_STATUS
                        ? strstr(rep->str, "redis_version:")
                        : NULL;
    if (v) {
        v += strlen("redis_version:");
        size_t n = strcspn(v, "\r\n");
        snprintf(out, cap, "%.*s", (int)(n < 30 ? n : 30), v);
    }
    freeReplyObject(rep);
    if (atoi(out) < 7) {
        snprintf(err, DBT_ERRLEN,
                 "Redis %s is too old: dbthrottle's scripts need Redis 7.0 or later", out);
        return false;
    }
    return true;
}

int cmd_check(int argc, char **argv)
{
    static const struct option longopts[] = {{"help", no_argument, NULL, 'h'}, {NULL, 0, NULL, 0}};
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        if (opt == 'h') {
            fputs(usage, stdout);
            return 0;
        }
        return cli_usage_error("check", "unknown option '%s'", argv[optind - 1]);
    }
    if (optind < argc)
        return cli_usage_error("check", "unexpected argument '%s'", argv[optind]);

    dbt_config cfg;
    char err[DBT_ERRLEN];
    if (!dbt_config_load(&cfg, environ, err)) {
        /* The library's own message, as it would log it before refusing every command. */
        cli_fail("check", "%s", err);
        dbt_config_free(&cfg);
        return 1;
    }
    printf("settings, as the library reads them:\n");
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        char value[512];
        s->kind->show(s, &cfg, value, sizeof value);
        dbt_source src = dbt_setting_source(&cfg, s);
        printf("  %-27s %-44s %s%s%s\n", s->env, value, dbt_source_name(src),
               src == DBT_SRC_FILE ? " " : "", src == DBT_SRC_FILE ? cfg.config_file : "");
    }
    int rc = 0;
    if (cfg.log_path && !dbt_log_open(&cfg, err)) {
        cli_fail("check", "DBTHROTTLE_LOG: %s", err);
        rc = 1;
    }
    dbt_log_close();

    double t0 = now_ms();
    dbt_redis *r = dbt_redis_connect(&cfg, err);
    double t1 = now_ms();
    char version[32] = "";
    if (!r) {
        rc = cli_fail("check", "%s", err);
    } else if (!redis_version(r, version, sizeof version, err)) {
        rc = cli_fail("check", "%s", err);
    } else {
        int loaded = 0;
        for (int i = 0; i < dbt_nscripts; i++) {
            if (!dbt_redis_load_script(r, dbt_scripts[i], err)) {
                rc = cli_fail("check", "script %s: %s", dbt_scripts[i]->name, err);
                break;
            }
            loaded++;
        }
        if (loaded == dbt_nscripts)
            printf("redis: %s: connected in %.1f ms, Redis %s, %d scripts loaded\n",
                   cfg.redis_url_redacted, t1 - t0, version, loaded);
    }
    if (r)
        dbt_redis_free(r);

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
