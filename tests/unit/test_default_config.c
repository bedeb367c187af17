/* test_default_config.c - the installed configuration file (/etc/dbthrottle.conf): read when
 * DBTHROTTLE_CONFIG is unset and the file exists, not read when DBTHROTTLE_CONFIG names another
 * file or is set empty, an error (never silently the defaults) when it exists but cannot be read.
 * The default path is the test's own here (dbt_config_load_with_default); tests/package/deb.sh
 * checks the installed library reading the real /etc/dbthrottle.conf in a mount namespace. */
#include "config.h"
#include "settings.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void write_text(char *path_template, const char *text)
{
    int fd = mkstemp(path_template);
    cr_assert(fd >= 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static dbt_source source_of(const dbt_config *c, const char *key)
{
    return dbt_setting_source(c, dbt_setting_find(key));
}

Test(default_config, read_when_dbthrottle_config_is_unset)
{
    char path[] = "/tmp/dbt-etc-conf-XXXXXX";
    write_text(path, "max_queries = 3\npool = from-etc\n");
    dbt_config c;
    char err[DBT_ERRLEN];
    char *env[] = {"HOME=/root", NULL};
    cr_expect(dbt_config_load_with_default(&c, env, path, err), "%s", err);
    cr_expect_eq(c.max_queries, 3);
    cr_expect_str_eq(c.pool, "from-etc");
    cr_expect_eq(source_of(&c, "max_queries"), DBT_SRC_FILE);
    /* `dbthrottle check` names the file beside each of its settings, and the file itself as a
     * default, not as something the environment said. */
    cr_assert_not_null(c.config_file);
    cr_expect_str_eq(c.config_file, path);
    cr_expect_eq(source_of(&c, "config"), DBT_SRC_DEFAULT);
    dbt_config_free(&c);

    /* The environment still wins over it. */
    char *over[] = {"DBTHROTTLE_MAX_QUERIES=5", NULL};
    cr_expect(dbt_config_load_with_default(&c, over, path, err), "%s", err);
    cr_expect_eq(c.max_queries, 5);
    cr_expect_eq(source_of(&c, "max_queries"), DBT_SRC_ENV);
    cr_expect_str_eq(c.pool, "from-etc");
    dbt_config_free(&c);
    unlink(path);
}

Test(default_config, not_read_when_another_file_is_named_or_none)
{
    char etc[] = "/tmp/dbt-etc-conf-XXXXXX", other[] = "/tmp/dbt-other-conf-XXXXXX";
    write_text(etc, "max_queries = 3\npool = from-etc\n");
    write_text(other, "max_connections = 7\n");
    char named[80];
    snprintf(named, sizeof named, "DBTHROTTLE_CONFIG=%s", other);
    dbt_config c;
    char err[DBT_ERRLEN];
    char *env_named[] = {named, NULL};
    cr_expect(dbt_config_load_with_default(&c, env_named, etc, err), "%s", err);
    cr_expect_eq(c.max_queries, 0, "the installed file was read beside the named one");
    cr_expect_eq(c.max_connections, 7);
    cr_expect_str_eq(c.config_file, other);
    dbt_config_free(&c);

    char *env_none[] = {"DBTHROTTLE_CONFIG=", NULL};
    cr_expect(dbt_config_load_with_default(&c, env_none, etc, err), "%s", err);
    cr_expect_eq(c.max_queries, 0, "DBTHROTTLE_CONFIG= (empty) still read the installed file");
    cr_expect_null(c.pool);
    cr_expect_null(c.config_file);
    dbt_config_free(&c);
    unlink(etc);
    unlink(other);
}

Test(default_config, absent_means_the_defaults)
{
    dbt_config c;
    char err[DBT_ERRLEN];
    char *env[] = {NULL};
    cr_expect(dbt_config_load_with_default(&c, env, "/nonexistent/dbthrottle.conf", err), "%s",
              err);
    cr_expect_eq(c.max_queries, 0);
    cr_expect_null(c.config_file);
    dbt_config_free(&c);
    cr_expect(dbt_config_load_with_default(&c, env, NULL, err), "%s", err);
    dbt_config_free(&c);
}

/* A file that is there but cannot be used is the operator's limits lost: refused loudly, as a
 * named file is, rather than run with the defaults. (A directory: root reads a mode 000 file.) */
Test(default_config, there_but_unreadable_is_an_error)
{
    char dir[] = "/tmp/dbt-etc-dir-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    dbt_config c;
    char err[DBT_ERRLEN];
    char *env[] = {NULL};
    cr_expect(!dbt_config_load_with_default(&c, env, dir, err));
    char want[128];
    snprintf(want, sizeof want, "DBTHROTTLE_CONFIG: cannot read %s: Is a directory", dir);
    cr_expect_str_eq(err, want);
    dbt_config_free(&c);
    rmdir(dir);

    char bad[] = "/tmp/dbt-etc-conf-XXXXXX";
    write_text(bad, "max_queries = lots\n");
    cr_expect(!dbt_config_load_with_default(&c, env, bad, err));
    cr_expect(strstr(err, bad) != NULL, "the error names the file: %s", err);
    dbt_config_free(&c);
    unlink(bad);
}

Test(default_config, a_dangling_link_is_an_error_not_no_file)
{
    /* An /etc/dbthrottle.conf that points at a file removed since (a configuration management
     * run half done) must refuse, never run with the defaults instead of the operator's limits. */
    char dir[] = "/tmp/dbt-etc-link-XXXXXX";
    cr_assert_not_null(mkdtemp(dir));
    char link_path[sizeof dir + 32], target[sizeof dir + 32];
    snprintf(link_path, sizeof link_path, "%s/dbthrottle.conf", dir);
    snprintf(target, sizeof target, "%s/gone.conf", dir);
    cr_assert_eq(symlink(target, link_path), 0);
    dbt_config c;
    char err[DBT_ERRLEN];
    char *env[] = {"HOME=/root", NULL};
    cr_expect_not(dbt_config_load_with_default(&c, env, link_path, err));
    cr_expect(strstr(err, link_path) != NULL, "the error names the file: %s", err);
    dbt_config_free(&c);
    unlink(link_path);
    rmdir(dir);
}
