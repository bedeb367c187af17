/* log.c - trace and error lines: one write() per line, logfmt or JSON, never on stdout.
 *
 * A line is built whole in a local buffer and written with a single write(2), so lines from
 * concurrent threads and processes sharing a file (O_APPEND) never interleave. Secrets never get
 * here: callers pass redacted values (see redact.c). */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
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

bool dbt_log_open(const dbt_config *cfg, char *err)
{
    bool ok = true;
    pthread_mutex_lock(&log_mu);
    int fd = 2;
    if (cfg->log_path && strcmp(cfg->log_path, "stderr") != 0) {
        fd = open(cfg->log_path, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd >= 0) {
            (void)fchmod(fd, 0600); /* created by us: 0600 whatever the umask */
        } else if (errno == EEXIST) {
            fd = open(cfg->log_path, O_WRONLY | O_APPEND | O_CLOEXEC);
        }
        if (fd < 0) {
            snprintf(err, DBT_ERRLEN, "DBTHROTTLE_LOG: cannot open %.300s: %s (logging to stderr)",
                     cfg->log_path, strerror(errno));
            fd = 2;
            ok = false;
        }
    }
    int old = atomic_exchange(&log_fd, fd);
    if (old != 2 && old != fd)
        close(old);
    atomic_store(&log_level, (int)cfg->log_level);
    atomic_store(&log_format, (int)cfg->log_format);
    pthread_mutex_unlock(&log_mu);
    return ok;
}

void dbt_log_close(void)
{
    pthread_mutex_lock(&log_mu);
    int old = atomic_exchange(&log_fd, 2);
    if (old != 2)
        close(old);
    atomic_store(&log_level, DBT_LOG_WARN);
    pthread_mutex_unlock(&log_mu);
}

bool dbt_log_enabled(dbt_log_level level)
{
    return level != DBT_LOG_OFF && (int)level <= atomic_load(&log_level);
}

/* A bounded writer into the line buffer; `full` says the last field did not fit. */
typedef struct {
    char *buf;
    size_t cap, len;
    bool full;
} out_t;

static void add(out_t *o, const char *s, size_t n)
{
    if (o->len + n > o->cap) {
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

static bool logfmt_needs_quotes(const char *v)
{
    if (!*v)
        return true;
    for (const unsigned char *p = (const unsigned char *)v; *p; p++)
        if (*p <= ' ' || *p == '=' || *p == '"' || *p == '\\' || *p == 0x7f)
            return true;
    return false;
}

static void logfmt_value(out_t *o, const char *v)
{
    size_t n = strlen(v);
    bool cut = n > VALUE_MAX_BYTES;
    if (cut)
        n = VALUE_MAX_BYTES;
    if (!cut && !logfmt_needs_quotes(v)) {
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
                add(o, (const char *)&v[i], 1);
            }
        }
    }
    if (cut)
        add(o, "...", 3);
    add(o, "\"", 1);
}

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid. */
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

static void json_string(out_t *o, const char *v)
{
    size_t n = strlen(v);
    bool cut = n > VALUE_MAX_BYTES;
    if (cut)
        n = VALUE_MAX_BYTES;
    add(o, "\"", 1);
    const unsigned char *p = (const unsigned char *)v;
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            add(o, "\\", 1);
            add(o, (const char *)&p[i], 1);
            i++;
        } else if (c == '\n') {
            add(o, "\\n", 2), i++;
        } else if (c == '\t') {
            add(o, "\\t", 2), i++;
        } else if (c == '\r') {
            add(o, "\\r", 2), i++;
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
                add(o, (const char *)&p[i], l);
                i += l;
            }
        }
    }
    if (cut)
        add(o, "...", 3);
    add(o, "\"", 1);
}

static void field(out_t *o, dbt_log_format fmt, const char *key, const dbt_field *f, const char *s)
{
    char num[40];
    const char *text = s;
    bool is_num = false;
    if (f && f->type == DBT_F_INT) {
        snprintf(num, sizeof num, "%lld", (long long)f->i);
        text = num, is_num = true;
    } else if (f && f->type == DBT_F_MS) {
        snprintf(num, sizeof num, "%.3f", f->ms);
        text = num, is_num = true;
    } else if (f) {
        text = f->s ? f->s : "";
    }
    /* A field that would not fit is left out whole, so the line stays well-formed. */
    size_t mark = o->len;
    o->full = false;
    if (fmt == DBT_FMT_JSON) {
        add(o, ",", 1);
        json_string(o, key);
        add(o, ":", 1);
        if (is_num)
            adds(o, text);
        else
            json_string(o, text);
    } else {
        add(o, " ", 1);
        adds(o, key);
        add(o, "=", 1);
        if (is_num)
            adds(o, text);
        else
            logfmt_value(o, text);
    }
    if (o->full)
        o->len = mark;
}

size_t dbt_log_format_line(char *buf, size_t cap, dbt_log_format fmt, const char *ts,
                           dbt_log_level level, const char *event, const dbt_field *fields,
                           size_t nfields)
{
    if (cap < 64) {
        if (cap)
            buf[0] = '\0';
        return 0;
    }
    /* Keep room for the closing "}\n" and the NUL whatever happens. */
    out_t o = {.buf = buf, .cap = cap - 3, .len = 0};
    if (fmt == DBT_FMT_JSON) {
        adds(&o, "{\"ts\":");
        json_string(&o, ts);
        field(&o, fmt, "level", NULL, dbt_log_level_name(level));
        field(&o, fmt, "event", NULL, event);
    } else {
        adds(&o, "ts=");
        adds(&o, ts);
        field(&o, fmt, "level", NULL, dbt_log_level_name(level));
        field(&o, fmt, "event", NULL, event);
    }
    for (size_t i = 0; i < nfields; i++)
        field(&o, fmt, fields[i].key, &fields[i], NULL);
    if (fmt == DBT_FMT_JSON)
        buf[o.len++] = '}';
    buf[o.len++] = '\n';
    buf[o.len] = '\0';
    return o.len;
}

void dbt_log(dbt_log_level level, const char *event, const dbt_field *fields, size_t nfields)
{
    if (!dbt_log_enabled(level))
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    struct tm tm;
    gmtime_r(&now.tv_sec, &tm);
    char ts[96];
    snprintf(ts, sizeof ts, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ", tm.tm_year + 1900,
             tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, now.tv_nsec / 1000);
    /* pid and tid end every line. */
    dbt_field all[40];
    size_t n = nfields < 38 ? nfields : 38;
    memcpy(all, fields, n * sizeof *fields);
    all[n++] = DBT_I("pid", getpid());
    all[n++] = DBT_I("tid", syscall(SYS_gettid));
    char line[LINE_MAX_BYTES];
    size_t len = dbt_log_format_line(line, sizeof line, (dbt_log_format)atomic_load(&log_format),
                                     ts, level, event, all, n);
    int fd = atomic_load(&log_fd);
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
