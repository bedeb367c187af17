/* log_syslog.c - the syslog side of the log (DBTHROTTLE_LOG=syslog): the socket and the header.
 *
 * Not syslog(3): openlog() sets the ident and facility of the whole process, so the host
 * program's own syslog lines would carry ours (or ours its), and its closelog() would close our
 * socket. This speaks the local protocol itself: one datagram per line, "<PRI>Mmm dd hh:mm:ss
 * ident[pid]: message", to /dev/log or the socket DBTHROTTLE_LOG=syslog:/path names (journald and
 * rsyslog read it there). */
#include "log_syslog.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int dbt_syslog_connect(const char *path, bool *stream)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) {
        errno = ENAMETOOLONG;
        return -1;
    }
    memcpy(addr.sun_path, path, strlen(path) + 1);
    /* A datagram socket, as every Debian syslog daemon offers; a stream socket where that is
     * what the path is (EPROTOTYPE), its messages ended by a NUL. */
    const int types[] = {SOCK_DGRAM, SOCK_STREAM};
    for (int i = 0; i < 2; i++) {
        int fd = socket(AF_UNIX, types[i] | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (const struct sockaddr *)&addr, sizeof addr) == 0) {
            *stream = types[i] == SOCK_STREAM;
            return fd;
        }
        int saved = errno;
        close(fd);
        errno = saved;
        if (saved != EPROTOTYPE)
            return -1;
    }
    return -1;
}

int dbt_syslog_priority(int facility_index, dbt_log_level level)
{
    /* user (1), daemon (3), local0..local7 (16..23), each shifted by 3 as syslog.h's LOG_* are. */
    int code = facility_index == DBT_FACILITY_USER     ? 1
               : facility_index == DBT_FACILITY_DAEMON ? 3
                                                       : 16 + facility_index - DBT_FACILITY_LOCAL0;
    /* err (3), warning (4), info (6), debug (7) */
    int severity = level == DBT_LOG_ERROR  ? 3
                   : level == DBT_LOG_WARN ? 4
                   : level == DBT_LOG_INFO ? 6
                                           : 7;
    return code * 8 + severity;
}

size_t dbt_syslog_header(char *buf, size_t cap, int priority, const char *ident, long pid)
{
    /* Local time, as syslog(3) writes it, with the month named in English whatever the host
     * program's locale (strftime would follow its LC_TIME). */
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    if (!localtime_r(&now, &tm))
        memset(&tm, 0, sizeof tm);
    int n = snprintf(buf, cap, "<%d>%s %2d %02d:%02d:%02d %s[%ld]: ", priority,
                     months[tm.tm_mon >= 0 && tm.tm_mon < 12 ? tm.tm_mon : 0], tm.tm_mday,
                     tm.tm_hour, tm.tm_min, tm.tm_sec, ident, pid);
    if (n < 0)
        return 0;
    return (size_t)n < cap ? (size_t)n : cap - 1;
}

bool dbt_syslog_send(int fd, bool stream, const char *msg, size_t len)
{
    /* Never waits: a syslog daemon that has stopped reading must not stall the host program's
     * thread (the caller writes the line to stderr instead). A stream's message ends with its
     * NUL, which msg[len] is. */
    size_t total = stream ? len + 1 : len;
    size_t off = 0;
    while (off < total) {
        ssize_t w = send(fd, msg + off, total - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return false;
        if (!stream)
            return (size_t)w == total;
        off += (size_t)w;
    }
    return true;
}
