/* config.c - the settings: defaults, the configuration file, the environment, and where each
 * value came from. Reads the file named by DBTHROTTLE_CONFIG; prints nothing (callers log). */
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

enum {
    K_REDIS_URL,
    K_MAX_QUERIES,
    K_MAX_CONNECTIONS,
    K_POOL,
    K_WAIT_TIMEOUT,
    K_LEASE,
    K_REDIS_TIMEOUT,
    K_ON_REDIS_ERROR,
    K_LOG,
    K_LOG_LEVEL,
    K_LOG_FORMAT,
    K_LOG_QUERY,
    K_KEY_PREFIX,
    K_DISABLE,
    K_EXEMPT,
    K_IDLE_IN_TX_WARN,
    K_CACHE_PERMITS,
    K_CACHE_IDLE,
    K_LOCAL_HANDOVER,
    K_CONFIG,
    NKEYS
};

static const char *const env_names[NKEYS] = {"DBTHROTTLE_REDIS_URL",
                                             "DBTHROTTLE_MAX_QUERIES",
                                             "DBTHROTTLE_MAX_CONNECTIONS",
                                             "DBTHROTTLE_POOL",
                                             "DBTHROTTLE_WAIT_TIMEOUT",
                                             "DBTHROTTLE_LEASE",
                                             "DBTHROTTLE_REDIS_TIMEOUT",
                                             "DBTHROTTLE_ON_REDIS_ERROR",
                                             "DBTHROTTLE_LOG",
                                             "DBTHROTTLE_LOG_LEVEL",
                                             "DBTHROTTLE_LOG_FORMAT",
                                             "DBTHROTTLE_LOG_QUERY",
                                             "DBTHROTTLE_KEY_PREFIX",
                                             "DBTHROTTLE_DISABLE",
                                             "DBTHROTTLE_EXEMPT",
                                             "DBTHROTTLE_IDLE_IN_TX_WARN",
                                             "DBTHROTTLE_CACHE_PERMITS",
                                             "DBTHROTTLE_CACHE_IDLE",
                                             "DBTHROTTLE_LOCAL_HANDOVER",
                                             "DBTHROTTLE_CONFIG"};

_Static_assert(NKEYS <= sizeof((dbt_config *)0)->sources / sizeof(dbt_source),
               "dbt_config.sources has room for every setting");

#define PREFIX_LEN 11 /* strlen("DBTHROTTLE_") */

const char *dbt_log_level_name(dbt_log_level l)
{
    static const char *const names[] = {"off", "error", "warn", "info", "debug"};
    return (unsigned)l < 5 ? names[l] : "?";
}

static char *redacted_url(const char *url)
{
    /* Masking can only add bytes where a lone user becomes "***": +3 covers it. */
    size_t cap = strlen(url) + 4;
    char *buf = malloc(cap);
    if (buf)
        dbt_redact_url(url, buf, cap);
    return buf;
}

void dbt_config_defaults(dbt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    char err[DBT_ERRLEN];
    (void)dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", "redis://127.0.0.1:6379", &cfg->redis, err);
    cfg->redis_url_redacted = strdup("redis://127.0.0.1:6379");
    cfg->wait_timeout_ms = 120000;
    cfg->lease_ms = 10000;
    cfg->redis_timeout_ms = 1000;
    cfg->on_redis_error = DBT_ON_ERROR_OPEN;
    cfg->log_level = DBT_LOG_WARN;
    cfg->log_format = DBT_FMT_LOGFMT;
    cfg->key_prefix = strdup("dbthrottle:");
    cfg->idle_in_tx_warn_ms = 10000;
    cfg->cache_permits = DBT_CACHE_PERMITS_DEFAULT;
    cfg->cache_idle_ms = 50;
    cfg->local_handover = true;
}

void dbt_config_free(dbt_config *cfg)
{
    dbt_redis_url_free(&cfg->redis);
    free(cfg->redis_url_redacted);
    free(cfg->pool);
    free(cfg->log_path);
    free(cfg->key_prefix);
    free(cfg->config_file);
    dbt_exempt_free(cfg->exempt, cfg->nexempt);
    memset(cfg, 0, sizeof *cfg);
}

/* Which setting a key names: the environment form, or the short form in any case. */
static int key_index(const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(key, env_names[i]) == 0 || strcasecmp(key, env_names[i] + PREFIX_LEN) == 0)
            return i;
    return -1;
}

/* Levenshtein distance, for "did you mean". Names are short, so a small table will do. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = d[i - 1][j - 1] +
                         (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static bool unknown_key(const char *key, char *err)
{
    bool env_form = strncmp(key, "DBTHROTTLE_", PREFIX_LEN) == 0;
    size_t best = 99;
    int which = -1;
    for (int i = 0; i < NKEYS; i++) {
        size_t d =
            env_form ? distance(key, env_names[i]) : distance(key, env_names[i] + PREFIX_LEN);
        if (d < best) {
            best = d;
            which = i;
        }
    }
    char shown[300];
    dbt_escape(key, 64, false, shown, sizeof shown);
    if (which >= 0 && best <= 3) {
        char lower[40];
        const char *suggest = env_names[which];
        if (!env_form) {
            size_t n = 0;
            for (const char *p = env_names[which] + PREFIX_LEN; *p && n < sizeof lower - 1; p++)
                lower[n++] = (char)tolower((unsigned char)*p);
            lower[n] = '\0';
            suggest = lower;
        }
        snprintf(err, DBT_ERRLEN, "unknown setting %s (did you mean %s?)", shown, suggest);
    } else {
        snprintf(err, DBT_ERRLEN, "unknown setting %s", shown);
    }
    return false;
}

static bool set_string(char **field, const char *value)
{
    char *copy = strdup(value);
    if (!copy)
        return false;
    free(*field);
    *field = copy;
    return true;
}

static bool one_of(const char *setting, const char *value, const char *const *names, int n,
                   int *out, const char *expected, char *err)
{
    for (int i = 0; i < n; i++)
        if (strcasecmp(value, names[i]) == 0) {
            *out = i;
            return true;
        }
    char why[128];
    snprintf(why, sizeof why, "expected %s", expected);
    return dbt_bad_value(setting, value, why, err);
}

/* A duration within [min_ms, max_ms]; `range` says it in words for the message. */
static bool duration_in(const char *setting, const char *value, int64_t min_ms, int64_t max_ms,
                        const char *range, int64_t *out, char *err)
{
    int64_t ms;
    if (!dbt_parse_duration(setting, value, false, false, &ms, err))
        return false;
    if (ms < min_ms || ms > max_ms)
        return dbt_bad_value(setting, value, range, err);
    *out = ms;
    return true;
}

static bool set_value(dbt_config *cfg, int k, const char *value, char *err)
{
    const char *name = env_names[k];
    int n = 0;
    /* An empty value is a mistake more often than a wish for the default: say so. */
    if (!value[0])
        return dbt_bad_value(name, value, "empty: give a value or remove the setting", err);
    switch (k) {
    case K_REDIS_URL:
        if (!dbt_parse_redis_url(name, value, &cfg->redis, err))
            return false;
        free(cfg->redis_url_redacted);
        cfg->redis_url_redacted = redacted_url(value);
        return true;
    case K_MAX_QUERIES:
        return dbt_parse_limit(name, value, &cfg->max_queries, err);
    case K_MAX_CONNECTIONS:
        return dbt_parse_limit(name, value, &cfg->max_connections, err);
    case K_POOL:
        if (strlen(value) > 65536)
            return dbt_bad_value(name, value, "longer than 65536 bytes", err);
        return set_string(&cfg->pool, value);
    case K_WAIT_TIMEOUT:
        return dbt_parse_duration(name, value, true, true, &cfg->wait_timeout_ms, err);
    case K_LEASE:
        return duration_in(name, value, 200, 3600000, "must be from 200ms to 1h", &cfg->lease_ms,
                           err);
    case K_REDIS_TIMEOUT:
        return duration_in(name, value, 10, 60000, "must be from 10ms to 1m",
                           &cfg->redis_timeout_ms, err);
    case K_ON_REDIS_ERROR: {
        static const char *const modes[] = {"open", "closed"};
        if (!one_of(name, value, modes, 2, &n, "open or closed", err))
            return false;
        cfg->on_redis_error = (dbt_on_error)n;
        return true;
    }
    case K_LOG:
        if (strcmp(value, "stderr") == 0) {
            free(cfg->log_path);
            cfg->log_path = NULL;
            return true;
        }
        return set_string(&cfg->log_path, value);
    case K_LOG_LEVEL: {
        static const char *const levels[] = {"off", "error", "warn", "info", "debug"};
        if (!one_of(name, value, levels, 5, &n, "off, error, warn, info or debug", err))
            return false;
        cfg->log_level = (dbt_log_level)n;
        return true;
    }
    case K_LOG_FORMAT: {
        static const char *const formats[] = {"logfmt", "json"};
        if (!one_of(name, value, formats, 2, &n, "logfmt or json", err))
            return false;
        cfg->log_format = (dbt_log_format)n;
        return true;
    }
    case K_LOG_QUERY:
        return dbt_parse_bool(name, value, &cfg->log_query, err);
    case K_KEY_PREFIX:
        if (strlen(value) > 256)
            return dbt_bad_value(name, value, "longer than 256 bytes", err);
        return set_string(&cfg->key_prefix, value);
    case K_DISABLE:
        return dbt_parse_bool(name, value, &cfg->disable, err);
    case K_EXEMPT:
        return dbt_parse_exempt(name, value, cfg->exempt, &cfg->nexempt, err);
    case K_IDLE_IN_TX_WARN:
        return dbt_parse_duration(name, value, false, true, &cfg->idle_in_tx_warn_ms, err);
    case K_CACHE_PERMITS:
        return dbt_parse_bool(name, value, &cfg->cache_permits, err);
    case K_CACHE_IDLE:
        return duration_in(name, value, 1, 60000, "must be from 1ms to 1m", &cfg->cache_idle_ms,
                           err);
    case K_LOCAL_HANDOVER:
        return dbt_parse_bool(name, value, &cfg->local_handover, err);
    case K_CONFIG:
        return set_string(&cfg->config_file, value);
    }
    return false;
}

bool dbt_config_set(dbt_config *cfg, const char *key, const char *value, dbt_source src, char *err)
{
    int k = key_index(key);
    if (k < 0)
        return unknown_key(key, err);
    if (k == K_CONFIG && src == DBT_SRC_FILE) {
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG cannot be set inside a config file");
        return false;
    }
    if (!set_value(cfg, k, value, err))
        return false;
    cfg->sources[k] = src;
    return true;
}

dbt_source dbt_config_source(const dbt_config *cfg, const char *short_name)
{
    int k = key_index(short_name);
    return k < 0 ? DBT_SRC_DEFAULT : cfg->sources[k];
}

/* Trims blanks at both ends, in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* Reads a value: "quoted" (with \" and \\) or bare up to a " #" comment. */
static bool file_value(char *v, char **out, const char **why)
{
    v = trim(v);
    if (*v == '"') {
        char *o = v, *p = v + 1;
        for (; *p && *p != '"'; p++) {
            if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            *o++ = *p;
        }
        if (*p != '"') {
            *why = "unterminated quote";
            return false;
        }
        char *rest = trim(p + 1);
        if (*rest && *rest != '#') {
            *why = "text after the closing quote";
            return false;
        }
        *o = '\0';
        *out = v;
        return true;
    }
    /* v[-1] is the blank or the (cut) '=' before the value: "pool=#1" keeps its '#'. */
    for (char *p = v; *p; p++)
        if (*p == '#' && (p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            break;
        }
    *out = trim(v);
    return true;
}

bool dbt_config_parse_text(dbt_config *cfg, const char *name, const char *text, char *err)
{
    /* The file name comes from the environment: escaped, so the message stays one line. */
    char shown[256];
    dbt_escape(name, 160, false, shown, sizeof shown);
    char *copy = strdup(text);
    if (!copy) {
        snprintf(err, DBT_ERRLEN, "%s: out of memory", shown);
        return false;
    }
    bool seen[NKEYS] = {false};
    bool ok = true;
    int lineno = 0;
    char *next = copy;
    /* Editors on some systems start a UTF-8 file with a byte order mark: not part of a key. */
    if (strncmp(next, "\xef\xbb\xbf", 3) == 0)
        next += 3;
    /* strtok_r would skip empty lines and so miscount them: walk the lines by hand. */
    for (char *line = next; line && ok; line = next) {
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        lineno++;
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        const char *why = NULL;
        char msg[DBT_ERRLEN];
        if (!eq) {
            why = "expected key = value";
        } else {
            *eq = '\0';
            char *key = trim(l), *value = NULL;
            if (!*key) {
                why = "missing key before =";
            } else if (file_value(eq + 1, &value, &why)) {
                int k = key_index(key);
                if (k >= 0 && seen[k]) {
                    char key_shown[128];
                    dbt_escape(key, 64, false, key_shown, sizeof key_shown);
                    snprintf(msg, sizeof msg, "%s is set twice", key_shown);
                    why = msg;
                } else if (!dbt_config_set(cfg, key, value, DBT_SRC_FILE, msg)) {
                    why = msg;
                } else if (k >= 0) {
                    seen[k] = true;
                }
            }
        }
        if (why) {
            /* Bounded parts: the name, line number and reason always fit in DBT_ERRLEN. */
            snprintf(err, DBT_ERRLEN, "%.170s:%d: %.320s", shown, lineno, why);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

#define MAX_FILE_BYTES (1 << 20)

static bool read_file(const char *path, char **out, char *err)
{
    char shown[256];
    dbt_escape(path, 160, false, shown, sizeof shown);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG: cannot read %s: %s", shown, strerror(errno));
        return false;
    }
    /* Read one byte more than allowed to tell "exactly 1 MiB" from "larger". */
    char *buf = malloc(MAX_FILE_BYTES + 1);
    size_t n = 0;
    int read_errno = 0;
    if (buf) {
        n = fread(buf, 1, MAX_FILE_BYTES + 1, f);
        if (ferror(f))
            read_errno = errno ? errno : EIO; /* a directory gives EISDIR here */
    }
    fclose(f);
    const char *why = !buf                   ? "out of memory"
                      : read_errno           ? strerror(read_errno)
                      : n > MAX_FILE_BYTES   ? "larger than 1 MiB"
                      : memchr(buf, '\0', n) ? "contains a NUL byte"
                                             : NULL;
    if (why) {
        free(buf);
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG: cannot read %s: %s", shown, why);
        return false;
    }
    buf[n] = '\0';
    *out = buf;
    return true;
}

/* The DBTHROTTLE_CONFIG entry of envp (the last one, as getenv-style overrides go), or NULL. */
static const char *config_file_of(char *const *envp)
{
    static const char var[] = "DBTHROTTLE_CONFIG=";
    const char *file = NULL;
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, var, sizeof var - 1) == 0)
            file = *e + sizeof var - 1;
    return file;
}

bool dbt_config_load(dbt_config *cfg, char *const *envp, char *err)
{
    dbt_config_defaults(cfg);
    const char *file = config_file_of(envp);
    if (file) {
        /* Recorded first, so a caller reporting a file error can name the file. */
        if (!dbt_config_set(cfg, "DBTHROTTLE_CONFIG", file, DBT_SRC_ENV, err))
            return false;
        char *text = NULL;
        if (!read_file(file, &text, err))
            return false;
        bool ok = dbt_config_parse_text(cfg, file, text, err);
        free(text);
        if (!ok)
            return false;
    }
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "DBTHROTTLE_", PREFIX_LEN) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char key[128];
        size_t klen = (size_t)(eq - *e);
        if (klen >= sizeof key)
            klen = sizeof key - 1;
        memcpy(key, *e, klen);
        key[klen] = '\0';
        if (!dbt_config_set(cfg, key, eq + 1, DBT_SRC_ENV, err))
            return false;
    }
    return true;
}

/* ---- the effective settings, for dbthrottle check ------------------------------------------ */

int dbt_config_nsettings(void)
{
    return NKEYS;
}

const char *dbt_config_setting_name(int i)
{
    return i >= 0 && i < NKEYS ? env_names[i] : NULL;
}

dbt_source dbt_config_source_at(const dbt_config *cfg, int i)
{
    return i >= 0 && i < NKEYS ? cfg->sources[i] : DBT_SRC_DEFAULT;
}

const char *dbt_source_name(dbt_source s)
{
    return s == DBT_SRC_FILE ? "file" : s == DBT_SRC_ENV ? "environment" : "default";
}

/* A duration as the parsers accept it back: "infinite", "2m", "1500ms". */
static void duration_text(int64_t ms, char *out, size_t cap)
{
    if (ms == DBT_FOREVER)
        snprintf(out, cap, "infinite");
    else if (ms > 0 && ms % 3600000 == 0)
        snprintf(out, cap, "%" PRId64 "h", ms / 3600000);
    else if (ms > 0 && ms % 60000 == 0)
        snprintf(out, cap, "%" PRId64 "m", ms / 60000);
    else if (ms > 0 && ms % 1000 == 0)
        snprintf(out, cap, "%" PRId64 "s", ms / 1000);
    else
        snprintf(out, cap, "%" PRId64 "ms", ms);
}

void dbt_config_value_text(const dbt_config *cfg, int i, char *out, size_t cap)
{
    static const char *const exempt_fields[] = {"application_name", "user", "database"};
    static const char *const on_off[] = {"off", "on"};
    out[0] = '\0';
    switch (i) {
    case K_REDIS_URL: /* never the password */
        snprintf(out, cap, "%s", cfg->redis_url_redacted ? cfg->redis_url_redacted : "");
        break;
    case K_MAX_QUERIES:
    case K_MAX_CONNECTIONS: {
        int n = i == K_MAX_QUERIES ? cfg->max_queries : cfg->max_connections;
        if (n)
            snprintf(out, cap, "%d", n);
        else
            snprintf(out, cap, "unset (not throttled)");
        break;
    }
    case K_POOL:
        dbt_escape(cfg->pool ? cfg->pool : "", 200, cfg->pool != NULL, out, cap);
        if (!cfg->pool)
            snprintf(out, cap, "unset (each connection's host:port/dbname)");
        break;
    case K_WAIT_TIMEOUT:
        duration_text(cfg->wait_timeout_ms, out, cap);
        break;
    case K_LEASE:
        duration_text(cfg->lease_ms, out, cap);
        break;
    case K_REDIS_TIMEOUT:
        duration_text(cfg->redis_timeout_ms, out, cap);
        break;
    case K_ON_REDIS_ERROR:
        snprintf(out, cap, "%s", cfg->on_redis_error == DBT_ON_ERROR_CLOSED ? "closed" : "open");
        break;
    case K_LOG:
        dbt_escape(cfg->log_path ? cfg->log_path : "stderr", 200, false, out, cap);
        break;
    case K_LOG_LEVEL:
        snprintf(out, cap, "%s", dbt_log_level_name(cfg->log_level));
        break;
    case K_LOG_FORMAT:
        snprintf(out, cap, "%s", cfg->log_format == DBT_FMT_JSON ? "json" : "logfmt");
        break;
    case K_LOG_QUERY:
        snprintf(out, cap, "%s", on_off[cfg->log_query]);
        break;
    case K_KEY_PREFIX:
        dbt_escape(cfg->key_prefix ? cfg->key_prefix : "", 200, true, out, cap);
        break;
    case K_DISABLE:
        snprintf(out, cap, "%s", on_off[cfg->disable]);
        break;
    case K_EXEMPT: {
        size_t len = 0;
        for (int r = 0; r < cfg->nexempt && len + 1 < cap; r++)
            len += (size_t)snprintf(out + len, cap - len, "%s%s=%s", r ? "," : "",
                                    exempt_fields[cfg->exempt[r].field], cfg->exempt[r].pattern);
        if (!cfg->nexempt)
            snprintf(out, cap, "none");
        break;
    }
    case K_IDLE_IN_TX_WARN:
        duration_text(cfg->idle_in_tx_warn_ms, out, cap);
        break;
    case K_CACHE_PERMITS:
        snprintf(out, cap, "%s", on_off[cfg->cache_permits]);
        break;
    case K_CACHE_IDLE:
        duration_text(cfg->cache_idle_ms, out, cap);
        break;
    case K_LOCAL_HANDOVER:
        snprintf(out, cap, "%s", on_off[cfg->local_handover]);
        break;
    case K_CONFIG:
        dbt_escape(cfg->config_file ? cfg->config_file : "none", 200, false, out, cap);
        break;
    }
}
