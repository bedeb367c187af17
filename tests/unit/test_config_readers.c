/* Who a configuration error concerns: the load reads past a bad value (so DBTHROTTLE_DISABLE and
 * DBTHROTTLE_EXEMPT still count), the operator's commands ignore errors in settings only workers
 * read, and a Redis URL with a query string is refused without showing it. */
#include "config.h"
#include "config_load.h"
#include "settings.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void write_conf(char *path, const char *text)
{
    int fd = mkstemp(path);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

Test(config_readers, a_bad_value_does_not_hide_disable_set_after_it)
{
    char *envp[] = {"DBTHROTTLE_MAX_QUERIES=abc", "DBTHROTTLE_DISABLE=on", NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_expect(!test_config_load(&c, envp, err));
    cr_expect(strstr(err, "DBTHROTTLE_MAX_QUERIES") != NULL, "%s", err);
    cr_expect(c.disable, "DISABLE after a bad value was not read");
    cr_expect(dbt_config_value_ok(&c, "disable"));
    cr_expect(!dbt_config_value_ok(&c, "max_queries"));
    dbt_config_free(&c);
}

Test(config_readers, the_file_is_read_past_a_bad_line)
{
    char path[] = "/tmp/dbt-readers-XXXXXX";
    write_conf(path, "max_queries = lots\nnot a setting line\ndisable = on\n"
                     "exempt = application_name=ops*\n");
    char var[64];
    snprintf(var, sizeof var, "DBTHROTTLE_CONFIG=%s", path);
    char *envp[] = {var, NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_expect(!test_config_load(&c, envp, err));
    cr_expect(strstr(err, ":1:") != NULL, "the first error is line 1's: %s", err);
    cr_expect(c.disable);
    cr_expect_eq(c.nexempt, 1);
    cr_expect(dbt_config_value_ok(&c, "exempt"));
    /* The line that names no setting is the file's error, said with its place. */
    cr_assert_not_null(c.other_error);
    cr_expect(strstr(c.other_error, ":2:") != NULL, "%s", c.other_error);
    cr_expect_null(c.row_error[0], "redis_url is fine");
    dbt_config_free(&c);
    unlink(path);
}

Test(config_readers, the_environment_replaces_a_refused_file_value)
{
    char path[] = "/tmp/dbt-readers-XXXXXX";
    write_conf(path, "disable = maybe\n");
    char var[64];
    snprintf(var, sizeof var, "DBTHROTTLE_CONFIG=%s", path);
    char *envp[] = {var, "DBTHROTTLE_DISABLE=on", NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    /* The load still fails (the file is wrong), but the value in effect is the environment's. */
    cr_expect(!test_config_load(&c, envp, err));
    cr_expect(c.disable);
    cr_expect(dbt_config_value_ok(&c, "DBTHROTTLE_DISABLE"));
    dbt_config_free(&c);
    unlink(path);
}

Test(config_readers, operators_ignore_worker_only_settings)
{
    char *envp[] = {"DBTHROTTLE_MAX_QUERIES=abc", "DBTHROTTLE_WAIT_TIMEOUT=soon",
                    "DBTHROTTLE_LOG_LEVEL=loud", NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_expect(!test_config_load(&c, envp, err));
    cr_expect_null(dbt_config_error_for(&c, DBT_READER_OPERATOR));
    const char *w = dbt_config_error_for(&c, DBT_READER_WORKER);
    cr_assert_not_null(w);
    cr_expect(strstr(w, "DBTHROTTLE_MAX_QUERIES") != NULL, "%s", w);
    dbt_config_free(&c);
}

Test(config_readers, operators_read_the_redis_settings)
{
    char *envp[] = {"DBTHROTTLE_MAX_QUERIES=abc", "DBTHROTTLE_KEY_PREFIX=", NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    cr_expect(!test_config_load(&c, envp, err));
    const char *o = dbt_config_error_for(&c, DBT_READER_OPERATOR);
    cr_assert_not_null(o);
    cr_expect(strstr(o, "DBTHROTTLE_KEY_PREFIX") != NULL, "%s", o);
    dbt_config_free(&c);
    /* An unknown name may be a typo of any setting: everybody's error. */
    char *typo[] = {"DBTHROTTLE_REDIS_UR=redis://x", NULL};
    cr_expect(!test_config_load(&c, typo, err));
    cr_expect_not_null(dbt_config_error_for(&c, DBT_READER_OPERATOR));
    dbt_config_free(&c);
}

/* The operator's commands connect with these and nothing else (cli/): the table says so. */
Test(config_readers, the_table_marks_what_only_workers_read)
{
    const char *common[] = {
        "redis_url",  "redis_ca", "redis_cert",          "redis_key",     "redis_timeout",
        "key_prefix", "config",   "redis_password_file", "sentinel_user", "sentinel_password_file"};
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        bool is_common = false;
        for (size_t i = 0; i < sizeof common / sizeof *common; i++)
            is_common = is_common || strcmp(s->key, common[i]) == 0;
        cr_expect_eq(s->worker_only, !is_common, "%s: worker_only %d", s->key, s->worker_only);
    }
}

Test(config_readers, a_query_string_in_the_redis_url_is_refused_unseen)
{
    const char *urls[] = {
        "redis://h:6379/0?password=sekrit", "redis://h?password=sekrit",
        "redis://:pw@h/1?password=sekrit", "redis://h:6379?sekrit",
        "unix:///tmp/r.sock?db=1&password=sekrit", "unix:///tmp/r.sock?password=sekrit",
        "nope://user:sekrit@h?password=sekrit",
        /* An '@' in the query made it look like the end of a userinfo. */
        "redis://127.0.0.1:16399/0?password=Sec@sekrit1", "redis://h/0?password=se@krit",
        "redis://u:pw@h/0?password=sekrit@x", "unix:///tmp/r.sock?db=1@sekrit",
        "unix:///tmp/r.sock?db=@sekrit", "redis://u:sek?rit@h/1"};
    for (size_t i = 0; i < sizeof urls / sizeof *urls; i++) {
        dbt_redis_url u = {0};
        char err[DBT_ERRLEN];
        cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", urls[i], &u, err), "%s", urls[i]);
        cr_expect(strstr(err, "sekrit") == NULL, "shows the secret: %s", err);
        cr_expect(strstr(err, "krit") == NULL && strstr(err, "Sec") == NULL, "%s", err);
        /* Nothing after the scheme is shown: any of it may be a piece of a secret. */
        const char *shown = strstr(err, "...?...\"");
        cr_expect(shown && (shown[-1] == '"' || (shown - err > 3 && !strncmp(shown - 3, "://", 3))),
                  "shows part of the URL: %s", err);
        cr_expect(strstr(err, "DBTHROTTLE_REDIS_URL") != NULL, "%s", err);
        cr_expect(strstr(err, "query string") != NULL || strstr(err, "expected") != NULL, "%s",
                  err);
        dbt_redis_url_free(&u);
    }
    /* What is not a query string still parses: a password holding '?' written %3F, a socket's
     * ?db=N. */
    dbt_redis_url u = {0};
    char err[DBT_ERRLEN];
    cr_expect(dbt_parse_redis_url("X", "redis://u:p%3Fw@h/1", &u, err), "%s", err);
    cr_expect_str_eq(u.password, "p?w");
    cr_expect(dbt_parse_redis_url("X", "unix:///tmp/r.sock?db=3", &u, err), "%s", err);
    cr_expect_eq(u.db, 3);
    dbt_redis_url_free(&u);
}

/* The rule the library, dbthrottle run and check share (dbt_config_error_for): the value in
 * effect counts, but an unknown name or an unreadable file always does. */
Test(config_readers, the_environment_fixing_a_file_value_leaves_no_error)
{
    char path[] = "/tmp/dbt-readers-XXXXXX";
    write_conf(path, "max_queries = abc\n");
    char var[64];
    snprintf(var, sizeof var, "DBTHROTTLE_CONFIG=%s", path);
    char *fixed[] = {var, "DBTHROTTLE_MAX_QUERIES=5", NULL};
    dbt_config c;
    char err[DBT_ERRLEN];
    (void)test_config_load(&c, fixed, err);
    cr_expect_null(dbt_config_error_for(&c, DBT_READER_WORKER));
    cr_expect_eq(c.max_queries, 5);
    dbt_config_free(&c);
    char *unknown[] = {var, "DBTHROTTLE_MAX_QUERIES=5", "DBTHROTTLE_MAX_QUERIE=5", NULL};
    (void)test_config_load(&c, unknown, err);
    cr_expect_not_null(dbt_config_error_for(&c, DBT_READER_WORKER));
    dbt_config_free(&c);
    unlink(path);
    char *unreadable[] = {var, "DBTHROTTLE_MAX_QUERIES=5", NULL};
    (void)test_config_load(&c, unreadable, err);
    const char *e = dbt_config_error_for(&c, DBT_READER_WORKER);
    cr_assert_not_null(e);
    cr_expect(strstr(e, "cannot read") != NULL, "%s", e);
    dbt_config_free(&c);
}
