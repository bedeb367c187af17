/* Configuration: value parsers, the file, the environment, sources and error messages. */
#include "config.h"
#include "config_load.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Every message: one line, within DBT_ERRLEN, names the setting. */
static void check_message(const char *err, const char *setting)
{
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    cr_expect(strchr(err, '\r') == NULL, "a carriage return in: %s", err);
    cr_expect(strlen(err) > 0 && strlen(err) < DBT_ERRLEN, "length %zu", strlen(err));
    if (setting)
        cr_expect(strstr(err, setting) != NULL, "does not name %s: %s", setting, err);
}

/* ...and shows the bad value quoted (values in these tests are short and printable). */
static void check_names_value(const char *err, const char *setting, const char *value)
{
    check_message(err, setting);
    char quoted[128];
    snprintf(quoted, sizeof quoted, "bad value \"%s\"", value);
    cr_expect(strstr(err, quoted) != NULL, "does not show %s: %s", quoted, err);
}

/* ---- durations ---- */

Test(duration, good_values)
{
    char err[DBT_ERRLEN];
    int64_t ms;
    struct {
        const char *text;
        int64_t ms;
    } ok[] = {{"500ms", 500},      {"5s", 5000},         {"2m", 120000},    {"1h", 3600000},
              {" 7s ", 7000},      {"\t3m\t", 180000},   {"24h", 86400000}, {"1ms", 1},
              {"1440m", 86400000}, {"86400s", 86400000}, {"007s", 7000}};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        cr_expect(dbt_parse_duration("DBTHROTTLE_LEASE", ok[i].text, false, false, &ms, err),
                  "%s: %s", ok[i].text, err);
        cr_expect_eq(ms, ok[i].ms, "%s gave %lld", ok[i].text, (long long)ms);
    }
}

Test(duration, zero_only_when_allowed)
{
    char err[DBT_ERRLEN];
    const char *zeros[] = {"0", "0s", "0ms", "0h", " 0 "};
    for (size_t i = 0; i < sizeof zeros / sizeof *zeros; i++) {
        int64_t ms = 42;
        cr_expect(dbt_parse_duration("X", zeros[i], true, false, &ms, err), "%s", zeros[i]);
        cr_expect_eq(ms, 0);
        ms = 42;
        cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", zeros[i], false, true, &ms, err));
        cr_expect_eq(ms, 42);
        check_message(err, "DBTHROTTLE_LEASE");
        cr_expect(strstr(err, "more than 0") != NULL, "%s", err);
    }
}

Test(duration, forever_only_when_allowed)
{
    char err[DBT_ERRLEN];
    const char *words[] = {"infinite", "forever", "none", "INFINITE", " Forever "};
    for (size_t i = 0; i < sizeof words / sizeof *words; i++) {
        int64_t ms = 42;
        cr_expect(dbt_parse_duration("X", words[i], false, true, &ms, err), "%s", words[i]);
        cr_expect_eq(ms, DBT_FOREVER);
        ms = 42;
        cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", words[i], true, false, &ms, err));
        cr_expect_eq(ms, 42);
        check_message(err, "DBTHROTTLE_LEASE");
    }
}

Test(duration, bad_values)
{
    const char *bad[] = {"abc",        "-3",    "-3s",   "5",    "5x",
                         "1.5s",       "",      "s",     "25h",  "ms",
                         "5 s",        "5S",    "+5s",   "5ss",  "1d",
                         "86400001ms", "1441m", "0x10s", "5s5s", "9999999999999999999999999999ms",
                         " "};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        int64_t ms = 42;
        cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", bad[i], true, true, &ms, err),
                  "accepted %s", bad[i]);
        cr_expect_eq(ms, 42, "changed the value on error");
        check_names_value(err, "DBTHROTTLE_LEASE", bad[i]);
    }
}

Test(duration, messages_say_what_is_wrong)
{
    char err[DBT_ERRLEN];
    int64_t ms;
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "abc", false, false, &ms, err));
    cr_expect_str_eq(err,
                     "DBTHROTTLE_LEASE: bad value \"abc\": expected a duration such as 500ms, 5s "
                     "or 2m");
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "5", false, false, &ms, err));
    cr_expect_str_eq(err, "DBTHROTTLE_LEASE: bad value \"5\": needs a unit: ms, s, m or h");
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "5d", false, false, &ms, err));
    cr_expect(strstr(err, "unknown unit") != NULL, "%s", err);
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "1.5s", false, false, &ms, err));
    cr_expect(strstr(err, "whole numbers") != NULL, "%s", err);
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "25h", false, false, &ms, err));
    cr_expect(strstr(err, "24h") != NULL, "%s", err);
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "99999999999999999999999s", false, false, &ms,
                                  err));
    cr_expect(strstr(err, "24h") != NULL, "%s", err);
}

Test(messages, values_are_escaped_and_cut)
{
    char err[DBT_ERRLEN];
    int64_t ms;
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", "5\ns\t\x01\"\\", false, false, &ms, err));
    cr_expect(strstr(err, "bad value \"5\\ns\\t\\x01\\\"\\\\\"") != NULL, "%s", err);
    check_message(err, "DBTHROTTLE_LEASE");

    char longv[300];
    memset(longv, 'a', sizeof longv - 1);
    longv[sizeof longv - 1] = '\0';
    cr_expect(!dbt_parse_duration("DBTHROTTLE_LEASE", longv, false, false, &ms, err));
    char expect[100];
    snprintf(expect, sizeof expect, "\"%.64s...\"", longv);
    cr_expect(strstr(err, expect) != NULL, "not cut at 64 bytes: %s", err);

    /* The worst case: every byte escapes to four. */
    char ctl[2000];
    memset(ctl, '\x01', sizeof ctl - 1);
    ctl[sizeof ctl - 1] = '\0';
    cr_expect(!dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", ctl, &(int){0}, err));
    check_message(err, "DBTHROTTLE_MAX_QUERIES");
    cr_expect(strstr(err, "...\"") != NULL, "%s", err);
}

Test(messages, escape_helper_bounds)
{
    char out[16];
    dbt_escape("abcdefghijklmnopqrstuvwxyz", 64, true, out, sizeof out);
    cr_expect_lt(strlen(out), sizeof out);
    cr_expect_eq(out[0], '"');
    cr_expect_eq(out[strlen(out) - 1], '"', "%s", out);
    cr_expect(strstr(out, "...") != NULL, "%s", out);
    char big[64];
    dbt_escape("a\\b\"c", 64, false, big, sizeof big);
    cr_expect_str_eq(big, "a\\b\"c", "unquoted copies keep quotes and backslashes");
}

/* ---- limits and booleans ---- */

Test(limit, good_and_bad)
{
    char err[DBT_ERRLEN];
    int v;
    cr_expect(dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", "8", &v, err));
    cr_expect_eq(v, 8);
    cr_expect(dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", "1", &v, err));
    cr_expect_eq(v, 1);
    cr_expect(dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", " 100000 ", &v, err));
    cr_expect_eq(v, 100000);
    const char *bad[] = {"abc", "-3", "0",  "3x",  "",     "100001", "99999999999999999999",
                         "1e3", " ",  "+3", "3.0", "0x10", "1 2"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        v = 42;
        cr_expect(!dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", bad[i], &v, err), "%s", bad[i]);
        cr_expect_eq(v, 42);
        check_names_value(err, "DBTHROTTLE_MAX_QUERIES", bad[i]);
    }
}

Test(boolean, words)
{
    char err[DBT_ERRLEN];
    bool b;
    const char *yes[] = {"on", "ON", "true", "True", "yes", "YES", "1", " on "};
    const char *no[] = {"off", "Off", "false", "FALSE", "no", "No", "0"};
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        b = false;
        cr_expect(dbt_parse_bool("X", yes[i], &b, err), "%s", yes[i]);
        cr_expect(b, "%s", yes[i]);
    }
    for (size_t i = 0; i < sizeof no / sizeof *no; i++) {
        b = true;
        cr_expect(dbt_parse_bool("X", no[i], &b, err), "%s", no[i]);
        cr_expect(!b, "%s", no[i]);
    }
    const char *bad[] = {"maybe", "", "2", "onn", "y", "enabled"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect(!dbt_parse_bool("DBTHROTTLE_DISABLE", bad[i], &b, err), "%s", bad[i]);
        check_names_value(err, "DBTHROTTLE_DISABLE", bad[i]);
    }
}

/* ---- Redis URLs ---- */

Test(url, forms)
{
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_assert(dbt_parse_redis_url("U", "redis://coord:6380/2", &u, err), "%s", err);
    cr_expect(!u.is_unix);
    cr_expect_str_eq(u.host, "coord");
    cr_expect_eq(u.port, 6380);
    cr_expect_eq(u.db, 2);
    cr_expect_null(u.user);
    cr_expect_null(u.password);
    cr_assert(dbt_parse_redis_url("U", "redis://h", &u, err), "%s", err);
    cr_expect_str_eq(u.host, "h");
    cr_expect_eq(u.port, 6379);
    cr_expect_eq(u.db, 0);
    cr_assert(dbt_parse_redis_url("U", "redis://h/", &u, err), "%s", err);
    cr_expect_eq(u.db, 0);
    cr_assert(dbt_parse_redis_url("U", "redis://h:1/99999", &u, err), "%s", err);
    cr_expect_eq(u.port, 1);
    cr_expect_eq(u.db, 99999);
    cr_assert(dbt_parse_redis_url("U", "redis://:pw@h", &u, err), "%s", err);
    cr_expect_null(u.user);
    cr_expect_str_eq(u.password, "pw");
    cr_assert(dbt_parse_redis_url("U", "redis://app:p%40ss%3a@h:1/", &u, err), "%s", err);
    cr_expect_str_eq(u.user, "app");
    cr_expect_str_eq(u.password, "p@ss:");
    cr_assert(dbt_parse_redis_url("U", "redis://us%40r:a:b@h", &u, err), "%s", err);
    cr_expect_str_eq(u.user, "us@r");
    cr_expect_str_eq(u.password, "a:b", "the first ':' splits user and password");
    cr_assert(dbt_parse_redis_url("U", "redis://:p@ss@h", &u, err), "%s", err);
    cr_expect_str_eq(u.password, "p@ss", "the last '@' ends the userinfo");
    cr_expect_str_eq(u.host, "h");
    cr_assert(dbt_parse_redis_url("U", "redis://[::1]:7000/1", &u, err), "%s", err);
    cr_expect_str_eq(u.host, "::1");
    cr_expect_eq(u.port, 7000);
    cr_expect_eq(u.db, 1);
    cr_assert(dbt_parse_redis_url("U", "redis://[2001:db8::2]", &u, err), "%s", err);
    cr_expect_str_eq(u.host, "2001:db8::2");
    cr_expect_eq(u.port, 6379);
    cr_assert(dbt_parse_redis_url("U", "REDIS://redis-1.internal_x:6379", &u, err), "%s", err);
    cr_expect_str_eq(u.host, "redis-1.internal_x");
    cr_assert(dbt_parse_redis_url("U", "unix:///run/redis.sock?db=3", &u, err), "%s", err);
    cr_expect(u.is_unix);
    cr_expect_str_eq(u.path, "/run/redis.sock");
    cr_expect_null(u.host);
    cr_expect_eq(u.db, 3);
    cr_assert(dbt_parse_redis_url("U", "unix:/tmp/r.sock", &u, err), "%s", err);
    cr_expect_str_eq(u.path, "/tmp/r.sock");
    cr_expect_eq(u.db, 0);
    dbt_redis_url_free(&u);
    cr_expect_null(u.path);
}

Test(url, a_failed_parse_leaves_the_old_value)
{
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_assert(dbt_parse_redis_url("U", "redis://:pw@keep:7/3", &u, err), "%s", err);
    cr_expect(!dbt_parse_redis_url("U", "redis://other:0", &u, err));
    cr_expect_str_eq(u.host, "keep");
    cr_expect_eq(u.port, 7);
    cr_expect_eq(u.db, 3);
    cr_expect_str_eq(u.password, "pw");
    dbt_redis_url_free(&u);
}

Test(url, bad_ones_never_show_the_password)
{
    const char *bad[] = {"rediss://:hunter2@h:0",
                         "REDISS://h:0",
                         "http://h",
                         "redis:/h",
                         "",
                         "redis://",
                         "redis://:hunter2@",
                         "redis://:hunter2@:6379",
                         "redis://hunter2@h",
                         "redis://h:0",
                         "redis://h:65536",
                         "redis://h:",
                         "redis://h:-1",
                         "redis://h:port",
                         "redis://h:63 79",
                         "redis://h/-1",
                         "redis://h/x",
                         "redis://h/100000",
                         "redis://:hunter2@h:99999",
                         "redis://h/1/2",
                         "redis://h junk",
                         "redis://h?db=1",
                         "redis://[::1]x",
                         "redis://[::1",
                         "redis://:hunter2@[::1",
                         "redis:/:hunter2@h",
                         "redis//:hunter2@h",
                         "redis://:hunter2@h:x/0",
                         "unix://",
                         "unix:relative.sock",
                         "unix:///s?db=x",
                         "unix:///s?db=-1",
                         "unix:///s?x=1",
                         "unix:/:hunter2@/s?db=x",
                         "redis://:@h",
                         "redis://u:@h",
                         "redis://u:p%zz@h",
                         "redis://:hunter2%00x@h",
                         "redis://:hun/ter2@h:x",
                         "redis://:hunter2@h:1/x/",
                         "redis://u:hunter2@h\n"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        dbt_redis_url u = {0};
        cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", bad[i], &u, err), "accepted %s",
                  bad[i]);
        check_message(err, "DBTHROTTLE_REDIS_URL");
        cr_expect(strstr(err, "hunter") == NULL && strstr(err, "ter2") == NULL, "password in: %s",
                  err);
        cr_expect_null(u.host, "out was touched on failure");
        dbt_redis_url_free(&u);
    }
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

Test(url, messages)
{
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_expect(dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "rediss://u:pw@h:6380/2", &u, err));
    cr_expect(u.tls && !u.is_unix && u.port == 6380 && u.db == 2);
    cr_expect_str_eq(u.host, "h");
    cr_expect_str_eq(u.user, "u");
    cr_expect_str_eq(u.password, "pw");
    cr_expect(dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "redis://h", &u, err));
    cr_expect(!u.tls);
    dbt_redis_url_free(&u);
    cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "redis://:secret@h:0/1", &u, err));
    cr_expect(strstr(err, "bad value \"redis://:***@h:0/1\": bad port") != NULL, "%s", err);
    cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "redis://user@h", &u, err));
    cr_expect(strstr(err, "needs a password") != NULL, "%s", err);
    cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "memcached://h", &u, err));
    cr_expect(strstr(err, "bad value \"memcached://h\": expected redis://") != NULL, "%s", err);
    /* Without a well-formed scheme, nothing tells where a password is: all of it is hidden. */
    cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "redis:/:secret@h:1", &u, err));
    cr_expect(strstr(err, "bad value \"***\": expected redis://") != NULL, "%s", err);
    /* Without an '@', what follows a host's ':' and is no port may be a password (issue 29). */
    cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "redis://:S3cret", &u, err));
    cr_expect(strstr(err, "bad value \"redis://:***\": no host") != NULL, "%s", err);
}

/* ---- the settings ---- */

Test(config, defaults)
{
    dbt_config c;
    dbt_config_defaults(&c);
    cr_expect_str_eq(c.redis.host, "127.0.0.1");
    cr_expect_eq(c.redis.port, 6379);
    cr_expect_eq(c.redis.db, 0);
    cr_expect_null(c.redis.password);
    cr_expect_str_eq(c.redis_url_redacted, "redis://127.0.0.1:6379");
    cr_expect_eq(c.max_queries, 0);
    cr_expect_eq(c.max_connections, 0);
    cr_expect_null(c.pool);
    cr_expect_eq(c.wait_timeout_ms, 120000);
    cr_expect_eq(c.lease_ms, 10000);
    cr_expect_eq(c.redis_timeout_ms, 1000);
    cr_expect_eq(c.on_redis_error, DBT_ON_ERROR_OPEN);
    cr_expect_null(c.log_path);
    cr_expect_eq(c.log_level, DBT_LOG_WARN);
    cr_expect_eq(c.log_format, DBT_FMT_LOGFMT);
    cr_expect(!c.log_query);
    cr_expect_str_eq(c.key_prefix, "dbthrottle:");
    cr_expect(!c.disable);
    cr_expect_null(c.config_file);
    const char *names[] = {"redis_url", "max_queries", "lease", "log", "config", "nonsense"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        cr_expect_eq(dbt_config_source(&c, names[i]), DBT_SRC_DEFAULT, "%s", names[i]);
    dbt_config_free(&c);
}

Test(config, log_level_names)
{
    cr_expect_str_eq(dbt_log_level_name(DBT_LOG_OFF), "off");
    cr_expect_str_eq(dbt_log_level_name(DBT_LOG_ERROR), "error");
    cr_expect_str_eq(dbt_log_level_name(DBT_LOG_WARN), "warn");
    cr_expect_str_eq(dbt_log_level_name(DBT_LOG_INFO), "info");
    cr_expect_str_eq(dbt_log_level_name(DBT_LOG_DEBUG), "debug");
    cr_expect_str_eq(dbt_log_level_name((dbt_log_level)99), "?");
}

Test(config, unknown_keys_suggest_the_nearest)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_MAX_QUERY", "3", DBT_SRC_ENV, err));
    cr_expect_str_eq(err, "unknown setting DBTHROTTLE_MAX_QUERY (did you mean "
                          "DBTHROTTLE_MAX_QUERIES?)");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LEASEE", "3s", DBT_SRC_ENV, err));
    cr_expect_str_eq(err, "unknown setting DBTHROTTLE_LEASEE (did you mean DBTHROTTLE_LEASE?)");
    cr_expect(!dbt_config_set(&c, "leese", "3s", DBT_SRC_FILE, err));
    cr_expect_str_eq(err, "unknown setting leese (did you mean lease?)");
    cr_expect(!dbt_config_set(&c, "Max_Conections", "3", DBT_SRC_FILE, err));
    cr_expect_str_eq(err, "unknown setting Max_Conections (did you mean max_connections?)");
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_ZZZZZZZZZZZZ", "1", DBT_SRC_ENV, err));
    cr_expect_str_eq(err, "unknown setting DBTHROTTLE_ZZZZZZZZZZZZ");
    /* Four edits away: no suggestion. */
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LOGXXXX", "1", DBT_SRC_ENV, err));
    cr_expect(strstr(err, "did you mean") == NULL, "%s", err);
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LOGXXX", "1", DBT_SRC_ENV, err));
    cr_expect(strstr(err, "did you mean DBTHROTTLE_LOG?") != NULL, "%s", err);
    /* A hostile key stays one line and short. */
    char key[2000];
    memset(key, 'K', sizeof key - 1);
    key[sizeof key - 1] = '\0';
    key[5] = '\n';
    cr_expect(!dbt_config_set(&c, key, "1", DBT_SRC_FILE, err));
    check_message(err, "unknown setting");
    cr_expect_eq(c.max_queries, 0);
    dbt_config_free(&c);
}

/* A file line split at a '=' inside a URL: its "key" holds the URL's password (issue 29). */
Test(config, a_key_holding_a_url_is_not_echoed_past_its_name)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    char text[] = "redis_url: rediss://:S3cret@h/0?ssl=none\n";
    cr_expect(!dbt_config_parse_text(&c, "f.conf", text, err));
    cr_expect(strstr(err, "S3cret") == NULL, "leak: %s", err);
    cr_expect_str_eq(err, "f.conf:1: unknown setting redis_url... (the rest not shown: it may hold "
                          "a secret) (did you mean redis_url?)");
    dbt_config_free(&c);
}

Test(config, bad_values_name_setting_and_value)
{
    struct {
        const char *key, *value, *setting;
    } bad[] = {{"DBTHROTTLE_MAX_QUERIES", "abc", "DBTHROTTLE_MAX_QUERIES"},
               {"max_connections", "-3", "DBTHROTTLE_MAX_CONNECTIONS"},
               {"wait_timeout", "5", "DBTHROTTLE_WAIT_TIMEOUT"},
               {"lease", "0", "DBTHROTTLE_LEASE"},
               {"lease", "199ms", "DBTHROTTLE_LEASE"},
               {"lease", "61m", "DBTHROTTLE_LEASE"},
               {"lease", "infinite", "DBTHROTTLE_LEASE"},
               {"redis_timeout", "9ms", "DBTHROTTLE_REDIS_TIMEOUT"},
               {"redis_timeout", "61s", "DBTHROTTLE_REDIS_TIMEOUT"},
               {"redis_timeout", "0", "DBTHROTTLE_REDIS_TIMEOUT"},
               {"on_redis_error", "sometimes", "DBTHROTTLE_ON_REDIS_ERROR"},
               {"log_level", "loud", "DBTHROTTLE_LOG_LEVEL"},
               {"log_format", "xml", "DBTHROTTLE_LOG_FORMAT"},
               {"log_query", "maybe", "DBTHROTTLE_LOG_QUERY"},
               {"disable", "2", "DBTHROTTLE_DISABLE"},
               {"host_share", "sometimes", "DBTHROTTLE_HOST_SHARE"},
               {"DBTHROTTLE_SHARE_DIR", "dev/shm", "DBTHROTTLE_SHARE_DIR"},
               {"share_dir", "./shm", "DBTHROTTLE_SHARE_DIR"},
               {"redis_url", "redis://h:0", "DBTHROTTLE_REDIS_URL"}};
    dbt_config c;
    dbt_config_defaults(&c);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        cr_expect(!dbt_config_set(&c, bad[i].key, bad[i].value, DBT_SRC_ENV, err), "%s=%s",
                  bad[i].key, bad[i].value);
        check_names_value(err, bad[i].setting, bad[i].value);
        cr_expect_eq(dbt_config_source(&c, bad[i].key), DBT_SRC_DEFAULT,
                     "a failed set changed the source of %s", bad[i].key);
    }
    cr_expect_eq(c.lease_ms, 10000, "a bad value changed the setting");
    cr_expect_eq(c.redis_timeout_ms, 1000);
    cr_expect(c.host_share); /* on by default: a bad value leaves it so */
    cr_expect_str_eq(c.share_dir, "/dev/shm");
    cr_expect_str_eq(c.redis.host, "127.0.0.1");
    dbt_config_free(&c);
}

Test(config, empty_values_are_errors_for_every_setting)
{
    const char *keys[] = {
        "DBTHROTTLE_REDIS_URL",     "DBTHROTTLE_MAX_QUERIES",    "DBTHROTTLE_MAX_CONNECTIONS",
        "DBTHROTTLE_POOL",          "DBTHROTTLE_WAIT_TIMEOUT",   "DBTHROTTLE_LEASE",
        "DBTHROTTLE_REDIS_TIMEOUT", "DBTHROTTLE_ON_REDIS_ERROR", "DBTHROTTLE_LOG",
        "DBTHROTTLE_LOG_LEVEL",     "DBTHROTTLE_LOG_FORMAT",     "DBTHROTTLE_LOG_QUERY",
        "DBTHROTTLE_KEY_PREFIX",    "DBTHROTTLE_DISABLE",        "DBTHROTTLE_CONFIG",
        "DBTHROTTLE_CACHE_PERMITS", "DBTHROTTLE_CACHE_IDLE",     "DBTHROTTLE_LOCAL_HANDOVER",
        "DBTHROTTLE_HOST_SHARE",    "DBTHROTTLE_SHARE_DIR"};
    dbt_config c;
    dbt_config_defaults(&c);
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        char err[DBT_ERRLEN] = "";
        cr_expect(!dbt_config_set(&c, keys[i], "", DBT_SRC_ENV, err), "%s accepted ''", keys[i]);
        check_names_value(err, keys[i], "");
    }
    dbt_config_free(&c);
}

Test(config, every_setting_by_both_names)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    struct {
        const char *key, *value;
    } kv[] = {{"DBTHROTTLE_REDIS_URL", "redis://app:pw@r:7/1"},
              {"max_queries", "8"},
              {"MAX_CONNECTIONS", "20"},
              {"pool", "db main {x} \xc3\xa9"},
              {"wait_timeout", "0"},
              {"DBTHROTTLE_LEASE", "3s"},
              {"redis_timeout", "250ms"},
              {"on_redis_error", "CLOSED"},
              {"log", "/tmp/x.log"},
              {"log_level", "Info"},
              {"log_format", "json"},
              {"log_query", "on"},
              {"key_prefix", "t:"},
              {"disable", "yes"},
              {"host_share", "off"},
              {"DBTHROTTLE_SHARE_DIR", "/run/host-a"}};
    for (size_t i = 0; i < sizeof kv / sizeof *kv; i++)
        cr_expect(dbt_config_set(&c, kv[i].key, kv[i].value, DBT_SRC_FILE, err), "%s: %s",
                  kv[i].key, err);
    cr_expect_str_eq(c.redis.host, "r");
    cr_expect_str_eq(c.redis.user, "app");
    cr_expect_str_eq(c.redis_url_redacted, "redis://app:***@r:7/1");
    cr_expect_eq(c.max_queries, 8);
    cr_expect_eq(c.max_connections, 20);
    cr_expect_str_eq(c.pool, "db main {x} \xc3\xa9");
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
    cr_expect(!c.host_share);
    cr_expect_str_eq(c.share_dir, "/run/host-a");
    const char *shorts[] = {"redis_url",    "max_queries", "max_connections", "pool",
                            "wait_timeout", "lease",       "redis_timeout",   "on_redis_error",
                            "log",          "log_level",   "log_format",      "log_query",
                            "key_prefix",   "disable"};
    for (size_t i = 0; i < sizeof shorts / sizeof *shorts; i++)
        cr_expect_eq(dbt_config_source(&c, shorts[i]), DBT_SRC_FILE, "%s", shorts[i]);

    /* And back: stderr means no path; forever waits; the other words. */
    cr_expect(dbt_config_set(&c, "log", "stderr", DBT_SRC_ENV, err), "%s", err);
    cr_expect_null(c.log_path);
    cr_expect(dbt_config_set(&c, "wait_timeout", "infinite", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(c.wait_timeout_ms, DBT_FOREVER);
    cr_expect(dbt_config_set(&c, "on_redis_error", "open", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(c.on_redis_error, DBT_ON_ERROR_OPEN);
    cr_expect(dbt_config_set(&c, "log_level", "off", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(c.log_level, DBT_LOG_OFF);
    cr_expect(dbt_config_set(&c, "log_format", "logfmt", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(c.log_format, DBT_FMT_LOGFMT);
    cr_expect(dbt_config_set(&c, "lease", "200ms", DBT_SRC_ENV, err), "%s", err);
    cr_expect(dbt_config_set(&c, "lease", "1h", DBT_SRC_ENV, err), "%s", err);
    cr_expect(dbt_config_set(&c, "redis_timeout", "10ms", DBT_SRC_ENV, err), "%s", err);
    cr_expect(dbt_config_set(&c, "redis_timeout", "1m", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(dbt_config_source(&c, "lease"), DBT_SRC_ENV);
    cr_expect_eq(dbt_config_source(&c, "DBTHROTTLE_LEASE"), DBT_SRC_ENV);

    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_CONFIG", "/x", DBT_SRC_FILE, err));
    cr_expect_str_eq(err, "DBTHROTTLE_CONFIG cannot be set inside a config file");
    cr_expect(!dbt_config_set(&c, "config", "/x", DBT_SRC_FILE, err));
    cr_expect_str_eq(err, "DBTHROTTLE_CONFIG cannot be set inside a config file");
    dbt_config_free(&c);
}

Test(config, string_lengths)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    char *big = malloc(65538);
    memset(big, 'p', 65537);
    big[65537] = '\0';
    cr_expect(!dbt_config_set(&c, "pool", big, DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_POOL");
    cr_expect_null(c.pool);
    big[65536] = '\0';
    cr_expect(dbt_config_set(&c, "pool", big, DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(strlen(c.pool), 65536);
    big[257] = '\0';
    cr_expect(!dbt_config_set(&c, "key_prefix", big, DBT_SRC_ENV, err));
    check_message(err, "DBTHROTTLE_KEY_PREFIX");
    cr_expect_str_eq(c.key_prefix, "dbthrottle:");
    big[256] = '\0';
    cr_expect(dbt_config_set(&c, "key_prefix", big, DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(strlen(c.key_prefix), 256);
    cr_expect(dbt_config_set(&c, "key_prefix", "x", DBT_SRC_ENV, err), "%s", err);
    free(big);
    dbt_config_free(&c);
}

Test(config, passwords_never_reach_a_message_or_the_redacted_url)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN] = "";
    cr_assert(dbt_config_set(&c, "redis_url", "redis://:s3cr3t@h:1/2", DBT_SRC_ENV, err), "%s",
              err);
    cr_expect_str_eq(c.redis.password, "s3cr3t");
    cr_expect_str_eq(c.redis_url_redacted, "redis://:***@h:1/2");
    const char *bad[] = {"redis://:s3cr3t@h:0",  "redis://s3cr3t@h",
                         "rediss://:s3cr3t@h:0", "redis://:s3c/r3t@h:x",
                         "redis://u:s3cr3t@h/x", "ftp://:s3cr3t@h",
                         "redis:/:s3cr3t@h:x",   "redis://:s3cr3t",
                         "redis://u:s3cr3t",     "rediss://:s3cr3t/",
                         "REDIS://:s3cr3t",      "redis-sentinel://:s3cr3t",
                         "unix://:s3cr3t@",      "s3cr3t",
                         "redis://h:s3cr3t/0"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect(!dbt_config_set(&c, "redis_url", bad[i], DBT_SRC_ENV, err));
        cr_expect(strstr(err, "s3c") == NULL && strstr(err, "r3t") == NULL, "leak: %s", err);
        check_message(err, "DBTHROTTLE_REDIS_URL");
    }
    char text[] = "redis_url = redis://:s3cr3t@h:99999\n";
    cr_expect(!dbt_config_parse_text(&c, "f.conf", text, err));
    cr_expect(strstr(err, "s3cr3t") == NULL, "leak: %s", err);
    cr_expect(strncmp(err, "f.conf:1: DBTHROTTLE_REDIS_URL: bad value", 40) == 0, "%s", err);
    dbt_config_free(&c);
}

/* ---- the file ---- */

Test(config_file, syntax)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    const char *text = "\xef\xbb\xbf# a comment\n"
                       "\n"
                       "   # an indented comment\n"
                       "max_queries = 8   # trailing comment\n"
                       "  DBTHROTTLE_POOL = \"a \\\"quoted\\\" # pool \\\\ \\n\"  # comment\r\n"
                       "LEASE=3s\r\n"
                       "key_prefix=#1\n"
                       "log = /var/log/a#b.log\n"
                       "\t\n"
                       "log_level = \"info\"";
    cr_assert(dbt_config_parse_text(&c, "f.conf", text, err), "%s", err);
    cr_expect_eq(c.max_queries, 8);
    cr_expect_str_eq(c.pool, "a \"quoted\" # pool \\ \\n", "only \\\" and \\\\ are escapes");
    cr_expect_eq(c.lease_ms, 3000);
    cr_expect_str_eq(c.key_prefix, "#1", "a '#' right after '=' is part of the value");
    cr_expect_str_eq(c.log_path, "/var/log/a#b.log", "a '#' inside a word is not a comment");
    cr_expect_eq(c.log_level, DBT_LOG_INFO);
    cr_expect_eq(dbt_config_source(&c, "pool"), DBT_SRC_FILE);
    cr_expect_eq(dbt_config_source(&c, "disable"), DBT_SRC_DEFAULT);
    dbt_config_free(&c);

    dbt_config_defaults(&c);
    cr_expect(dbt_config_parse_text(&c, "empty.conf", "", err), "%s", err);
    cr_expect(dbt_config_parse_text(&c, "empty.conf", "\n\n# only comments\n", err), "%s", err);
    dbt_config_free(&c);
}

Test(config_file, errors_name_file_and_line)
{
    struct {
        const char *text, *expect;
    } bad[] = {
        {"max_queries 8\n", "f.conf:1: expected key = value"},
        {"\n\n = 3\n", "f.conf:3: missing key before ="},
        {"# c\npool = \"open\n", "f.conf:2: unterminated quote"},
        {"pool = \"a\" b\n", "f.conf:1: text after the closing quote"},
        {"max_queries = 3\nmax_queries = 4\n", "f.conf:2: max_queries is set twice"},
        {"max_queries = 3\nDBTHROTTLE_MAX_QUERIES = 4\n",
         "f.conf:2: DBTHROTTLE_MAX_QUERIES is set twice"},
        {"lease = 5\n", "f.conf:1: DBTHROTTLE_LEASE: bad value \"5\": needs a unit"},
        {"lease = abc\n", "f.conf:1: DBTHROTTLE_LEASE: bad value \"abc\": expected a "
                          "duration such as 500ms, 5s or 2m"},
        {"max_queries =\n", "f.conf:1: DBTHROTTLE_MAX_QUERIES: bad value \"\""},
        {"max_queries = # nothing\n", "f.conf:1: DBTHROTTLE_MAX_QUERIES: bad value \"\""},
        {"max_querys = 3\n", "f.conf:1: unknown setting max_querys (did you mean max_queries?)"},
        {"DBTHROTTLE_MAX_QUERY = 3\n", "f.conf:1: unknown setting DBTHROTTLE_MAX_QUERY "
                                       "(did you mean DBTHROTTLE_MAX_QUERIES?)"},
        {"DBTHROTTLE_CONFIG = /etc/x\n",
         "f.conf:1: DBTHROTTLE_CONFIG cannot be set inside a config file"},
        {"config = /etc/x\n", "f.conf:1: DBTHROTTLE_CONFIG cannot be set inside a config file"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dbt_config c;
        dbt_config_defaults(&c);
        char err[DBT_ERRLEN] = "";
        cr_expect(!dbt_config_parse_text(&c, "f.conf", bad[i].text, err), "accepted %s",
                  bad[i].text);
        cr_expect(strncmp(err, bad[i].expect, strlen(bad[i].expect)) == 0, "want: %s\ngot:  %s",
                  bad[i].expect, err);
        check_message(err, NULL);
        dbt_config_free(&c);
    }
}

Test(config_file, a_hostile_file_name_keeps_messages_one_line)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    char name[1000];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    name[3] = '\n';
    cr_expect(!dbt_config_parse_text(&c, name, "x\n", err));
    check_message(err, "nnn\\nnnn");
    cr_expect(strstr(err, ":1: expected key = value") != NULL, "%s", err);
    dbt_config_free(&c);
}

/* ---- loading from a file and an environment ---- */

static void write_file(char *path, const char *text)
{
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

Test(config_load, environment_wins_over_the_file)
{
    char path[] = "/tmp/dbt-conf-XXXXXX";
    write_file(path, "max_queries = 4\nlease = 2s\nredis_url = redis://:filepw@f:1\n"
                     "pool = from-file\n");
    char cfgvar[64];
    snprintf(cfgvar, sizeof cfgvar, "DBTHROTTLE_CONFIG=%s", path);
    char *envp[] = {
        "PATH=/bin",          "DBTHROTTLE_MAX_QUERIES=6", cfgvar, "DBTHROTTLE_POOL=from env",
        "NOT_DBTHROTTLE_X=1", "DBTHROTTLE_LOG_QUERY=on",  NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_assert(test_config_load(&c, envp, err), "%s", err);
    cr_expect_eq(c.max_queries, 6);
    cr_expect_str_eq(c.pool, "from env");
    cr_expect_eq(c.lease_ms, 2000);
    cr_expect_str_eq(c.redis.host, "f");
    cr_expect_str_eq(c.redis.password, "filepw");
    cr_expect_str_eq(c.redis_url_redacted, "redis://:***@f:1");
    cr_expect(c.log_query);
    cr_expect_str_eq(c.config_file, path);
    cr_expect_eq(dbt_config_source(&c, "max_queries"), DBT_SRC_ENV);
    cr_expect_eq(dbt_config_source(&c, "pool"), DBT_SRC_ENV);
    cr_expect_eq(dbt_config_source(&c, "log_query"), DBT_SRC_ENV);
    cr_expect_eq(dbt_config_source(&c, "lease"), DBT_SRC_FILE);
    cr_expect_eq(dbt_config_source(&c, "redis_url"), DBT_SRC_FILE);
    cr_expect_eq(dbt_config_source(&c, "config"), DBT_SRC_ENV);
    cr_expect_eq(dbt_config_source(&c, "redis_timeout"), DBT_SRC_DEFAULT);
    dbt_config_free(&c);
    unlink(path);
}

Test(config_load, environment_alone_and_nothing_at_all)
{
    dbt_config c;
    char err[DBT_ERRLEN];
    char *envp[] = {"DBTHROTTLE_REDIS_URL=redis://u:envpw@e:2/3", "DBTHROTTLE_LEASE=1s", NULL};
    cr_assert(test_config_load(&c, envp, err), "%s", err);
    cr_expect_str_eq(c.redis_url_redacted, "redis://u:***@e:2/3");
    cr_expect_eq(c.lease_ms, 1000);
    cr_expect_null(c.config_file);
    dbt_config_free(&c);

    char *none[] = {NULL};
    cr_assert(test_config_load(&c, none, err), "%s", err);
    cr_expect_eq(c.lease_ms, 10000);
    dbt_config_free(&c);
    cr_assert(test_config_load(&c, NULL, err), "%s", err);
    dbt_config_free(&c);
}

Test(config_load, errors)
{
    dbt_config c;
    char err[DBT_ERRLEN];
    char *typo[] = {"DBTHROTTLE_MAX_QUERY=6", NULL};
    cr_expect(!test_config_load(&c, typo, err));
    cr_expect_str_eq(err, "unknown setting DBTHROTTLE_MAX_QUERY (did you mean "
                          "DBTHROTTLE_MAX_QUERIES?)");
    dbt_config_free(&c);

    char *empty[] = {"DBTHROTTLE_MAX_QUERIES=", NULL};
    cr_expect(!test_config_load(&c, empty, err));
    check_names_value(err, "DBTHROTTLE_MAX_QUERIES", "");
    dbt_config_free(&c);

    /* DBTHROTTLE_CONFIG= (empty) is no mistake: it opts out of the installed file
     * (test_default_config.c). */
    char *missing[] = {"DBTHROTTLE_CONFIG=/nonexistent/dbthrottle.conf", NULL};
    cr_expect(!test_config_load(&c, missing, err));
    cr_expect_str_eq(err, "DBTHROTTLE_CONFIG: cannot read /nonexistent/dbthrottle.conf: No such "
                          "file or directory");
    dbt_config_free(&c);

    char *dir[] = {"DBTHROTTLE_CONFIG=/tmp", NULL};
    cr_expect(!test_config_load(&c, dir, err));
    cr_expect_str_eq(err, "DBTHROTTLE_CONFIG: cannot read /tmp: Is a directory");
    dbt_config_free(&c);

    char *badurl[] = {"DBTHROTTLE_REDIS_URL=redis://:topsecret@h:notaport", NULL};
    cr_expect(!test_config_load(&c, badurl, err));
    cr_expect(strstr(err, "topsecret") == NULL, "%s", err);
    check_message(err, "DBTHROTTLE_REDIS_URL");
    dbt_config_free(&c);
}

Test(config_load, file_errors_carry_the_file_name)
{
    char path[] = "/tmp/dbt-conf-XXXXXX";
    write_file(path, "# settings\nlease = 2s\nlease = 3s\n");
    char cfgvar[64];
    snprintf(cfgvar, sizeof cfgvar, "DBTHROTTLE_CONFIG=%s", path);
    char *envp[] = {cfgvar, NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_expect(!test_config_load(&c, envp, err));
    char expect[128];
    snprintf(expect, sizeof expect, "%s:3: lease is set twice", path);
    cr_expect_str_eq(err, expect);
    cr_expect_str_eq(c.config_file, path, "the file is recorded even when it is wrong");
    dbt_config_free(&c);
    unlink(path);
}

Test(config_load, files_over_1_mib_are_refused)
{
    char path[] = "/tmp/dbt-conf-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    char *text = malloc((1 << 20) + 1);
    memset(text, '#', (size_t)(1 << 20) + 1);
    cr_assert_eq(write(fd, text, (1 << 20) + 1), (1 << 20) + 1);
    close(fd);
    char cfgvar[64];
    snprintf(cfgvar, sizeof cfgvar, "DBTHROTTLE_CONFIG=%s", path);
    char *envp[] = {cfgvar, NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_expect(!test_config_load(&c, envp, err));
    cr_expect(strstr(err, "larger than 1 MiB") != NULL, "%s", err);
    dbt_config_free(&c);
    /* Exactly 1 MiB of comments is fine. */
    cr_assert_eq(truncate(path, 1 << 20), 0);
    cr_expect(test_config_load(&c, envp, err), "%s", err);
    dbt_config_free(&c);
    free(text);
    unlink(path);
}

/* ---- exemptions (DBTHROTTLE_EXEMPT) ---- */

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
    /* The first match names its pattern; a field not known matches nothing. */
    const char *values[3] = {
        [DBT_EXEMPT_APP] = "pg_monitor-7", [DBT_EXEMPT_USER] = NULL, [DBT_EXEMPT_DATABASE] = "ops"};
    cr_expect_str_eq(dbt_exempt_match(c.exempt, c.nexempt, values), "pg_monitor*");
    values[DBT_EXEMPT_APP] = "report";
    cr_expect_str_eq(dbt_exempt_match(c.exempt, c.nexempt, values), "ops");
    values[DBT_EXEMPT_DATABASE] = NULL;
    cr_expect_null(dbt_exempt_match(c.exempt, c.nexempt, values));
    /* "none": no rule, as a live value that lifts the workers' own says it */
    cr_expect(dbt_config_set(&c, "DBTHROTTLE_EXEMPT", "none", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(c.nexempt, 0);
    cr_expect(dbt_config_set(&c, "idle_in_tx_warn", "2s", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.idle_in_tx_warn_ms, 2000);
    cr_expect(dbt_config_set(&c, "idle_in_tx_warn", "off", DBT_SRC_FILE, err) == false);
    cr_expect(dbt_config_set(&c, "idle_in_tx_warn", "infinite", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.idle_in_tx_warn_ms, DBT_FOREVER);
    dbt_config_free(&c);
}

/* DBTHROTTLE_SERVER_CHECK_INTERVAL: auto follows the lease (well inside the time a dead holder's
 * permit can come back: docs/design.md, "A dead client's statement"), off asks nothing, a value
 * is taken as set, and a bad one is refused naming the setting and the value. */
Test(config, server_check_interval)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_expect_eq(c.server_check_ms, DBT_CHECK_AUTO);
    cr_expect_eq(dbt_server_check_ms(&c), 1000, "auto at the default lease (10s): 1s");
    cr_expect(dbt_config_set(&c, "DBTHROTTLE_LEASE", "2s", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(dbt_server_check_ms(&c), 500, "auto at a 2s lease: lease/4");
    cr_expect(dbt_config_set(&c, "lease", "200ms", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(dbt_server_check_ms(&c), 50, "auto at the shortest lease: lease/4");
    cr_expect(dbt_config_set(&c, "server_check_interval", "OFF", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(dbt_server_check_ms(&c), 0);
    cr_expect(dbt_config_set(&c, "DBTHROTTLE_SERVER_CHECK_INTERVAL", "250ms", DBT_SRC_ENV, err),
              "%s", err);
    cr_expect_eq(dbt_server_check_ms(&c), 250);
    cr_expect(dbt_config_set(&c, "server_check_interval", "Auto", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.server_check_ms, DBT_CHECK_AUTO);
    const char *bad[] = {"5ms", "2h", "0", "soon", "-1s"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        cr_expect(!dbt_config_set(&c, "DBTHROTTLE_SERVER_CHECK_INTERVAL", bad[i], DBT_SRC_ENV, err),
                  "%s refused", bad[i]);
        cr_expect(strstr(err, "DBTHROTTLE_SERVER_CHECK_INTERVAL") && strstr(err, bad[i]), "%s",
                  err);
        cr_expect_eq(c.server_check_ms, DBT_CHECK_AUTO, "a refused value leaves the old one");
    }
    dbt_config_free(&c);
}
