/* The log's buffer and descriptors inside a host program: a long syslog line is cut to the line
 * buffer (it once overflowed it), a failed syslog reconnect keeps the dead socket's number (never
 * freed for the host to reuse while threads log), and the log stays off descriptors 0 to 2 (a host
 * that closed stderr gets 2 back for its own file). */
#include "config.h"
#include "log.h"

#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* emit()'s line buffer in log.c: LINE_MAX_BYTES + 160. */
#define LINE_BUFFER_BYTES (8192 + 160)

static int bound_datagram_socket(char *path, size_t cap, const char *tag)
{
    snprintf(path, cap, "/tmp/dbt-%s-%ld.sock", tag, (long)getpid());
    unlink(path);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", path);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof a), 0, "%s", strerror(errno));
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
}

static bool open_log(dbt_config *c, const char *dest, dbt_log_format fmt)
{
    dbt_config_defaults(c);
    c->log_path = strdup(dest);
    c->log_level = DBT_LOG_INFO;
    c->log_format = fmt;
    char err[DBT_ERRLEN];
    return dbt_log_open(c, err);
}

/* The descriptor (above 2) that /proc/self/fd shows as a link to target, or -1. */
static int fd_linked_to(const char *target)
{
    DIR *d = opendir("/proc/self/fd");
    int found = -1;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char link[300], to[300];
        snprintf(link, sizeof link, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(link, to, sizeof to - 1);
        if (n <= 0)
            continue;
        to[n] = '\0';
        if (strcmp(to, target) == 0 && atoi(e->d_name) != dirfd(d))
            found = atoi(e->d_name);
    }
    if (d)
        closedir(d);
    return found;
}

/* Three values of 1024 bytes (and more: each is cut to 1024) that JSON writes 6 bytes per byte,
 * "\u0001" or "\ufffd": over 18 KB of line for a buffer of 8 KB. */
Test(log_fds, a_long_json_syslog_line_is_cut_to_the_line_buffer, .timeout = 30)
{
    char path[108], dest[120];
    int rx = bound_datagram_socket(path, sizeof path, "syslog-long");
    snprintf(dest, sizeof dest, "syslog:%s", path);
    /* Logged in a child: an overrun of the stack buffer kills it (or not, without a stack
     * protector), and the datagram it sent shows how long the line was either way. */
    pid_t pid = fork();
    if (pid == 0) {
        static char v[3][1200];
        for (int i = 0; i < 3; i++)
            for (size_t j = 0; j + 1 < sizeof v[i]; j++)
                v[i][j] = (char)(j % 2 ? 0x01 : 0xff);
        dbt_config c;
        if (!open_log(&c, dest, DBT_FMT_JSON))
            _exit(3);
        dbt_field f[] = {DBT_S("a", v[0]), DBT_S("b", v[1]), DBT_S("c", v[2])};
        dbt_log(DBT_LOG_WARN, "long", f, 3);
        _exit(0);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    static char msg[1 << 16];
    /* A datagram the child sent is queued before it exits. */
    ssize_t n = recv(rx, msg, sizeof msg - 1, MSG_TRUNC | MSG_DONTWAIT);
    close(rx);
    unlink(path);
    cr_expect(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the logging process died (status %#x)", st);
    cr_assert(n > 0, "no datagram: %s", strerror(errno));
    cr_assert_leq(n, LINE_BUFFER_BYTES, "a line of %zd bytes from a buffer of %d", n,
                  LINE_BUFFER_BYTES);
    msg[n] = '\0';
    /* Cut whole fields at a time: a, whole, then tid; b and c left out; the JSON closed. */
    const char *body = strstr(msg, ": {");
    cr_assert(body, "no JSON body: %.200s", msg);
    cr_expect(strstr(body, "\"level\":\"warn\",\"event\":\"long\",\"a\":\"\\ufffd\\u0001") != NULL,
              "%.200s", body);
    cr_expect(strstr(body, "...\",\"tid\":") != NULL, "field a whole, then tid");
    cr_expect(strstr(body, "\"b\":") == NULL && strstr(body, "\"c\":") == NULL);
    cr_expect_eq(msg[n - 1], '}', "the line ends its object: ...%s", msg + n - 20);
}

static void sleep_ms(long ms)
{
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static bool same_file(int fd, const struct stat *was)
{
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_dev == was->st_dev && st.st_ino == was->st_ino;
}

Test(log_fds, a_failed_syslog_reconnect_keeps_the_socket_number, .timeout = 60)
{
    char path[108], dest[120];
    int rx = bound_datagram_socket(path, sizeof path, "syslog-gone");
    snprintf(dest, sizeof dest, "syslog:%s", path);
    /* The log's socket is the descriptor dbt_log_open adds. */
    int probe = dup(0);
    close(probe);
    dbt_config c;
    cr_assert(open_log(&c, dest, DBT_FMT_LOGFMT));
    dbt_log(DBT_LOG_WARN, "first", NULL, 0);
    char msg[9000];
    cr_assert_gt(recv(rx, msg, sizeof msg, 0), 0, "%s", strerror(errno));
    int log_fd = probe;
    struct stat log_sock;
    cr_assert_eq(fstat(log_fd, &log_sock), 0, "the log's socket is not fd %d", log_fd);
    cr_assert(S_ISSOCK(log_sock.st_mode), "fd %d is not the log's socket", log_fd);
    /* The daemon goes away for good: sends fail, and the reconnects (at most one a second) find
     * no socket at the path. Lines go to stderr meanwhile: kept out of the test's output. */
    close(rx);
    unlink(path);
    int saved_err = dup(2), devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 2);
    close(devnull);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    int pipe_fds[2] = {-1, -1};
    bool reused = false, kept = true;
    /* 3.5 seconds of lines see at least two reconnects fail. */
    for (;;) {
        dbt_log(DBT_LOG_WARN, "while_gone", NULL, 0);
        kept = kept && same_file(log_fd, &log_sock);
        if (pipe_fds[0] < 0) {
            cr_assert_eq(pipe(pipe_fds), 0);
        } else {
            /* The host opens descriptors of its own while lines are logged. */
            reused = reused || pipe_fds[0] == log_fd || pipe_fds[1] == log_fd;
            close(pipe_fds[0]);
            close(pipe_fds[1]);
            pipe_fds[0] = -1;
        }
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 > 3500)
            break;
        sleep_ms(5);
    }
    if (pipe_fds[0] >= 0) {
        close(pipe_fds[0]);
        close(pipe_fds[1]);
    }
    dup2(saved_err, 2);
    close(saved_err);
    cr_expect(kept, "fd %d is no longer the log's socket after a failed reconnect", log_fd);
    cr_expect(!reused, "the host got fd %d, the log's socket's number, while lines were logged",
              log_fd);
    dbt_log_close();
    dbt_config_free(&c);
}

/* A host program that runs with stderr closed and later opens a file of its own, which gets
 * descriptor 2 (as freopen(stderr) does): the log must not be on 2, nor write into that file. */
Test(log_fds, the_log_stays_above_2_when_the_host_closed_stderr, .timeout = 30)
{
    char log_path[] = "/tmp/dbt-logfd-log-XXXXXX", host_path[] = "/tmp/dbt-logfd-host-XXXXXX";
    close(mkstemp(log_path));
    close(mkstemp(host_path));
    /* In a child: the test's own stderr stays open. Exit codes say what went wrong. */
    pid_t pid = fork();
    if (pid == 0) {
        close(2);
        dbt_config c;
        if (!open_log(&c, log_path, DBT_FMT_LOGFMT))
            _exit(10);
        int log_fd = fd_linked_to(log_path);
        dbt_log(DBT_LOG_WARN, "before_host_open", NULL, 0);
        /* The host sets up its stderr: closes 2 (it thinks it may still have it) and opens. */
        close(2);
        int host_fd = open(host_path, O_WRONLY | O_APPEND);
        dbt_log(DBT_LOG_WARN, "after_host_open", NULL, 0);
        int rc = 0;
        if (log_fd <= 2)
            rc |= 1;
        if (host_fd != 2)
            rc |= 2;
        _exit(rc);
    }
    int st;
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st), "status %#x", st);
    int rc = WEXITSTATUS(st);
    cr_assert_neq(rc, 10, "the log file did not open");
    cr_expect(!(rc & 1), "the log's descriptor was 0, 1 or 2 with stderr closed");
    cr_expect(!(rc & 2), "the host's open did not get descriptor 2");
    struct stat hs;
    cr_assert_eq(stat(host_path, &hs), 0);
    cr_expect_eq(hs.st_size, 0, "log lines went into the host's file on fd 2");
    FILE *fp = fopen(log_path, "r");
    char text[4096] = "";
    size_t n = fread(text, 1, sizeof text - 1, fp);
    text[n] = '\0';
    fclose(fp);
    cr_expect(strstr(text, "event=before_host_open") && strstr(text, "event=after_host_open"),
              "the log file has both lines: %s", text);
    unlink(log_path);
    unlink(host_path);
}
