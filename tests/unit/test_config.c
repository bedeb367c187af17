/* Configuration: value parsers, the file, the environment, sources and error messages. */
#include "config.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Every message: one line, names the setting, never shows a secret. */
static void check_message(const char *err, const char *setting)
{
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    cr_expect(strlen(err) > 0 && strlen(err) < DBT_ERRLEN);
    if (setting)
        cr_expect(strstr(err, setting) != NULL, "does not name %s: %s", setting, err);
}

Test(duration, good_values)
{
    char err[DBT_ERRLEN];
    int64_t ms;
    struct {
        const char *text;
        int64_t ms;
    } ok[] = {{"500ms", 500}, {"5s", 5000},      {"2m", 120000}, {"1h", 3600000},
              {" 7s ", 7000}, {"24h", 86400000}, {"1ms", 1}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        cr_expect(dbt_parse_duration("DBTHROTTLE_LEASE", ok[i].text, false, false, &ms, err),
                  "%s: %s", ok[i].text, err);
        cr_expect_eq(ms, ok[i].ms, "%s gave %lld", ok[i].text, (long long)ms);
    }
    cr_expect(dbt_parse_duration("X", "0", true, false, &ms, err));
    cr_expect_eq(ms, 0);
    cr_expect(dbt_parse_duration("X", "infinite", false, true, &ms, err));
    cr_expect_eq(ms, DBT_FOREVER);
}

Test(duration, bad_values)
{
    const char *bad[] = {"abc",
                         "-3",
                         "5",
                         "5x",
                         "1.5s",
                         "",
                         "s",
                         "25h",
                         "ms",
                         "5 s",
                         "5S",
                         "0s",
                         "99999999999999999999ms",
                         "infinite"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        int64_t ms = 42;
        cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", bad[i], false, false, &ms, err),
                  "accepted %s", bad[i]);
        cr_expect_eq(ms, 42, "changed the value on error");
        check_message(err, "DBTHROTTLE_LEASE");
    }
    char err[DBT_ERRLEN];
    int64_t ms;
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "5", false, false, &ms, err));
    cr_expect(strstr(err, "unit") != NULL, "%s", err);
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "5d", false, false, &ms, err));
    cr_expect(strstr(err, "\"5d\"") != NULL, "the value is not quoted: %s", err);
    /* A control byte in the value does not break the one-line rule. */
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "5\ns", false, false, &ms, err));
    check_message(err, "DBTHROTTLE_LEASE");
}

Test(limit, good_and_bad)
{
    char err[DBT_ERRLEN];
    int v;
    cr_expect(dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", "8", &v, err));
    cr_expect_eq(v, 8);
    cr_expect(dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", "100000", &v, err));
    const char *bad[] = {"abc", "-3", "0", "3x", "", "100001", "99999999999999999999", "1e3", " "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect(!dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", bad[i], &v, err), "%s", bad[i]);
        check_message(err, "DBTHROTTLE_MAX_QUERIES");
    }
    cr_expect(!dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", "-3", &v, err));
    cr_expect(strstr(err, "\"-3\"") != NULL, "%s", err);
}

Test(boolean, words)
{
    char err[DBT_ERRLEN];
    bool b;
    const char *yes[] = {"on", "ON", "true", "yes", "1"}, *no[] = {"off", "False", "no", "0"};
    for (size_t i = 0; i < 5; i++) {
        cr_expect(dbt_parse_bool("X", yes[i], &b, err));
        cr_expect(b);
    }
    for (size_t i = 0; i < 4; i++) {
        cr_expect(dbt_parse_bool("X", no[i], &b, err));
        cr_expect(!b);
    }
    cr_expect(!dbt_parse_bool("DBTHROTTLE_DISABLE", "maybe", &b, err));
    check_message(err, "DBTHROTTLE_DISABLE");
}

Test(url, forms)
{
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_assert(dbt_parse_redis_url("U", "redis://coord:6380/2", &u, err), "%s", err);
    cr_expect_str_eq(u.host, "coord");
    cr_expect_eq(u.port, 6380);
    cr_expect_eq(u.db, 2);
    cr_expect_null(u.user);
    cr_expect_null(u.password);
    cr_assert(dbt_parse_redis_url("U", "redis://h", &u, err), "%s", err);
    cr_expect_eq(u.port, 6379);
    cr_expect_eq(u.db, 0);
    cr_assert(dbt_parse_redis_url("U", "redis://:pw@h", &u, err), "%s", err);
    cr_expect_null(u.user);
    cr_expect_str_eq(u.password, "pw");
    cr_assert(dbt_parse_redis_url("U", "redis://app:p%40ss@h:1/", &u, err), "%s", err);
    cr_expect_str_eq(u.user, "app");
    cr_expect_str_eq(u.password, "p@ss");
    cr_assert(dbt_parse_redis_url("U", "redis://[::1]:7000", &u, err), "%s", err);
    cr_expect_str_eq(u.host, "::1");
    cr_expect_eq(u.port, 7000);
    cr_assert(dbt_parse_redis_url("U", "unix:///run/redis.sock?db=3", &u, err), "%s", err);
    cr_expect(u.is_unix);
    cr_expect_str_eq(u.path, "/run/redis.sock");
    cr_expect_eq(u.db, 3);
    cr_assert(dbt_parse_redis_url("U", "unix:/tmp/r.sock", &u, err), "%s", err);
    cr_expect_str_eq(u.path, "/tmp/r.sock");
    dbt_redis_url_free(&u);
}

Test(url, bad_ones_never_show_the_password)
{
    const char *bad[] = {"rediss://:hunter2@h",      "http://h",          "redis://",
                         "redis://user@h",           "redis://h:0",       "redis://h:65536",
                         "redis://h:port",           "redis://h/-1",      "redis://h/x",
                         "redis://:hunter2@h:99999", "redis://h/1/2",     "unix://",
                         "unix:///s?db=x",           "redis://:@h",       "redis://u:p%zz@h",
                         "redis://:hunter2@[::1",    "redis:/:hunter2@h", "redis//:hunter2@h",
                         "redis://:hunter2@h:x/0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        dbt_redis_url u = {0};
        cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", bad[i], &u, err), "accepted %s",
                  bad[i]);
        check_message(err, "DBTHROTTLE_REDIS_URL");
        cr_expect(strstr(err, "hunter2") == NULL, "password in: %s", err);
        dbt_redis_url_free(&u);
    }
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "rediss://h", &u, err));
    cr_expect(strstr(err, "TLS") != NULL, "%s", err);
}

Test(url, a_slash_in_the_password_is_still_redacted)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_assert(dbt_config_set(&c, "DBTHROTTLE_REDIS_URL", "redis://app:s3cr/et@10.0.0.5:6379/0",
                             DBT_SRC_ENV, err),
              "%s", err);
    cr_expect_str_eq(c.redis.password, "s3cr/et");
    cr_expect(strstr(c.redis_url_redacted, "s3cr") == NULL, "%s", c.redis_url_redacted);
    dbt_config_free(&c);
}

Test(config, defaults)
{
    dbt_config c;
    dbt_config_defaults(&c);
    cr_expect_str_eq(c.redis.host, "127.0.0.1");
    cr_expect_eq(c.redis.port, 6379);
    cr_expect_eq(c.max_queries, 0);
    cr_expect_eq(c.max_connections, 0);
    cr_expect_null(c.pool);
    cr_expect_eq(c.wait_timeout_ms, 120000);
    cr_expect_eq(c.lease_ms, 10000);
    cr_expect_eq(c.redis_timeout_ms, 1000);
    cr_expect_eq(c.on_redis_error, DBT_ON_ERROR_OPEN);
    cr_expect_eq(c.log_level, DBT_LOG_WARN);
    cr_expect_eq(c.log_format, DBT_FMT_LOGFMT);
    cr_expect_str_eq(c.key_prefix, "dbthrottle:");
    cr_expect_eq(dbt_config_source(&c, "max_queries"), DBT_SRC_DEFAULT);
    dbt_config_free(&c);
}

Test(config, unknown_keys_suggest_the_nearest)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_MAX_QUERY", "3", DBT_SRC_ENV, err));
    cr_expect_str_eq(err, "unknown setting DBTHROTTLE_MAX_QUERY (did you mean "
                          "DBTHROTTLE_MAX_QUERIES?)");
    cr_expect(!dbt_config_set(&c, "leese", "3s", DBT_SRC_FILE, err));
    cr_expect(strstr(err, "did you mean lease?") != NULL, "%s", err);
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_ZZZZZZZZZZZZ", "1", DBT_SRC_ENV, err));
    cr_expect(strstr(err, "did you mean") == NULL, "%s", err);
    check_message(err, "DBTHROTTLE_ZZZZZZZZZZZZ");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_MAX_QUERIES", "", DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_MAX_QUERIES");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LEASE", "100ms", DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_LEASE");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_ON_REDIS_ERROR", "sometimes", DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_ON_REDIS_ERROR");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LOG_LEVEL", "loud", DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_LOG_LEVEL");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LOG_FORMAT", "xml", DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_LOG_FORMAT");
    dbt_config_free(&c);
}

Test(config, every_setting_by_both_names)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    struct {
        const char *key, *value;
    } kv[] = {{"DBTHROTTLE_REDIS_URL", "redis://:pw@r:7/1"},
              {"max_queries", "8"},
              {"MAX_CONNECTIONS", "20"},
              {"pool", "db main {x}"},
              {"wait_timeout", "0"},
              {"DBTHROTTLE_LEASE", "3s"},
              {"redis_timeout", "250ms"},
              {"on_redis_error", "closed"},
              {"log", "/tmp/x.log"},
              {"log_level", "info"},
              {"log_format", "json"},
              {"log_query", "on"},
              {"key_prefix", "t:"},
              {"disable", "yes"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        cr_expect(dbt_config_set(&c, kv[i].key, kv[i].value, DBT_SRC_FILE, err), "%s: %s",
                  kv[i].key, err);
    cr_expect_str_eq(c.redis.host, "r");
    cr_expect_str_eq(c.redis_url_redacted, "redis://:***@r:7/1");
    cr_expect_eq(c.max_queries, 8);
    cr_expect_eq(c.max_connections, 20);
    cr_expect_str_eq(c.pool, "db main {x}");
    cr_expect_eq(c.wait_timeout_ms, 0);
    cr_expect_eq(c.lease_ms, 3000);
    cr_expect_eq(c.redis_timeout_ms, 250);
    cr_expect_eq(c.on_redis_error, DBT_ON_ERROR_CLOSED);
    cr_expect_str_eq(c.log_path, "/tmp/x.log");
    cr_expect_eq(c.log_level, DBT_LOG_INFO);
    cr_expect_eq(c.log_format, DBT_FMT_JSON);
    cr_expect(c.log_query);
    cr_expect_str_eq(c.key_prefix, "t:");
    cr_expect(c.disable);
    cr_expect_eq(dbt_config_source(&c, "lease"), DBT_SRC_FILE);
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_CONFIG", "/x", DBT_SRC_FILE, err));
    dbt_config_free(&c);
}

Test(config_file, syntax)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    const char *text = "# a comment\n"
                       "\n"
                       "max_queries = 8   # trailing comment\n"
                       "  DBTHROTTLE_POOL = \"a \\\"quoted\\\" # pool\"\n"
                       "lease=3s\n";
    cr_assert(dbt_config_parse_text(&c, "f.conf", text, err), "%s", err);
    cr_expect_eq(c.max_queries, 8);
    cr_expect_str_eq(c.pool, "a \"quoted\" # pool");
    cr_expect_eq(c.lease_ms, 3000);
    dbt_config_free(&c);

    struct {
        const char *text, *expect;
    } bad[] = {{"max_queries 8\n", "f.conf:1: expected key = value"},
               {"\n\n = 3\n", "f.conf:3: missing key"},
               {"pool = \"open\n", "f.conf:1: unterminated quote"},
               {"max_queries = 3\nmax_queries = 4\n", "f.conf:2: max_queries is set twice"},
               {"lease = 5\n", "f.conf:1: DBTHROTTLE_LEASE: bad value \"5\""},
               {"max_querys = 3\n", "f.conf:1: unknown setting max_querys (did you mean "
                                    "max_queries?)"},
               {"DBTHROTTLE_CONFIG = /etc/x\n", "f.conf:1: DBTHROTTLE_CONFIG cannot be set"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dbt_config_defaults(&c);
        cr_expect(!dbt_config_parse_text(&c, "f.conf", bad[i].text, err), "accepted %s",
                  bad[i].text);
        cr_expect(strncmp(err, bad[i].expect, strlen(bad[i].expect)) == 0, "got: %s", err);
        check_message(err, NULL);
        dbt_config_free(&c);
    }
}

Test(config_load, environment_wins_over_the_file)
{
    char path[] = "/tmp/dbt-conf-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    const char *text = "max_queries = 4\nlease = 2s\nredis_url = redis://:filepw@f:1\n";
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    char cfgvar[64];
    snprintf(cfgvar, sizeof cfgvar, "DBTHROTTLE_CONFIG=%s", path);
    char *envp[] = {"PATH=/bin", cfgvar, "DBTHROTTLE_MAX_QUERIES=6", NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_assert(dbt_config_load(&c, envp, err), "%s", err);
    cr_expect_eq(c.max_queries, 6);
    cr_expect_eq(c.lease_ms, 2000);
    cr_expect_str_eq(c.redis.host, "f");
    cr_expect_eq(dbt_config_source(&c, "max_queries"), DBT_SRC_ENV);
    cr_expect_eq(dbt_config_source(&c, "lease"), DBT_SRC_FILE);
    cr_expect_eq(dbt_config_source(&c, "redis_timeout"), DBT_SRC_DEFAULT);
    dbt_config_free(&c);

    char *typo[] = {cfgvar, "DBTHROTTLE_MAX_QUERY=6", NULL};
    cr_expect(!dbt_config_load(&c, typo, err));
    cr_expect(strstr(err, "DBTHROTTLE_MAX_QUERIES?") != NULL, "%s", err);
    dbt_config_free(&c);
    unlink(path);

    char *missing[] = {"DBTHROTTLE_CONFIG=/nonexistent/dbthrottle.conf", NULL};
    cr_expect(!dbt_config_load(&c, missing, err));
    cr_expect(strstr(err, "/nonexistent/dbthrottle.conf") != NULL, "%s", err);
    check_message(err, "DBTHROTTLE_CONFIG");
    dbt_config_free(&c);

    char *badurl[] = {"DBTHROTTLE_REDIS_URL=redis://:topsecret@h:notaport", NULL};
    cr_expect(!dbt_config_load(&c, badurl, err));
    cr_expect(strstr(err, "topsecret") == NULL, "%s", err);
    check_message(err, "DBTHROTTLE_REDIS_URL");
    dbt_config_free(&c);
}

Test(exempt, rules)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_assert(dbt_config_set(&c, "DBTHROTTLE_EXEMPT",
                             "application_name=pg_monitor*,user=admin,database=ops", DBT_SRC_ENV,
                             err),
              "%s", err);
    cr_expect_eq(c.nexempt, 3);
    cr_expect_eq(c.exempt[0].field, DBT_EXEMPT_APP);
    cr_expect_str_eq(c.exempt[0].pattern, "pg_monitor*");
    cr_expect_eq(c.exempt[1].field, DBT_EXEMPT_USER);
    cr_expect_str_eq(c.exempt[1].pattern, "admin");
    cr_expect_eq(c.exempt[2].field, DBT_EXEMPT_DATABASE);
    const char *bad[] = {"host=x", "user=", "user", "application_name=a,,user=b", ""};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect(!dbt_config_set(&c, "DBTHROTTLE_EXEMPT", bad[i], DBT_SRC_ENV, err), "%s", bad[i]);
        check_message(err, "DBTHROTTLE_EXEMPT");
    }
    cr_expect_eq(c.nexempt, 3, "a bad value changed the rules");
    cr_expect(dbt_config_set(&c, "idle_in_tx_warn", "2s", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.idle_in_tx_warn_ms, 2000);
    cr_expect(dbt_config_set(&c, "idle_in_tx_warn", "off", DBT_SRC_FILE, err) == false);
    cr_expect(dbt_config_set(&c, "idle_in_tx_warn", "infinite", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.idle_in_tx_warn_ms, DBT_FOREVER);
    dbt_config_free(&c);
}
