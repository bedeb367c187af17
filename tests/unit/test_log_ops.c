/* The log as operators run it: a renamed file is followed, dbt_log_reopen, syslog's socket,
 * priority and header, the lines asked for at any level but off, and the log settings. */
#include "config.h"
#include "log.h"
#include "log_syslog.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (!fp)
        return strdup("");
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static bool file_has(const char *path, const char *needle)
{
    char *t = slurp(path);
    bool has = strstr(t, needle) != NULL;
    free(t);
    return has;
}

static void open_with(dbt_config *c, const char *dest, dbt_log_level level)
{
    dbt_config_defaults(c);
    c->log_path = strdup(dest);
    c->log_level = level;
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(c, err), "%s", err);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

Test(log_rotation, a_renamed_file_is_followed_within_seconds)
{
    char dir[] = "/tmp/dbt-logrot-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[300], moved[300];
    snprintf(path, sizeof path, "%s/d.log", dir);
    snprintf(moved, sizeof moved, "%s/d.log.1", dir);
    dbt_config c;
    open_with(&c, path, DBT_LOG_INFO);
    dbt_log(DBT_LOG_INFO, "before", NULL, 0);
    cr_assert_eq(rename(path, moved), 0);
    /* Lines go on; within a bounded time (the check runs at most once a second) one lands in a new
     * file at the path, and from then on none in the renamed one. */
    int i = 0;
    for (; i < 500 && access(path, F_OK) != 0; i++) {
        dbt_log(DBT_LOG_INFO, "during", NULL, 0);
        sleep_ms(10);
    }
    cr_assert(access(path, F_OK) == 0, "no new file after %d lines", i);
    char *old_text = slurp(moved);
    dbt_log(DBT_LOG_INFO, "after", NULL, 0);
    char *old_again = slurp(moved);
    cr_expect_str_eq(old_again, old_text, "a line went to the renamed file after the reopen");
    cr_expect(strstr(old_text, "event=before") != NULL);
    cr_expect(file_has(path, "event=after"));
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    free(old_text);
    free(old_again);
    dbt_log_close();
    dbt_config_free(&c);
    unlink(path);
    unlink(moved);
    rmdir(dir);
}

Test(log_rotation, reopen_now_for_a_sighup)
{
    char dir[] = "/tmp/dbt-logreo-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[300], moved[300];
    snprintf(path, sizeof path, "%s/d.log", dir);
    snprintf(moved, sizeof moved, "%s/d.log.1", dir);
    dbt_config c;
    open_with(&c, path, DBT_LOG_INFO);
    dbt_log(DBT_LOG_INFO, "before", NULL, 0);
    cr_assert_eq(rename(path, moved), 0);
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_reopen(err), "%s", err);
    dbt_log(DBT_LOG_INFO, "after", NULL, 0);
    cr_expect(file_has(path, "event=after"));
    cr_expect(!file_has(moved, "event=after"));
    dbt_log_close();
    dbt_config_free(&c);
    unlink(path);
    unlink(moved);
    rmdir(dir);
}

Test(log_syslog, priority_is_facility_and_severity)
{
    cr_expect_eq(dbt_syslog_priority(DBT_FACILITY_USER, DBT_LOG_ERROR), 1 * 8 + 3);
    cr_expect_eq(dbt_syslog_priority(DBT_FACILITY_DAEMON, DBT_LOG_WARN), 3 * 8 + 4);
    cr_expect_eq(dbt_syslog_priority(DBT_FACILITY_LOCAL0, DBT_LOG_INFO), 16 * 8 + 6);
    cr_expect_eq(dbt_syslog_priority(DBT_FACILITY_LOCAL0 + 7, DBT_LOG_DEBUG), 23 * 8 + 7);
}

Test(log_syslog, header_has_pri_time_ident_and_pid)
{
    char h[128];
    size_t n = dbt_syslog_header(h, sizeof h, 158, "worker", 4242);
    cr_assert_eq(n, strlen(h));
    char mon[4];
    int day, hh, mm, ss;
    long pid;
    char ident[16];
    cr_assert_eq(
        sscanf(h, "<158>%3s %d %d:%d:%d %15[^[][%ld]: ", mon, &day, &hh, &mm, &ss, ident, &pid), 7,
        "%s", h);
    cr_expect(strstr("JanFebMarAprMayJunJulAugSepOctNovDec", mon) != NULL, "%s", h);
    cr_expect_str_eq(ident, "worker");
    cr_expect_eq(pid, 4242);
    cr_expect(strcmp(h + n - 2, ": ") == 0, "%s", h);
}

/* A datagram socket this test owns, as a syslog daemon's /dev/log. */
static int receiver(char *path, size_t cap)
{
    snprintf(path, cap, "/tmp/dbt-syslog-%ld.sock", (long)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "%s", strerror(errno));
    struct timeval tv = {5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

Test(log_syslog, lines_reach_the_socket_without_ts_host_or_pid_fields)
{
    char path[108], dest[120];
    int fd = receiver(path, sizeof path);
    snprintf(dest, sizeof dest, "syslog:%s", path);
    dbt_config c;
    dbt_config_defaults(&c);
    c.log_path = strdup(dest);
    c.log_level = DBT_LOG_INFO;
    c.log_facility = DBT_FACILITY_DAEMON;
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(&c, err), "%s", err);
    dbt_field f[] = {DBT_S("pool", "p q")};
    dbt_log(DBT_LOG_WARN, "grant", f, 1);
    char msg[9000];
    ssize_t n = recv(fd, msg, sizeof msg - 1, 0);
    cr_assert(n > 0, "%s", strerror(errno));
    msg[n] = '\0';
    cr_expect(strncmp(msg, "<28>", 4) == 0, "daemon.warning: %s", msg);
    char want[64];
    snprintf(want, sizeof want, "[%ld]: level=warn event=grant pool=\"p q\" tid=", (long)getpid());
    cr_expect(strstr(msg, want) != NULL, "%s", msg);
    cr_expect(strstr(msg, "ts=") == NULL && strstr(msg, "host=") == NULL &&
                  strstr(msg, " pid=") == NULL,
              "syslog's header has them: %s", msg);
    cr_expect(msg[n - 1] != '\n', "no newline in a syslog message");
    dbt_log_close();
    dbt_config_free(&c);
    close(fd);
    unlink(path);
}

Test(log_requested, written_at_any_level_but_off)
{
    char path[] = "/tmp/dbt-logreq-XXXXXX";
    close(mkstemp(path));
    dbt_config c;
    open_with(&c, path, DBT_LOG_ERROR);
    dbt_log_requested(DBT_LOG_INFO, "stats", NULL, 0);
    dbt_log(DBT_LOG_INFO, "trace", NULL, 0);
    dbt_log_close();
    dbt_config_free(&c);
    cr_expect(file_has(path, "level=info event=stats"));
    cr_expect(!file_has(path, "event=trace"));
    open_with(&c, path, DBT_LOG_OFF);
    dbt_log_requested(DBT_LOG_INFO, "stats_off", NULL, 0);
    dbt_log_close();
    dbt_config_free(&c);
    cr_expect(!file_has(path, "stats_off"));
    unlink(path);
}

Test(log_settings, facility_stats_and_syslog_destination)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    cr_expect_eq(c.log_facility, DBT_FACILITY_USER);
    cr_expect_eq(c.log_stats_ms, 0);
    cr_expect(dbt_config_set(&c, "DBTHROTTLE_LOG_FACILITY", "local5", DBT_SRC_ENV, err), "%s", err);
    cr_expect_eq(c.log_facility, DBT_FACILITY_LOCAL0 + 5);
    cr_expect(!dbt_config_set(&c, "log_facility", "kern", DBT_SRC_FILE, err));
    cr_expect(strstr(err, "DBTHROTTLE_LOG_FACILITY") != NULL, "%s", err);
    cr_expect(dbt_config_set(&c, "log_stats", "60s", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.log_stats_ms, 60000);
    cr_expect(dbt_config_set(&c, "log_stats", "off", DBT_SRC_FILE, err), "%s", err);
    cr_expect_eq(c.log_stats_ms, 0);
    cr_expect(!dbt_config_set(&c, "DBTHROTTLE_LOG_STATS", "500ms", DBT_SRC_ENV, err));
    cr_expect(strstr(err, "DBTHROTTLE_LOG_STATS") != NULL, "%s", err);
    cr_expect(dbt_config_set(&c, "log", "syslog", DBT_SRC_ENV, err), "%s", err);
    cr_expect(dbt_config_set(&c, "log", "syslog:/run/log.sock", DBT_SRC_ENV, err), "%s", err);
    cr_expect(!dbt_config_set(&c, "log", "syslog:relative", DBT_SRC_ENV, err));
    cr_expect(strstr(err, "DBTHROTTLE_LOG") != NULL, "%s", err);
    dbt_config_free(&c);
}
