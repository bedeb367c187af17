/* log.c - trace and error lines: one write() per line, logfmt or JSON, never on stdout.
 *
 * A line is built whole in a local buffer and written with a single write(2), so lines from
 * concurrent threads and processes sharing a file (O_APPEND) never interleave. Secrets never get
 * here: callers pass redacted values (see redact.c).
 *
 * Rotation: an interposer may not take SIGHUP from the program it lives in (a handler would stop
 * SIG_DFL from ending it, or fight the program's own). So the writer notices it instead: at most
 * once a second a line's writer compares the path with the file it writes to, and reopens the
 * path when it names another file or none (logrotate renamed it). The dbthrottle command's
 * long-running subcommands call dbt_log_reopen() on their own SIGHUP. */
#include "log.h"
#include "log_syslog.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define LINE_MAX_BYTES  8192
#define VALUE_MAX_BYTES 1024
#define SYSLOG_DEFAULT  "/dev/log"

typedef enum { DEST_STDERR = 0, DEST_FILE = 1, DEST_SYSLOG = 2 } log_dest;

/* log_mu guards the destination's description (dest_path, file_dev/ino, syslog_stream) and every
 * change of log_fd. Writers never wait for it: they only try it, to reopen or reconnect. */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int log_fd = 2; /* the file, stderr, or the syslog socket (-1: not connected) */
static atomic_int log_level = DBT_LOG_WARN;
static atomic_int log_format = DBT_FMT_LOGFMT;
static atomic_int log_dest_kind = DEST_STDERR;
static atomic_int syslog_facility = DBT_FACILITY_USER;
static char dest_path[PATH_MAX];
static dev_t file_dev;
static ino_t file_ino;
static atomic_bool syslog_stream;
/* The second (CLOCK_MONOTONIC_COARSE) of the last look at the path, or at a syslog reconnect. */
static atomic_llong checked_s = -1;
/* Named on every line: the host, and the program the library lives in. */
static char host_name[256] = "?";
static char prog_name[64] = "?";

/* A fork while a thread holds log_mu (reopening) must not leave the child's copy locked. */
static void fork_prepare(void)
{
    pthread_mutex_lock(&log_mu);
}
static void fork_release(void)
{
    pthread_mutex_unlock(&log_mu);
}
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;
static void register_atfork(void)
{
    (void)pthread_atfork(fork_prepare, fork_release, fork_release);
}

/* Opens the log file: created 0600 whatever the umask; an existing file keeps its mode (its owner
 * chose it; logrotate's `create` sets it). Returns the fd, or -1 with errno set. */
static int open_log_file(const char *path)
{
    /* Two tries: the file may vanish between the O_EXCL attempt and the plain open. */
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            (void)fchmod(fd, 0600); /* created by us: the umask may have cleared nothing */
            return fd;
        }
        if (errno != EEXIST)
            return -1;
        fd = open(path, O_WRONLY | O_APPEND | O_CLOEXEC);
        if (fd >= 0 || errno != ENOENT)
            return fd;
    }
    return -1;
}

/* fd moved above 2 (a host program that closed stdin, stdout or stderr would otherwise find our
 * log on the number it reopens as one of them, and install_fd treats 2 as the program's), or -1
 * with fd closed. */
static int above_stdio(int fd)
{
    if (fd < 0 || fd > 2)
        return fd;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int saved = errno;
    close(fd);
    errno = saved;
    return moved;
}

/* Makes fd the log's descriptor. A descriptor replaced keeps its number (the new one is dup'ed
 * onto it), so a thread that loaded log_fd just before never writes into a closed, or worse
 * reused, descriptor. log_mu held. */
static void install_fd(int fd)
{
    int old = atomic_load(&log_fd);
    bool old_ours = old >= 0 && old != 2; /* stderr is the program's */
    if (old_ours && fd >= 0 && fd != 2 && dup3(fd, old, O_CLOEXEC) == old) {
        close(fd);
    } else {
        atomic_store(&log_fd, fd);
        if (old_ours)
            close(old);
    }
}

/* (Re)opens dest_path as the log file. log_mu held. False with errno set when it cannot. */
static bool reopen_file(void)
{
    int fd = above_stdio(open_log_file(dest_path));
    if (fd < 0)
        return false;
    struct stat st;
    if (fstat(fd, &st) == 0) {
        file_dev = st.st_dev;
        file_ino = st.st_ino;
    }
    install_fd(fd);
    return true;
}

/* (Re)connects to the syslog socket. log_mu held. False with errno set when it cannot: the old
 * socket, dead, stays installed (sends on it fail, so lines go to stderr until a reconnect is
 * dup'ed onto its number). Closing it would free its number while another thread may be about to
 * send on it, and the host program could get that number for a socket of its own. */
static bool reconnect_syslog(void)
{
    bool stream = false;
    int fd = above_stdio(dbt_syslog_connect(dest_path, &stream));
    int saved = errno;
    if (fd >= 0) {
        atomic_store(&syslog_stream, stream);
        install_fd(fd);
    }
    errno = saved;
    return fd >= 0;
}

/* Learned once, by the first to open the log or write a line (a program using the semaphore
 * without opening a log, as the tests do, still names itself). */
static pthread_once_t names_once = PTHREAD_ONCE_INIT;

/* The program's name as syslog and the lines give it: no blank, ':' or '[' (syslog's ident ends
 * at them). */
static void learn_names(void)
{
    char h[sizeof host_name];
    if (gethostname(h, sizeof h - 1) == 0 && h[0]) {
        h[sizeof h - 1] = '\0';
        snprintf(host_name, sizeof host_name, "%s", h);
    }
    const char *p = program_invocation_short_name;
    snprintf(prog_name, sizeof prog_name, "%s", p && *p ? p : "?");
    for (char *c = prog_name; *c; c++)
        if ((unsigned char)*c <= ' ' || *c == ':' || *c == '[' || *c == ']')
            *c = '_';
}

bool dbt_log_open(const dbt_config *cfg, char *err)
{
    pthread_once(&atfork_once, register_atfork);
    pthread_once(&names_once, learn_names);
    bool ok = true;
    pthread_mutex_lock(&log_mu);
    const char *path = cfg->log_path;
    log_dest dest = !path || strcmp(path, "stderr") == 0                              ? DEST_STDERR
                    : strcmp(path, "syslog") == 0 || strncmp(path, "syslog:", 7) == 0 ? DEST_SYSLOG
                                                                                      : DEST_FILE;
    if (dest == DEST_SYSLOG)
        path = path[6] == ':' ? path + 7 : SYSLOG_DEFAULT;
    snprintf(dest_path, sizeof dest_path, "%s", dest == DEST_STDERR ? "" : path);
    atomic_store(&syslog_facility, (int)cfg->log_facility);
    atomic_store(&checked_s, -1);
    char shown[256];
    dbt_escape(dest_path, 160, false, shown, sizeof shown);
    if (dest == DEST_FILE && !reopen_file()) {
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_LOG: cannot open %s: %s (logging to stderr)", shown,
                 strerror(errno));
        dest = DEST_STDERR;
        ok = false;
    } else if (dest == DEST_SYSLOG && !reconnect_syslog()) {
        /* Kept as the destination: the daemon may start later; lines go to stderr meanwhile. */
        snprintf(err, DBT_ERRLEN,
                 "DBTHROTTLE_LOG: cannot reach syslog at %s: %s (logging to stderr until it "
                 "answers)",
                 shown, strerror(errno));
        ok = false;
    }
    if (dest == DEST_STDERR)
        install_fd(2);
    atomic_store(&log_dest_kind, (int)dest);
    atomic_store(&log_level, (int)cfg->log_level);
    atomic_store(&log_format, (int)cfg->log_format);
    pthread_mutex_unlock(&log_mu);
    return ok;
}

bool dbt_log_reopen(char *err)
{
    bool ok = true;
    pthread_mutex_lock(&log_mu);
    int dest = atomic_load(&log_dest_kind);
    if ((dest == DEST_FILE && !reopen_file()) || (dest == DEST_SYSLOG && !reconnect_syslog())) {
        char shown[256];
        dbt_escape(dest_path, 160, false, shown, sizeof shown);
        snprintf(err, DBT_ERRLEN,
                 "DBTHROTTLE_LOG: cannot reopen %s: %s (still writing to the "
                 "file it had open)",
                 shown, strerror(errno));
        ok = false;
    }
    pthread_mutex_unlock(&log_mu);
    return ok;
}

/* Back to stderr at the default level. Call it when no other thread is logging (at exit, in
 * tests): a write racing with it could hit the closed descriptor. */
void dbt_log_close(void)
{
    pthread_mutex_lock(&log_mu);
    install_fd(2);
    atomic_store(&log_dest_kind, DEST_STDERR);
    atomic_store(&log_level, DBT_LOG_WARN);
    atomic_store(&log_format, DBT_FMT_LOGFMT);
    pthread_mutex_unlock(&log_mu);
}

bool dbt_log_enabled(dbt_log_level level)
{
    return level != DBT_LOG_OFF && (int)level <= atomic_load(&log_level);
}

/* A bounded writer into the line buffer; `full` says the current field did not fit. */
typedef struct {
    char *buf;
    size_t cap, len;
    bool full;
    bool first; /* no field written yet: JSON needs no comma before it */
} out_t;

static void add(out_t *o, const char *s, size_t n)
{
    if (o->full || o->len + n > o->cap) {
        o->full = true;
        return;
    }
    memcpy(o->buf + o->len, s, n);
    o->len += n;
}

static void adds(out_t *o, const char *s)
{
    add(o, s, strlen(s));
}

/* How much of a value to show: at most VALUE_MAX_BYTES, backed off to the start of a UTF-8
 * character so a cut never leaves half of one. */
static size_t shown_len(const char *v, bool *cut)
{
    size_t n = strlen(v);
    *cut = n > VALUE_MAX_BYTES;
    if (!*cut)
        return n;
    n = VALUE_MAX_BYTES;
    for (int back = 0; back < 3 && ((unsigned char)v[n] & 0xc0) == 0x80; back++)
        n--;
    return n;
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid (overlong forms,
 * surrogates and code points past U+10FFFF are invalid too). */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    size_t len;
    unsigned min;
    unsigned cp;
    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xe0) == 0xc0) {
        len = 2, min = 0x80, cp = p[0] & 0x1f;
    } else if ((p[0] & 0xf0) == 0xe0) {
        len = 3, min = 0x800, cp = p[0] & 0x0f;
    } else if ((p[0] & 0xf8) == 0xf0) {
        len = 4, min = 0x10000, cp = p[0] & 0x07;
    } else {
        return 0;
    }
    if (len > n)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (p[i] & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return len;
}

/* A C1 control (U+0080 to U+009F) at p, a sequence of l bytes: valid UTF-8, but a terminal
 * may act on one as on ESC (U+009B is CSI), so both formats escape it like a C0 control. */
static bool is_c1(const unsigned char *p, size_t l)
{
    return l == 2 && p[0] == 0xc2 && p[1] < 0xa0;
}

/* Whether a value must be quoted: it is empty, holds a byte that ends a bare value, or one that
 * is written escaped (a control, or a byte of no valid UTF-8 sequence). */
static bool logfmt_needs_quotes(const char *v, size_t n)
{
    if (n == 0)
        return true;
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f)
            return true;
        size_t l = utf8_len(p + i, n - i);
        if (l == 0 || is_c1(p + i, l))
            return true;
        i += l;
    }
    return false;
}

static void logfmt_value(out_t *o, const char *v)
{
    bool cut;
    size_t n = shown_len(v, &cut);
    if (!cut && !logfmt_needs_quotes(v, n)) {
        add(o, v, n);
        return;
    }
    add(o, "\"", 1);
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = p[i];
        char esc[8];
        if (c >= 0x80) {
            /* Where JSON writes U+FFFD for a byte of no valid UTF-8 sequence, logfmt writes the
             * byte as \xNN: the line stays valid UTF-8 and the value can be read back exactly
             * (a pool name ending in a cut character). A C1 control is escaped byte by byte. */
            size_t l = utf8_len(p + i, n - i);
            if (l == 0 || is_c1(p + i, l)) {
                for (size_t k = 0; k < (l ? l : 1); k++) {
                    snprintf(esc, sizeof esc, "\\x%02x", p[i + k]);
                    adds(o, esc);
                }
            } else {
                add(o, &v[i], l);
            }
            i += (l ? l : 1) - 1;
            continue;
        }
        switch (c) {
        case '"':
            add(o, "\\\"", 2);
            break;
        case '\\':
            add(o, "\\\\", 2);
            break;
        case '\n':
            add(o, "\\n", 2);
            break;
        case '\t':
            add(o, "\\t", 2);
            break;
        case '\r':
            add(o, "\\r", 2);
            break;
        default:
            if (c < 0x20 || c == 0x7f) {
                snprintf(esc, sizeof esc, "\\x%02x", c);
                adds(o, esc);
            } else {
                add(o, &v[i], 1);
            }
        }
    }
    if (cut)
        add(o, "...", 3);
    add(o, "\"", 1);
}

/* A logfmt key is a bare word: anything that would break the line's shape becomes '_'. Keys are
 * constants in our code, so this only guards against a mistake. */
static void logfmt_key(out_t *o, const char *k)
{
    if (!*k)
        k = "_";
    for (size_t i = 0; k[i] && i < 64; i++) {
        unsigned char c = (unsigned char)k[i];
        char ch = c <= ' ' || c == '=' || c == '"' || c == '\\' || c >= 0x7f ? '_' : (char)c;
        add(o, &ch, 1);
    }
}

/* An RFC 8259 string: control bytes (C0 and C1) as \u00XX, each invalid UTF-8 byte as U+FFFD. */
static void json_string(out_t *o, const char *v)
{
    bool cut;
    size_t n = shown_len(v, &cut);
    add(o, "\"", 1);
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            add(o, "\\", 1);
            add(o, &v[i], 1);
            i++;
        } else if (c == '\n' || c == '\t' || c == '\r') {
            add(o, c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r", 2);
            i++;
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\u%04x", c);
            adds(o, esc);
            i++;
        } else {
            size_t l = utf8_len(p + i, n - i);
            if (l == 0) {
                add(o, "\\ufffd", 6);
                i++;
            } else if (is_c1(p + i, l)) {
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)(p[i + 1]));
                adds(o, esc);
                i += l;
            } else {
                add(o, &v[i], l);
                i += l;
            }
        }
    }
    if (cut)
        add(o, "...", 3);
    add(o, "\"", 1);
}

/* A number's text; false when it has none (NaN, infinity), which JSON writes as null. */
static bool number_text(const dbt_field *f, char *num, size_t cap)
{
    if (f->type == DBT_F_INT) {
        snprintf(num, cap, "%lld", (long long)f->i);
        return true;
    }
    if (isnan(f->ms) || isinf(f->ms)) {
        snprintf(num, cap, "%s", isnan(f->ms) ? "nan" : f->ms > 0 ? "inf" : "-inf");
        return false;
    }
    /* %.3f of a huge value would be hundreds of digits: exponent form past 1e15 ms (31,000
     * years), which is still a JSON number. */
    if (f->ms >= 1e15 || f->ms <= -1e15)
        snprintf(num, cap, "%.3e", f->ms);
    else
        snprintf(num, cap, "%.3f", f->ms);
    return true;
}

/* Adds one field whole, or not at all, so a cut line stays well-formed. f is NULL for the
 * string fields every line starts with (ts, level, event); s is their value. */
static void field(out_t *o, dbt_log_format fmt, const char *key, const dbt_field *f, const char *s)
{
    char num[64];
    bool is_num = f && f->type != DBT_F_STR;
    bool finite = is_num && number_text(f, num, sizeof num);
    const char *text = is_num ? num : f ? f->s : s;
    if (!text)
        text = "";
    if (!key)
        key = "";
    size_t mark = o->len;
    o->full = false;
    if (fmt == DBT_FMT_JSON) {
        if (!o->first)
            add(o, ",", 1);
        json_string(o, key);
        add(o, ":", 1);
        if (is_num)
            adds(o, finite ? num : "null");
        else
            json_string(o, text);
    } else {
        if (!o->first)
            add(o, " ", 1);
        logfmt_key(o, key);
        add(o, "=", 1);
        if (is_num)
            adds(o, num);
        else
            logfmt_value(o, text);
    }
    if (o->full)
        o->len = mark;
    else
        o->first = false;
}

void dbt_escape(const char *text, size_t max, bool quoted, char *out, size_t cap)
{
    if (cap == 0)
        return;
    size_t o = 0;
    /* Each input byte takes at most 4 output bytes; keep room for "...", the quote and NUL. */
    if (cap < 16) {
        out[0] = '\0';
        return;
    }
    size_t room = cap - 9;
    if (quoted)
        out[o++] = '"';
    for (size_t i = 0; text[i]; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i >= max || o + 4 > room) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '\n' || c == '\t' || c == '\r') {
            out[o++] = '\\';
            out[o++] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else if (quoted && (c == '"' || c == '\\')) {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else {
            out[o++] = (char)c;
        }
    }
    if (quoted)
        out[o++] = '"';
    out[o] = '\0';
}

const char *const dbt_log_level_words[DBT_LOG_DEBUG + 1] = {"off", "error", "warn", "info",
                                                            "debug"};

const char *dbt_log_level_name(dbt_log_level l)
{
    return (unsigned)l < sizeof dbt_log_level_words / sizeof *dbt_log_level_words
               ? dbt_log_level_words[l]
               : "?";
}

size_t dbt_log_format_line(char *buf, size_t cap, dbt_log_format fmt, const char *ts,
                           dbt_log_level level, const char *event, const dbt_field *fields,
                           size_t nfields)
{
    if (cap < 4) {
        if (cap)
            buf[0] = '\0';
        return 0;
    }
    bool json = fmt == DBT_FMT_JSON;
    /* Keep room for the closing "}\n" (or "\n") and the NUL whatever happens. */
    out_t o = {.buf = buf, .cap = cap - (json ? 3 : 2), .len = 0, .first = true};
    if (json)
        add(&o, "{", 1);
    if (ts) /* none in syslog's lines: its header has the time */
        field(&o, fmt, "ts", NULL, ts);
    field(&o, fmt, "level", NULL, dbt_log_level_name(level));
    field(&o, fmt, "event", NULL, event);
    for (size_t i = 0; i < nfields; i++)
        field(&o, fmt, fields[i].key, &fields[i], NULL);
    if (json)
        buf[o.len++] = '}';
    buf[o.len++] = '\n';
    buf[o.len] = '\0';
    return o.len;
}

/* 2026-11-22T11:39:45.123456Z: UTC with microseconds. */
static void timestamp(char *ts, size_t cap)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    snprintf(ts, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900, tm.tm_mon + 1,
             tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000);
}

#define MAX_FIELDS 40

static int64_t coarse_seconds(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    return (int64_t)now.tv_sec;
}

/* True for the one caller per second that gets to look (at the path, or at syslog again). */
static bool my_turn_this_second(void)
{
    long long now = coarse_seconds();
    long long last = atomic_load(&checked_s);
    return now != last && atomic_compare_exchange_strong(&checked_s, &last, now);
}

/* The file was renamed or removed under us (logrotate): the path is opened again, so lines land
 * in the file the path names now. Checked at most once a second, by one writer, which skips it if
 * someone else is changing the destination. */
static void follow_rotation(void)
{
    if (!my_turn_this_second() || pthread_mutex_trylock(&log_mu) != 0)
        return;
    struct stat st;
    if (atomic_load(&log_dest_kind) == DEST_FILE &&
        (stat(dest_path, &st) != 0 ? errno == ENOENT
                                   : st.st_dev != file_dev || st.st_ino != file_ino))
        (void)
            reopen_file(); /* if it cannot, the old file gets the lines: tried again next second */
    pthread_mutex_unlock(&log_mu);
}

static void write_all(int fd, const char *line, size_t len)
{
    /* Errors other than EINTR are ignored: logging must never disturb the program. */
    size_t off = 0;
    while (off < len) {
        ssize_t w = write(fd, line + off, len - off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        off += (size_t)w;
    }
}

/* One line to syslog; false when it did not go (the caller writes it to stderr). A daemon that
 * restarted refuses the old connection: it is made again, at most once a second. */
static bool to_syslog(char *msg, size_t cap, dbt_log_level level, const char *event,
                      const dbt_field *fields, size_t n)
{
    size_t h =
        dbt_syslog_header(msg, cap, dbt_syslog_priority(atomic_load(&syslog_facility), level),
                          prog_name, (long)getpid());
    size_t len = h + dbt_log_format_line(msg + h, cap - h, (dbt_log_format)atomic_load(&log_format),
                                         NULL, level, event, fields, n);
    if (len > h && msg[len - 1] == '\n')
        msg[--len] = '\0'; /* a syslog message carries no newline */
    for (int attempt = 0; attempt < 2; attempt++) {
        int fd = atomic_load(&log_fd);
        if (fd >= 0 && dbt_syslog_send(fd, atomic_load(&syslog_stream), msg, len))
            return true;
        /* Not reading (EAGAIN: its queue is full) is no reason to reconnect. */
        bool busy = fd >= 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
        if (attempt > 0 || busy || !my_turn_this_second() || pthread_mutex_trylock(&log_mu) != 0)
            break;
        bool again = reconnect_syslog();
        pthread_mutex_unlock(&log_mu);
        if (!again)
            break;
    }
    return false;
}

static void emit(dbt_log_level level, const char *event, const dbt_field *fields, size_t nfields)
{
    /* host, program, pid and tid end every line (syslog's header has all but tid). */
    dbt_field all[MAX_FIELDS];
    size_t n = nfields < MAX_FIELDS - 4 ? nfields : MAX_FIELDS - 4;
    if (n)
        memcpy(all, fields, n * sizeof *fields);
    long tid = syscall(SYS_gettid);
    pthread_once(&names_once, learn_names);
    int dest = atomic_load(&log_dest_kind);
    /* One buffer for either form: a host program's thread may have a small stack. */
    char line[LINE_MAX_BYTES + 160];
    if (dest == DEST_SYSLOG) {
        all[n++] = DBT_I("tid", tid);
        if (to_syslog(line, sizeof line, level, event, all, n))
            return;
        n--;
    }
    all[n++] = DBT_S("host", host_name);
    all[n++] = DBT_S("prog", prog_name);
    all[n++] = DBT_I("pid", getpid());
    all[n++] = DBT_I("tid", tid);
    char ts[96];
    timestamp(ts, sizeof ts);
    size_t len = dbt_log_format_line(line, LINE_MAX_BYTES, (dbt_log_format)atomic_load(&log_format),
                                     ts, level, event, all, n);
    if (dest == DEST_FILE)
        follow_rotation();
    /* One write(2) per line: with O_APPEND, lines from threads and processes never interleave. */
    write_all(dest == DEST_SYSLOG ? 2 : atomic_load(&log_fd), line, len);
}

void dbt_log(dbt_log_level level, const char *event, const dbt_field *fields, size_t nfields)
{
    if (dbt_log_enabled(level))
        emit(level, event, fields, nfields);
}

void dbt_log_at_own_level(dbt_log_level level, const char *event, const dbt_field *fields,
                          size_t nfields)
{
    if (level != DBT_LOG_OFF)
        emit(level, event, fields, nfields);
}

void dbt_log_requested(dbt_log_level level, const char *event, const dbt_field *fields,
                       size_t nfields)
{
    if (atomic_load(&log_level) != DBT_LOG_OFF)
        emit(level, event, fields, nfields);
}
