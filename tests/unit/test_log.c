/* Logging: logfmt and JSON escaping, truncation, the log file, concurrent writers, redaction. */
#include "log.h"

#include <criterion/criterion.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char TS[] = "2026-11-22T11:39:45.123456Z";

static char *line(dbt_log_format fmt, const dbt_field *f, size_t n)
{
    static char buf[8192];
    dbt_log_format_line(buf, sizeof buf, fmt, TS, DBT_LOG_INFO, "grant", f, n);
    return buf;
}

Test(logfmt, plain_and_quoted_values)
{
    dbt_field f[] = {DBT_S("pool", "db:5432/app"), DBT_I("holders", 3),
                     DBT_MS("waited_ms", 1.5),     DBT_S("sp", "a b"),
                     DBT_S("q", "say \"hi\"\\"),   DBT_S("nl", "x\ny\tz\x01"),
                     DBT_S("empty", ""),           DBT_S("eq", "a=b")};
    cr_expect_str_eq(line(DBT_FMT_LOGFMT, f, 8),
                     "ts=2026-11-22T11:39:45.123456Z level=info event=grant pool=db:5432/app "
                     "holders=3 waited_ms=1.500 sp=\"a b\" q=\"say \\\"hi\\\"\\\\\" "
                     "nl=\"x\\ny\\tz\\x01\" empty=\"\" eq=\"a=b\"\n");
}

/* A minimal JSON validator: objects of string keys with string or number values. */
static const char *json_string_end(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p && *p != '"') {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (!strchr("0123456789abcdefABCDEF", p[i]) || !p[i])
                        return NULL;
                p += 4;
            } else if (!strchr("\"\\/bfnrt", *p) || !*p) {
                return NULL;
            }
        }
        p++;
    }
    return *p == '"' ? p + 1 : NULL;
}

static bool valid_json_object_line(const char *s)
{
    const char *p = s;
    if (*p++ != '{')
        return false;
    for (;;) {
        p = json_string_end(p);
        if (!p || *p++ != ':')
            return false;
        if (*p == '"') {
            p = json_string_end(p);
            if (!p)
                return false;
        } else {
            const char *start = p;
            while (strchr("-0123456789.", *p) && *p)
                p++;
            if (p == start)
                return false;
        }
        if (*p == ',') {
            p++;
            continue;
        }
        return p[0] == '}' && p[1] == '\n' && p[2] == '\0';
    }
}

Test(json, escaping_and_validity)
{
    dbt_field f[] = {DBT_S("pool", "a\"b\\c"),
                     DBT_S("ctl", "\x01\x1f\n\r\t"),
                     DBT_S("utf8", "caf\xc3\xa9"),
                     DBT_S("bad", "x\xff\xfey"),
                     DBT_I("n", -7),
                     DBT_MS("ms", 0.25)};
    char *l = line(DBT_FMT_JSON, f, 6);
    cr_expect(valid_json_object_line(l), "not valid JSON: %s", l);
    cr_expect(strstr(l, "\"pool\":\"a\\\"b\\\\c\"") != NULL, "%s", l);
    cr_expect(strstr(l, "\"ctl\":\"\\u0001\\u001f\\n\\r\\t\"") != NULL, "%s", l);
    cr_expect(strstr(l, "\"utf8\":\"caf\xc3\xa9\"") != NULL, "%s", l);
    cr_expect(strstr(l, "\"bad\":\"x\\ufffd\\ufffdy\"") != NULL, "%s", l);
    cr_expect(strstr(l, "\"n\":-7,\"ms\":0.250}") != NULL, "%s", l);
}

Test(truncation, long_values_are_cut_and_lines_stay_whole)
{
    char *big = malloc(10241);
    memset(big, '{', 10240);
    big[10240] = '\0';
    dbt_field f[] = {DBT_S("pool", big), DBT_S("kind", "query")};
    for (int fmt = 0; fmt < 2; fmt++) {
        char *l = line((dbt_log_format)fmt, f, 2);
        size_t n = strlen(l);
        cr_expect_lt(n, 1200, "a 10 KB value made a %zu byte line", n);
        cr_expect(strstr(l, "...") != NULL);
        cr_expect_eq(l[n - 1], '\n');
        cr_expect_eq(strchr(l, '\n'), l + n - 1, "more than one line");
        cr_expect(strstr(l, "kind") != NULL, "the field after the long one is lost");
        if (fmt == DBT_FMT_JSON)
            cr_expect(valid_json_object_line(l), "%s", l);
    }
    /* Many long fields: the line is cut by whole fields and still ends properly. */
    dbt_field many[20];
    for (int i = 0; i < 20; i++)
        many[i] = DBT_S("f", big);
    for (int fmt = 0; fmt < 2; fmt++) {
        char *l = line((dbt_log_format)fmt, many, 20);
        size_t n = strlen(l);
        cr_expect_leq(n, 8191);
        cr_expect_eq(l[n - 1], '\n');
        if (fmt == DBT_FMT_JSON)
            cr_expect(valid_json_object_line(l), "cut JSON is invalid");
    }
    free(big);
}

Test(log_file, created_0600_whatever_the_umask)
{
    char dir[] = "/tmp/dbt-logdir-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[300];
    snprintf(path, sizeof path, "%s/trace.log", dir);
    mode_t old = umask(0);
    dbt_config c;
    dbt_config_defaults(&c);
    c.log_path = strdup(path);
    c.log_level = DBT_LOG_INFO;
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(&c, err), "%s", err);
    umask(old);
    dbt_field f[] = {DBT_S("pool", "p")};
    dbt_log(DBT_LOG_INFO, "grant", f, 1);
    dbt_log(DBT_LOG_DEBUG, "hidden", f, 1); /* below the level */
    dbt_log_close();
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    FILE *fp = fopen(path, "r");
    char buf[512];
    cr_assert_not_null(fgets(buf, sizeof buf, fp));
    cr_expect(strstr(buf, "event=grant pool=p pid=") != NULL, "%s", buf);
    cr_expect_null(fgets(buf, sizeof buf, fp), "the debug line was written");
    fclose(fp);
    unlink(path);
    rmdir(dir);
    dbt_config_free(&c);
}

static void *writer(void *arg)
{
    char tag[16];
    snprintf(tag, sizeof tag, "w%ld", (long)(intptr_t)arg);
    char pad[300];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 0; i < 500; i++) {
        dbt_field f[] = {DBT_S("writer", tag), DBT_I("i", i), DBT_S("pad", pad),
                         DBT_S("end", "END")};
        dbt_log(DBT_LOG_INFO, "grant", f, 4);
    }
    return NULL;
}

Test(log_file, concurrent_lines_never_interleave)
{
    char path[] = "/tmp/dbt-log-XXXXXX";
    close(mkstemp(path));
    dbt_config c;
    dbt_config_defaults(&c);
    c.log_path = strdup(path);
    c.log_level = DBT_LOG_INFO;
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(&c, err), "%s", err);
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, writer, (void *)i);
    for (int i = 0; i < 8; i++)
        pthread_join(t[i], NULL);
    dbt_log_close();
    FILE *fp = fopen(path, "r");
    char buf[2048];
    int lines = 0, intact = 0;
    while (fgets(buf, sizeof buf, fp)) {
        lines++;
        intact += strncmp(buf, "ts=", 3) == 0 && strstr(buf, " end=END pid=") != NULL &&
                  buf[strlen(buf) - 1] == '\n';
    }
    fclose(fp);
    cr_expect_eq(lines, 4000);
    cr_expect_eq(intact, 4000);
    unlink(path);
    dbt_config_free(&c);
}

Test(redact, urls)
{
    char out[256];
    dbt_redact_url("redis://u:secret@h:1/0", out, sizeof out);
    cr_expect_str_eq(out, "redis://u:***@h:1/0");
    dbt_redact_url("redis://:secret@h", out, sizeof out);
    cr_expect_str_eq(out, "redis://:***@h");
    dbt_redact_url("redis://:se@cret@h/2", out, sizeof out);
    cr_expect_str_eq(out, "redis://:***@h/2");
    dbt_redact_url("redis://app:s3cr/et@10.0.0.5:6379/0", out, sizeof out);
    cr_expect_str_eq(out, "redis://app:***@10.0.0.5:6379/0"); /* as the parser reads it */
    dbt_redact_url("redis://h:6379", out, sizeof out);
    cr_expect_str_eq(out, "redis://h:6379");
    dbt_redact_url("unix:///run/r.sock", out, sizeof out);
    cr_expect_str_eq(out, "unix:///run/r.sock");
    char small[12];
    dbt_redact_url("redis://:secret@host", small, sizeof small);
    cr_expect(strstr(small, "secret") == NULL);
    cr_expect_eq(strlen(small), sizeof small - 1);
}

Test(redact, conninfo)
{
    char out[512];
    dbt_redact_conninfo("host=db password=s3cret dbname=app", out, sizeof out);
    cr_expect_str_eq(out, "host=db password=*** dbname=app");
    dbt_redact_conninfo("host=db PASSWORD = 'se cr\\'et' user=x", out, sizeof out);
    cr_expect_str_eq(out, "host=db PASSWORD = *** user=x");
    dbt_redact_conninfo("postgresql://u:s3cret@db:5432/app?sslmode=require&password=two", out,
                        sizeof out);
    cr_expect_str_eq(out, "postgresql://u:***@db:5432/app?sslmode=require&password=***");
    dbt_redact_conninfo("postgres://db/app", out, sizeof out);
    cr_expect_str_eq(out, "postgres://db/app");
    dbt_redact_conninfo("dbname=app", out, sizeof out);
    cr_expect_str_eq(out, "dbname=app");
}
