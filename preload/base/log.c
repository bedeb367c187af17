/* log.c - trace and error lines: one write() per line, logfmt or JSON, never on stdout.
 *
 * A line is built whole in a local buffer and written with a single write(2), so lines from
 * concurrent threads and processes sharing a file (O_APPEND) never interleave. Secrets never get
 * here: callers pass redacted values (see redact.c). */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
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

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int log_fd = 2;
static atomic_int log_level = DBT_LOG_WARN;
static atomic_int log_format = DBT_FMT_LOGFMT;

/* Opens the log file: created 0600 whatever the umask; an existing file keeps its mode (its owner
 * chose it). Returns the fd, or -1 with errno set. */
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

bool dbt_log_open(const dbt_config *cfg, char *err)
{
    bool ok = true;
    pthread_mutex_lock(&log_mu);
    int fd = 2;
    if (cfg->log_path && strcmp(cfg->log_path, "stderr") != 0) {
        fd = open_log_file(cfg->log_path);
        if (fd < 0) {
            char shown[256];
            dbt_escape(cfg->log_path, 160, false, shown, sizeof shown);
            snprintf(err, DBT_ERRLEN, "DBTHROTTLE_LOG: cannot open %s: %s (logging to stderr)",
                     shown, strerror(errno));
            fd = 2;
            ok = false;
        }
    }
    int old = atomic_load(&log_fd);
    if (old != 2 && fd != 2 && dup3(fd, old, O_CLOEXEC) == old) {
        /* Re-opened: the new file takes the old descriptor's number, so a thread that loaded
         * log_fd just before never writes into a closed, or worse reused, descriptor. */
        close(fd);
    } else {
        atomic_store(&log_fd, fd);
        if (old != 2)
            close(old);
    }
    atomic_store(&log_level, (int)cfg->log_level);
    atomic_store(&log_format, (int)cfg->log_format);
    pthread_mutex_unlock(&log_mu);
    return ok;
}

/* Back to stderr at the default level. Call it when no other thread is logging (at exit, in
 * tests): a write racing with it could hit the closed descriptor. */
void dbt_log_close(void)
{
    pthread_mutex_lock(&log_mu);
    int old = atomic_exchange(&log_fd, 2);
    if (old != 2)
        close(old);
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

static bool logfmt_needs_quotes(const char *v, size_t n)
{
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        if (c <= ' ' || c == '=' || c == '"' || c == '\\' || c == 0x7f)
            return true;
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
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)v[i];
        char esc[8];
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

/* An RFC 8259 string: control bytes as \u00XX, each invalid UTF-8 byte as U+FFFD. */
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

void dbt_log(dbt_log_level level, const char *event, const dbt_field *fields, size_t nfields)
{
    if (!dbt_log_enabled(level))
        return;
    char ts[96];
    timestamp(ts, sizeof ts);
    /* pid and tid end every line. */
    dbt_field all[MAX_FIELDS];
    size_t n = nfields < MAX_FIELDS - 2 ? nfields : MAX_FIELDS - 2;
    if (n)
        memcpy(all, fields, n * sizeof *fields);
    all[n++] = DBT_I("pid", getpid());
    all[n++] = DBT_I("tid", syscall(SYS_gettid));
    char line[LINE_MAX_BYTES];
    size_t len = dbt_log_format_line(line, sizeof line, (dbt_log_format)atomic_load(&log_format),
                                     ts, level, event, all, n);
    int fd = atomic_load(&log_fd);
    /* One write(2) per line: with O_APPEND, lines from threads and processes never interleave.
     * Errors other than EINTR are ignored: logging must never disturb the program. */
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
