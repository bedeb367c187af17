/* The Sentinel URL forms, the host list parser, and the password files (issue 16). */
#include "config.h"
#include "config_load.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

Test(sentinel_url, forms)
{
    char err[DBT_ERRLEN];
    dbt_redis_url u = {0};
    cr_assert(dbt_parse_redis_url("U", "redis-sentinel://s1:26380,s2,[::1]:7/mymaster/3", &u, err),
              "%s", err);
    cr_expect_eq(u.nsentinels, 3);
    cr_expect_str_eq(u.sentinels[0].host, "s1");
    cr_expect_eq(u.sentinels[0].port, 26380);
    cr_expect_str_eq(u.sentinels[1].host, "s2");
    cr_expect_eq(u.sentinels[1].port, 26379, "the default sentinel port");
    cr_expect_str_eq(u.sentinels[2].host, "::1");
    cr_expect_eq(u.sentinels[2].port, 7);
    cr_expect_str_eq(u.master_name, "mymaster");
    cr_expect_eq(u.db, 3);
    cr_expect_null(u.host, "the master's address comes from the sentinels");
    cr_expect_null(u.password);
    cr_assert(dbt_parse_redis_url("U", "REDIS-SENTINEL://app:p%40w@h/m-1.x_y", &u, err), "%s", err);
    cr_expect_eq(u.nsentinels, 1);
    cr_expect_str_eq(u.user, "app");
    cr_expect_str_eq(u.password, "p@w", "the master's password, as in redis://");
    cr_expect_str_eq(u.master_name, "m-1.x_y");
    cr_expect_eq(u.db, 0);
    cr_assert(dbt_parse_redis_url("U", "redis-sentinel://:pw@h:1/m/", &u, err), "%s", err);
    cr_expect_null(u.user);
    cr_expect_str_eq(u.password, "pw");
    cr_expect(!u.tls);
    /* Over TLS, to the sentinels and the master. */
    cr_assert(dbt_parse_redis_url("U", "rediss-sentinel://:pw@h:1/m", &u, err), "%s", err);
    cr_expect(u.tls);
    cr_expect_eq(u.nsentinels, 1);
    cr_expect_str_eq(u.master_name, "m");
    /* A plain URL after a Sentinel one leaves no sentinel behind. */
    cr_assert(dbt_parse_redis_url("U", "redis://h:6380", &u, err), "%s", err);
    cr_expect_eq(u.nsentinels, 0);
    cr_expect_null(u.master_name);
    dbt_redis_url_free(&u);
}

Test(sentinel_url, bad_ones_name_the_setting_and_never_show_the_password)
{
    const char *bad[] = {
        "redis-sentinel://:hunter2@h",        /* no master name */
        "redis-sentinel://:hunter2@h/",       /* empty master name */
        "redis-sentinel://:hunter2@/m",       /* no sentinel */
        "redis-sentinel://:hunter2@h,/m",     /* an empty host in the list */
        "redis-sentinel://:hunter2@,h/m",     /* an empty host in the list */
        "redis-sentinel://:hunter2@h:0/m",    /* bad port */
        "redis-sentinel://:hunter2@h:x,g/m",  /* bad port */
        "redis-sentinel://:hunter2@h:1x/m",   /* bad port */
        "redis-sentinel://:hunter2@h/m/x",    /* bad db */
        "redis-sentinel://:hunter2@h/m/1/2",  /* bad db */
        "redis-sentinel://:hunter2@h/m?x",    /* bad character in the master name */
        "redis-sentinel://:hunter2@h/m x",    /* bad character in the master name */
        "redis-sentinel://:hunter2@[::1/m",   /* unclosed [ */
        "redis-sentinel://:hunter2@[::1]x/m", /* text after a host */
        "redis-sentinel://hunter2@h/m",       /* a lone user */
        "redis-sentinel://:@h/m",             /* empty password */
        "redis-sentinel://:hunter2@a,b,c,d,e,f,g,h,i,j,k,l,m,n,o,p,q/m", /* 17 sentinels */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        dbt_redis_url u = {0};
        cr_expect(!dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", bad[i], &u, err), "accepted %s",
                  bad[i]);
        cr_expect(strstr(err, "DBTHROTTLE_REDIS_URL") != NULL, "%s", err);
        cr_expect(strchr(err, '\n') == NULL, "%s", err);
        cr_expect(strstr(err, "hunter") == NULL, "password in: %s", err);
        cr_expect_eq(u.nsentinels, 0, "out was touched on failure: %s", bad[i]);
        dbt_redis_url_free(&u);
    }
}

Test(sentinel_url, redacted_and_shown_without_the_password)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_assert(dbt_config_set(&c, "redis_url", "redis-sentinel://app:s3cr3t@a:1,b:2/mm/1",
                             DBT_SRC_ENV, err),
              "%s", err);
    cr_expect_str_eq(c.redis_url_redacted, "redis-sentinel://app:***@a:1,b:2/mm/1");
    dbt_config_free(&c);
}

Test(host_list, forms_and_limits)
{
    dbt_host_port h[DBT_MAX_HOSTS];
    int n = 0;
    const char *t = "a:1,b,[fe80::1%eth0]:3";
    cr_assert_null(dbt_parse_host_list(t, t + strlen(t), 6379, h, &n));
    cr_expect_eq(n, 3);
    cr_expect_str_eq(h[0].host, "a");
    cr_expect_eq(h[0].port, 1);
    cr_expect_eq(h[1].port, 6379);
    cr_expect_str_eq(h[2].host, "fe80::1%eth0");
    cr_expect_eq(h[2].port, 3);
    dbt_host_list_free(h, &n);
    cr_expect_eq(n, 0);
    /* The end bounds the list: what follows is not read. */
    t = "x:5/rest";
    cr_assert_null(dbt_parse_host_list(t, t + 3, 1, h, &n));
    cr_expect_eq(n, 1);
    cr_expect_eq(h[0].port, 5);
    dbt_host_list_free(h, &n);
    const char *bad[] = {"", ",", "a,", "a:,b", "a b", "a:70000", "[::1", "a;b"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        n = 7;
        cr_expect_not_null(dbt_parse_host_list(bad[i], bad[i] + strlen(bad[i]), 1, h, &n),
                           "accepted \"%s\"", bad[i]);
        cr_expect_eq(n, 7, "n was touched on failure");
    }
}

/* ---- password files ---- */

static char dir[] = "/tmp/dbt-pwfile-XXXXXX";

static void make_dir(void)
{
    cr_assert_not_null(mkdtemp(dir));
}

static void remove_dir(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    (void)system(cmd);
}

static const char *file_with(const char *name, const char *content, mode_t mode)
{
    static char path[4][256];
    static int next;
    char *p = path[next++ % 4];
    snprintf(p, 256, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f);
    fputs(content, f);
    fclose(f);
    chmod(p, mode);
    return p;
}

/* Loads the configuration from the given environment. */
static bool load(dbt_config *c, char *err, const char *e1, const char *e2, const char *e3)
{
    char *envp[4] = {(char *)e1, (char *)e2, (char *)e3, NULL};
    return test_config_load(c, envp, err);
}

static char env_buf[8][512];
static const char *env(int slot, const char *key, const char *value)
{
    snprintf(env_buf[slot], sizeof env_buf[slot], "%s=%s", key, value);
    return env_buf[slot];
}

Test(password_file, first_line_is_the_password, .init = make_dir, .fini = remove_dir)
{
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    const char *p = file_with("redis", "s3cr3t pw\r\nsecond line\n", 0600);
    const char *sp = file_with("sentinel", "sent1nel", 0400);
    cr_assert(load(&c, err, "DBTHROTTLE_REDIS_URL=redis-sentinel://a,b/m",
                   env(0, "DBTHROTTLE_REDIS_PASSWORD_FILE", p),
                   env(1, "DBTHROTTLE_SENTINEL_PASSWORD_FILE", sp)),
              "%s", err);
    cr_expect_str_eq(c.redis.password, "s3cr3t pw");
    cr_expect_str_eq(c.sentinel_password, "sent1nel");
    cr_expect_null(c.password_file_warning, "%s", c.password_file_warning);
    cr_expect(strstr(c.redis_url_redacted, "s3cr") == NULL);
    dbt_config_free(&c);
}

Test(password_file, readable_by_others_is_used_with_a_warning, .init = make_dir, .fini = remove_dir)
{
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    const char *p = file_with("redis", "pw\n", 0644);
    cr_assert(load(&c, err, env(0, "DBTHROTTLE_REDIS_PASSWORD_FILE", p), NULL, NULL), "%s", err);
    cr_expect_str_eq(c.redis.password, "pw");
    cr_assert_not_null(c.password_file_warning);
    cr_expect(strstr(c.password_file_warning, "DBTHROTTLE_REDIS_PASSWORD_FILE") != NULL, "%s",
              c.password_file_warning);
    cr_expect(strstr(c.password_file_warning, p) != NULL, "%s", c.password_file_warning);
    cr_expect(strstr(c.password_file_warning, "0644") != NULL, "%s", c.password_file_warning);
    dbt_config_free(&c);
}

/* The README's example once put redis://:s3cret@... in /etc/dbthrottle.conf, installed 0644: every
 * local user could read the password, and nothing said so. The warning never shows the password. */
Test(password_file, a_password_in_a_readable_config_files_url_is_warned_about, .init = make_dir,
     .fini = remove_dir)
{
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    const char *conf = file_with("open.conf", "redis_url = redis://:s3cret@coord:6379/2\n", 0644);
    cr_assert(load(&c, err, env(0, "DBTHROTTLE_CONFIG", conf), NULL, NULL), "%s", err);
    cr_expect_str_eq(c.redis.password, "s3cret");
    cr_assert_not_null(c.config_password_warning);
    cr_expect(strstr(c.config_password_warning, conf) != NULL, "%s", c.config_password_warning);
    cr_expect(strstr(c.config_password_warning, "0644") != NULL, "%s", c.config_password_warning);
    cr_expect(strstr(c.config_password_warning, "redis_password_file") != NULL, "%s",
              c.config_password_warning);
    cr_expect(strstr(c.config_password_warning, "s3cret") == NULL, "%s", c.config_password_warning);
    dbt_config_free(&c);
}

/* The environment's URL wins over the file's, but the file still holds its password, readable by
 * whoever may read the file: warned about all the same (it was not, as the URL in force came from
 * the environment). */
Test(password_file, a_password_in_a_readable_file_is_warned_about_when_the_environment_wins,
     .init = make_dir, .fini = remove_dir)
{
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    const char *conf = file_with("open.conf", "redis_url = redis://:s3cret@coord:6379/2\n", 0644);
    cr_assert(load(&c, err, env(0, "DBTHROTTLE_CONFIG", conf), "DBTHROTTLE_REDIS_URL=redis://other",
                   NULL),
              "%s", err);
    cr_expect_null(c.redis.password, "the environment's URL, without a password, is in force");
    cr_assert_not_null(c.config_password_warning);
    cr_expect(strstr(c.config_password_warning, conf) != NULL, "%s", c.config_password_warning);
    cr_expect(strstr(c.config_password_warning, "s3cret") == NULL, "%s", c.config_password_warning);
    dbt_config_free(&c);
}

/* No warning for a file only its owner reads, for a URL without a password, or for a password
 * that came from the environment and not from the file. */
Test(password_file, no_warning_when_the_file_does_not_expose_a_password, .init = make_dir,
     .fini = remove_dir)
{
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    const char *closed = file_with("closed.conf", "redis_url = redis://:s3cret@coord\n", 0600);
    cr_assert(load(&c, err, env(0, "DBTHROTTLE_CONFIG", closed), NULL, NULL), "%s", err);
    cr_expect_null(c.config_password_warning, "%s", c.config_password_warning);
    dbt_config_free(&c);
    const char *plain = file_with("plain.conf", "redis_url = redis://coord\n", 0644);
    cr_assert(load(&c, err, env(0, "DBTHROTTLE_CONFIG", plain), NULL, NULL), "%s", err);
    cr_expect_null(c.config_password_warning, "%s", c.config_password_warning);
    dbt_config_free(&c);
    cr_assert(load(&c, err, env(0, "DBTHROTTLE_CONFIG", plain),
                   "DBTHROTTLE_REDIS_URL=redis://:s3cret@coord", NULL),
              "%s", err);
    cr_expect_null(c.config_password_warning, "%s", c.config_password_warning);
    dbt_config_free(&c);
}

Test(password_file, refusals_name_setting_and_path_never_the_content, .init = make_dir,
     .fini = remove_dir)
{
    struct {
        const char *key, *name, *content, *url, *why;
    } cases[] = {
        {"DBTHROTTLE_REDIS_PASSWORD_FILE", "missing", NULL, NULL, "cannot read it"},
        {"DBTHROTTLE_REDIS_PASSWORD_FILE", "empty", "", NULL, "first line is empty"},
        {"DBTHROTTLE_REDIS_PASSWORD_FILE", "blank", "\nhunter2\n", NULL, "first line is empty"},
        {"DBTHROTTLE_REDIS_PASSWORD_FILE", "both", "hunter2\n", "redis://:other@h",
         "carries a password too"},
        {"DBTHROTTLE_SENTINEL_PASSWORD_FILE", "missing", NULL, NULL, "cannot read it"},
        {"DBTHROTTLE_SENTINEL_PASSWORD_FILE", "empty", "\r\n", NULL, "first line is empty"},
        {"DBTHROTTLE_SENTINEL_PASSWORD_FILE", ".", NULL, NULL, "not a regular file"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char path[300];
        if (cases[i].content)
            snprintf(path, sizeof path, "%s", file_with(cases[i].name, cases[i].content, 0600));
        else
            snprintf(path, sizeof path, "%s/%s", dir, cases[i].name);
        dbt_config c;
        char err[DBT_ERRLEN] = "";
        cr_expect(!load(&c, err, env(0, cases[i].key, path),
                        cases[i].url ? env(1, "DBTHROTTLE_REDIS_URL", cases[i].url) : NULL, NULL),
                  "case %zu accepted", i);
        cr_expect(strncmp(err, cases[i].key, strlen(cases[i].key)) == 0, "%s", err);
        cr_expect(strstr(err, path) != NULL, "no path in: %s", err);
        cr_expect(strstr(err, cases[i].why) != NULL, "case %zu: %s", i, err);
        cr_expect(strstr(err, "hunter") == NULL && strstr(err, "other") == NULL, "leak: %s", err);
        const char *bad = dbt_config_error_for(&c, DBT_READER_OPERATOR);
        cr_expect(bad && strcmp(bad, err) == 0, "the operator's commands refuse it too");
        dbt_config_free(&c);
    }
}

Test(password_file, a_sentinel_user_needs_the_sentinel_password)
{
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    cr_expect(!load(&c, err, "DBTHROTTLE_SENTINEL_USER=s", NULL, NULL));
    cr_expect(strstr(err, "DBTHROTTLE_SENTINEL_USER") && strstr(err, "PASSWORD_FILE"), "%s", err);
    dbt_config_free(&c);
}
