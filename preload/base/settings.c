/* settings.c - the table of settings, and the small adapters that let one table row reach the
 * value parsers of config_values.c (each parser fills the field the row names) and show the
 * effective value back for `dbthrottle check`. */
#include "settings.h"
#include "log.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* The word parser stores the index of the word matched through an int: the enums it fills must
 * be stored as one. */
_Static_assert(sizeof(dbt_on_error) == sizeof(int), "dbt_on_error is stored as an int");
_Static_assert(sizeof(dbt_log_level) == sizeof(int), "dbt_log_level is stored as an int");
_Static_assert(sizeof(dbt_log_format) == sizeof(int), "dbt_log_format is stored as an int");
_Static_assert(sizeof(dbt_log_facility) == sizeof(int), "dbt_log_facility is stored as an int");

static void *field_of(const dbt_setting *s, dbt_config *cfg)
{
    return (char *)cfg + s->field;
}

static const void *const_field_of(const dbt_setting *s, const dbt_config *cfg)
{
    return (const char *)cfg + s->field;
}

/* ---- parsers: a row's value through config_values.c into its field ------------------------ */

static char *redacted_url(const char *url)
{
    size_t cap = strlen(url) + DBT_REDACT_ROOM;
    char *buf = malloc(cap);
    if (buf)
        dbt_redact_url(url, buf, cap);
    return buf;
}

static bool parse_redis_url(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    if (!dbt_parse_redis_url(s->env, value, field_of(s, cfg), err))
        return false;
    /* The copy for logs and `dbthrottle check`, without the password. */
    free(cfg->redis_url_redacted);
    cfg->redis_url_redacted = redacted_url(value);
    return true;
}

static bool parse_limit(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_limit(s->env, value, field_of(s, cfg), err);
}

static bool parse_bool(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_bool(s->env, value, field_of(s, cfg), err);
}

static bool parse_duration(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_duration(s->env, value, s->rule.duration.allow_zero,
                              s->rule.duration.allow_forever, field_of(s, cfg), err);
}

/* A finite, non-zero duration within the row's bounds. */
static bool parse_duration_in(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    int64_t ms;
    if (!dbt_parse_duration(s->env, value, false, false, &ms, err))
        return false;
    if (ms < s->rule.duration.min_ms || ms > s->rule.duration.max_ms)
        return dbt_bad_value(s->env, value, s->rule.duration.range, err);
    *(int64_t *)field_of(s, cfg) = ms;
    return true;
}

/* One of the row's words, in any case; the field gets its index. */
static bool parse_word(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    for (int i = 0; i < s->rule.words.n; i++)
        if (strcasecmp(value, s->rule.words.names[i]) == 0) {
            *(int *)field_of(s, cfg) = i;
            return true;
        }
    char why[128];
    snprintf(why, sizeof why, "expected %s", s->rule.words.expected);
    return dbt_bad_value(s->env, value, why, err);
}

static const char *const mode_words[] = {"enforce", "shadow"};      /* dbt_mode order */
static const char *const mode_kinds[] = {"queries", "connections"}; /* dbt_kind order */
_Static_assert(sizeof mode_kinds / sizeof *mode_kinds == DBT_MODE_KINDS, "a word per kind");

static int word_index(const char *const *words, int n, const char *w, size_t len)
{
    for (int i = 0; i < n; i++)
        if (strlen(words[i]) == len && strncasecmp(w, words[i], len) == 0)
            return i;
    return -1;
}

/* DBTHROTTLE_MODE: enforce or shadow for every kind, or per kind: "queries=shadow",
 * "queries=shadow,connections=enforce" (a kind not named: enforce here; its own, live). */
static bool parse_mode(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    dbt_mode mode[DBT_MODE_KINDS] = {DBT_MODE_ENFORCE, DBT_MODE_ENFORCE};
    unsigned named = 0;
    int both = word_index(mode_words, 2, value, strlen(value));
    const char *why = NULL;
    if (both >= 0) {
        mode[0] = mode[1] = (dbt_mode)both;
        named = (1u << DBT_MODE_KINDS) - 1;
    }
    for (const char *p = value; both < 0 && !why;) {
        size_t len = strcspn(p, ",");
        const char *eq = memchr(p, '=', len);
        int kind = eq ? word_index(mode_kinds, DBT_MODE_KINDS, p, (size_t)(eq - p)) : -1;
        int m = eq ? word_index(mode_words, 2, eq + 1, len - (size_t)(eq - p) - 1) : -1;
        if (kind < 0 || m < 0)
            why = "expected enforce, shadow, or per kind queries=MODE and/or connections=MODE "
                  "(MODE: enforce or shadow), separated by a comma";
        else if (named & (1u << kind))
            why = kind == 0 ? "queries is given twice" : "connections is given twice";
        else {
            mode[kind] = (dbt_mode)m;
            named |= 1u << kind;
        }
        if (!p[len])
            break;
        p += len + 1;
    }
    if (why)
        return dbt_bad_value(s->env, value, why, err);
    memcpy(cfg->mode, mode, sizeof mode);
    cfg->mode_named = named;
    return true;
}

static bool parse_text(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    char **field = field_of(s, cfg);
    if (s->rule.text.max_len && strlen(value) > s->rule.text.max_len) {
        char why[64];
        snprintf(why, sizeof why, "longer than %zu bytes", s->rule.text.max_len);
        return dbt_bad_value(s->env, value, why, err);
    }
    if (s->rule.text.null_word && strcmp(value, s->rule.text.null_word) == 0) {
        free(*field);
        *field = NULL;
        return true;
    }
    char *copy = strdup(value);
    if (!copy)
        return false;
    free(*field);
    *field = copy;
    return true;
}

/* DBTHROTTLE_LOG: stderr, a file, "syslog" (/dev/log) or "syslog:/path" (another socket, such
 * as a container's or a test's): the socket path must be one a sockaddr_un can hold. */
static bool parse_log_dest(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    if (strncmp(value, "syslog:", 7) == 0 &&
        (value[7] != '/' || strlen(value + 7) >= DBT_SYSLOG_PATH_MAX))
        return dbt_bad_value(s->env, value,
                             "expected syslog:/absolute/socket/path (under 108 bytes)", err);
    return parse_text(s, cfg, value, err);
}

/* "off" (0), or a finite duration within the row's bounds. */
static bool parse_period(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    if (strcasecmp(value, "off") == 0) {
        *(int64_t *)field_of(s, cfg) = 0;
        return true;
    }
    return parse_duration_in(s, cfg, value, err);
}

/* DBTHROTTLE_SERVER_CHECK_INTERVAL: "auto", "off" (0), or a duration within the row's bounds. */
static bool parse_check_interval(const dbt_setting *s, dbt_config *cfg, const char *value,
                                 char *err)
{
    if (strcasecmp(value, "auto") == 0) {
        *(int64_t *)field_of(s, cfg) = DBT_CHECK_AUTO;
        return true;
    }
    return parse_period(s, cfg, value, err);
}

static bool parse_exempt(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_exempt(s->env, value, field_of(s, cfg), &cfg->nexempt, err);
}

static bool parse_class_name(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    if (!dbt_class_name_valid(value))
        return dbt_bad_value(s->env, value,
                             "expected a class name: 1 to 32 of a-z, 0-9, '_' and '-'", err);
    return parse_text(s, cfg, value, err);
}

static bool parse_class_rules(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_class_rules(s->env, value, field_of(s, cfg), err);
}

static bool parse_weights(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_weights(s->env, value, field_of(s, cfg), err);
}

static bool parse_classes(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    return dbt_parse_classes(s->env, value, field_of(s, cfg), err);
}

/* DBTHROTTLE_SHARE_DIR: the processes that name the same directory share; a relative one would
 * make that depend on each process' working directory. */
static bool parse_abs_path(const dbt_setting *s, dbt_config *cfg, const char *value, char *err)
{
    if (value[0] != '/')
        return dbt_bad_value(s->env, value, "expected an absolute path", err);
    return parse_text(s, cfg, value, err);
}

/* ---- shows: a field back as text ------------------------------------------------------------ */

static void show_redis_url(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    (void)s; /* never the parsed URL: it holds the password */
    snprintf(out, cap, "%s", cfg->redis_url_redacted ? cfg->redis_url_redacted : "");
}

static void show_limit(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    int n = *(const int *)const_field_of(s, cfg);
    if (n)
        snprintf(out, cap, "%d", n);
    else
        snprintf(out, cap, "unset (not throttled)");
}

static void show_bool(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    snprintf(out, cap, "%s", *(const bool *)const_field_of(s, cfg) ? "on" : "off");
}

/* A duration as the parsers accept it back: "infinite", "2m", "1500ms". */
static void show_duration(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    int64_t ms = *(const int64_t *)const_field_of(s, cfg);
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

static void show_period(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    if (*(const int64_t *)const_field_of(s, cfg) == 0)
        snprintf(out, cap, "off");
    else
        show_duration(s, cfg, out, cap);
}

static void show_check_interval(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    if (*(const int64_t *)const_field_of(s, cfg) == DBT_CHECK_AUTO)
        snprintf(out, cap, "auto");
    else
        show_period(s, cfg, out, cap);
}

static void show_mode(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    (void)s;
    dbt_mode_show(cfg->mode, cfg->mode_named, out, cap);
}

static void show_word(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    int i = *(const int *)const_field_of(s, cfg);
    snprintf(out, cap, "%s", i >= 0 && i < s->rule.words.n ? s->rule.words.names[i] : "?");
}

static void show_text(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    const char *text = *(char *const *)const_field_of(s, cfg);
    if (!text && s->rule.text.unset_shown)
        snprintf(out, cap, "%s", s->rule.text.unset_shown);
    else
        dbt_escape(text ? text : "", 200, s->rule.text.quoted, out, cap);
}

static void show_exempt(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    static const char *const fields[] = {"application_name", "user", "database"};
    const dbt_exempt_rule *rules = const_field_of(s, cfg);
    size_t len = 0;
    out[0] = '\0';
    for (int r = 0; r < cfg->nexempt && len + 1 < cap; r++)
        len += (size_t)snprintf(out + len, cap - len, "%s%s=%s", r ? "," : "",
                                fields[rules[r].field], rules[r].pattern);
    if (!cfg->nexempt)
        snprintf(out, cap, "none");
}

static void show_rules(const dbt_setting *s, const dbt_config *cfg, char *out, size_t cap)
{
    dbt_rules_show(const_field_of(s, cfg), s->rule.rules.weights, out, cap);
}

/* ---- release: what a field owns ------------------------------------------------------------ */

static void release_redis_url(const dbt_setting *s, dbt_config *cfg)
{
    dbt_redis_url_free(field_of(s, cfg));
    free(cfg->redis_url_redacted);
    cfg->redis_url_redacted = NULL;
}

static void release_text(const dbt_setting *s, dbt_config *cfg)
{
    char **field = field_of(s, cfg);
    free(*field);
    *field = NULL;
}

static void release_exempt(const dbt_setting *s, dbt_config *cfg)
{
    dbt_exempt_free(field_of(s, cfg), cfg->nexempt);
    cfg->nexempt = 0;
}

static void release_rules(const dbt_setting *s, dbt_config *cfg)
{
    dbt_rule_list_free(field_of(s, cfg));
}

/* ---- the kinds ------------------------------------------------------------------------------ */

static const dbt_setting_kind as_redis_url = {parse_redis_url, show_redis_url, release_redis_url};
static const dbt_setting_kind as_limit = {parse_limit, show_limit, NULL};
static const dbt_setting_kind as_bool = {parse_bool, show_bool, NULL};
static const dbt_setting_kind as_duration = {parse_duration, show_duration, NULL};
static const dbt_setting_kind as_bounded_duration = {parse_duration_in, show_duration, NULL};
static const dbt_setting_kind as_word = {parse_word, show_word, NULL};
static const dbt_setting_kind as_mode = {parse_mode, show_mode, NULL};
static const dbt_setting_kind as_text = {parse_text, show_text, release_text};
static const dbt_setting_kind as_log_dest = {parse_log_dest, show_text, release_text};
static const dbt_setting_kind as_abs_path = {parse_abs_path, show_text, release_text};
static const dbt_setting_kind as_period = {parse_period, show_period, NULL};
static const dbt_setting_kind as_check_interval = {parse_check_interval, show_check_interval, NULL};
static const dbt_setting_kind as_exempt = {parse_exempt, show_exempt, release_exempt};
static const dbt_setting_kind as_class_name = {parse_class_name, show_text, release_text};
static const dbt_setting_kind as_class_rules = {parse_class_rules, show_rules, release_rules};
static const dbt_setting_kind as_weights = {parse_weights, show_rules, release_rules};
static const dbt_setting_kind as_classes = {parse_classes, show_text, release_text};

/* ---- the table ------------------------------------------------------------------------------ */

static const char *const on_redis_error_words[] = {"open", "closed"};  /* dbt_on_error order */
static const char *const log_format_words[] = {"logfmt", "json"};      /* dbt_log_format order */
static const char *const sample_words[] = {"shadow", "always", "off"}; /* dbt_sample_when order */
static const char *const log_facility_words[] = {"user",   "daemon", "local0", "local1", "local2",
                                                 "local3", "local4", "local5", "local6", "local7"};
_Static_assert(sizeof log_facility_words / sizeof *log_facility_words == DBT_NFACILITIES,
               "a word per dbt_log_facility");

/* Rows marked worker_only are read by the library alone: `dbthrottle status` and the other
 * operator's commands connect with redis_url, redis_timeout, key_prefix and config, and ignore a
 * stray bad value of the others in the operator's shell. */
#define WORDS(list, expect) .rule.words = {(list), (int)(sizeof(list) / sizeof *(list)), (expect)}
#define FIELD(name)         offsetof(dbt_config, name)

const dbt_setting dbt_settings[] = {
    {"redis_url", "DBTHROTTLE_REDIS_URL", "redis://127.0.0.1:6379", &as_redis_url, FIELD(redis),
     .doc = "the Redis that holds the semaphores"},
    /* rediss:// only. Read by the operator's commands too: they connect as the library does. */
    {"redis_ca", "DBTHROTTLE_REDIS_CA", NULL, &as_text, FIELD(redis_ca),
     .rule.text = {.unset_shown = "the system's CA store"},
     .doc = "rediss://: the CA (a PEM file or a directory) that signed Redis' certificate"},
    {"redis_cert", "DBTHROTTLE_REDIS_CERT", NULL, &as_text, FIELD(redis_cert),
     .rule.text = {.unset_shown = "none"},
     .doc = "rediss://: a client certificate (PEM) for a Redis with tls-auth-clients"},
    {"redis_key", "DBTHROTTLE_REDIS_KEY", NULL, &as_text, FIELD(redis_key),
     .rule.text = {.unset_shown = "none"}, .doc = "rediss://: the client certificate's key (PEM)"},
    {"max_queries", "DBTHROTTLE_MAX_QUERIES", NULL, &as_limit, FIELD(max_queries),
     .worker_only = true, .doc = "queries running at once per pool; unset = not throttled"},
    {"max_connections", "DBTHROTTLE_MAX_CONNECTIONS", NULL, &as_limit, FIELD(max_connections),
     .worker_only = true, .doc = "connections open at once per pool; unset = not throttled"},
    {"pool", "DBTHROTTLE_POOL", NULL, &as_text, FIELD(pool),
     .rule.text = {.max_len = 65536,
                   .unset_shown = "unset (each connection's host:port/dbname)",
                   .quoted = true},
     .worker_only = true,
     .doc = "the name of the shared limit; unset = each connection's host:port/dbname"},
    {"wait_timeout", "DBTHROTTLE_WAIT_TIMEOUT", "2m", &as_duration, FIELD(wait_timeout_ms),
     .rule.duration = {.allow_zero = true, .allow_forever = true}, .worker_only = true,
     .live = true, .doc = "longest wait for a permit; 0 = never wait"},
    {"lease", "DBTHROTTLE_LEASE", "10s", &as_bounded_duration, FIELD(lease_ms),
     .rule.duration = {.min_ms = 200, .max_ms = 3600000, .range = "must be from 200ms to 1h"},
     .worker_only = true, .live = true,
     .doc = "a dead holder's permit returns within lease + lease/3"},
    /* Why auto, and what it does not cover: docs/design.md, "A dead client's statement". */
    {"server_check_interval", "DBTHROTTLE_SERVER_CHECK_INTERVAL", "auto", &as_check_interval,
     FIELD(server_check_ms),
     .rule.duration = {.min_ms = 10,
                       .max_ms = 3600000,
                       .range = "must be auto, off or from 10ms to 1h"},
     .worker_only = true,
     .doc = "client_connection_check_interval asked of the server (PostgreSQL 14+); auto = "
            "min(1s, lease/4), off = not asked"},
    {"redis_timeout", "DBTHROTTLE_REDIS_TIMEOUT", "1s", &as_bounded_duration,
     FIELD(redis_timeout_ms),
     .rule.duration = {.min_ms = 10, .max_ms = 60000, .range = "must be from 10ms to 1m"},
     .doc = "connect and command timeout for Redis"},
    {"on_redis_error", "DBTHROTTLE_ON_REDIS_ERROR", "open", &as_word, FIELD(on_redis_error),
     WORDS(on_redis_error_words, "open or closed"), .worker_only = true, .live = true,
     .doc = "while Redis is unreachable: open = run unthrottled, closed = fail"},
    /* Shadow mode: docs/design.md, "Shadow mode"; docs/operations.md, "Rolling out". */
    {"mode", "DBTHROTTLE_MODE", "enforce", &as_mode, FIELD(mode), .worker_only = true, .live = true,
     .doc = "enforce the limit, or shadow: never wait nor refuse, count what would have waited; "
            "per kind: queries=shadow,connections=enforce"},
    /* The command sample dbthrottle report replays: docs/design.md, "The command sample". */
    {"sample", "DBTHROTTLE_SAMPLE", "shadow", &as_word, FIELD(sample),
     WORDS(sample_words, "shadow, always or off"), .worker_only = true, .live = true,
     .doc = "the commands Redis' sample keeps for dbthrottle report: shadow (those run in shadow "
            "mode), always (enforced ones too) or off"},
    {"log", "DBTHROTTLE_LOG", "stderr", &as_log_dest, FIELD(log_path),
     .rule.text = {.null_word = "stderr", .unset_shown = "stderr"}, .worker_only = true,
     .doc = "stderr, a file to append the log to, or syslog (syslog:/path: another socket)"},
    {"log_level", "DBTHROTTLE_LOG_LEVEL", "warn", &as_word, FIELD(log_level),
     WORDS(dbt_log_level_words, "off, error, warn, info or debug"), .worker_only = true,
     .live = true, .doc = "off, error, warn, info (every acquisition) or debug"},
    {"log_format", "DBTHROTTLE_LOG_FORMAT", "logfmt", &as_word, FIELD(log_format),
     WORDS(log_format_words, "logfmt or json"), .worker_only = true, .doc = "logfmt or json"},
    {"log_query", "DBTHROTTLE_LOG_QUERY", "off", &as_bool, FIELD(log_query), .worker_only = true,
     .doc = "add each command's SQL text to its permit's trace lines"},
    {"log_facility", "DBTHROTTLE_LOG_FACILITY", "user", &as_word, FIELD(log_facility),
     WORDS(log_facility_words, "user, daemon or local0 to local7"), .worker_only = true,
     .doc = "with DBTHROTTLE_LOG=syslog: the facility (user, daemon, local0 ... local7)"},
    {"log_stats", "DBTHROTTLE_LOG_STATS", "off", &as_period, FIELD(log_stats_ms),
     .rule.duration = {.min_ms = 1000,
                       .max_ms = 86400000,
                       .range = "must be off or from 1s to 24h"},
     .worker_only = true, .doc = "log each pool's counters this often (a line per pool); off"},
    {"key_prefix", "DBTHROTTLE_KEY_PREFIX", "dbthrottle:", &as_text, FIELD(key_prefix),
     .rule.text = {.max_len = 256, .quoted = true}, .doc = "prefix of every Redis key"},
    {"disable", "DBTHROTTLE_DISABLE", "off", &as_bool, FIELD(disable), .worker_only = true,
     .doc = "on: load but do nothing"},
    {"exempt", "DBTHROTTLE_EXEMPT", NULL, &as_exempt, FIELD(exempt), .worker_only = true,
     .live = true,
     .doc = "connections that never take a permit (application_name=, user=, database= globs)"},
    /* Classes and weights (docs/configuration.md, "Classes and weights"). */
    {"class", "DBTHROTTLE_CLASS", NULL, &as_class_name, FIELD(klass),
     .rule.text = {.unset_shown = "unset (by DBTHROTTLE_CLASS_RULES)"}, .worker_only = true,
     .doc = "this process' class for every connection (wins over DBTHROTTLE_CLASS_RULES)"},
    {"class_rules", "DBTHROTTLE_CLASS_RULES", NULL, &as_class_rules, FIELD(class_rules),
     .worker_only = true, .live = true,
     .doc = "NAME:field=glob[,field=glob...][;...]: a connection's class, first match wins"},
    {"classes", "DBTHROTTLE_CLASSES", NULL, &as_classes, FIELD(classes),
     .rule.text = {.unset_shown = "none"}, .worker_only = true,
     .doc = "class definitions that apply while Redis has none (name=75%,priority=1,...;...)"},
    {"weights", "DBTHROTTLE_WEIGHTS", NULL, &as_weights, FIELD(weights),
     .rule.rules = {.weights = true}, .worker_only = true, .live = true,
     .doc = "N:field=pattern[,...][;...]: a command's weight in permits (sql= a regex)"},
    {"idle_in_tx_warn", "DBTHROTTLE_IDLE_IN_TX_WARN", "10s", &as_duration,
     FIELD(idle_in_tx_warn_ms), .rule.duration = {.allow_forever = true}, .worker_only = true,
     .doc = "warn when a permit is held idle in a transaction this long"},
    /* Off by default: see docs/configuration.md for why. */
    {"cache_permits", "DBTHROTTLE_CACHE_PERMITS", "on", &as_bool, FIELD(cache_permits),
     .worker_only = true, .doc = "keep a query permit between commands while nobody waits"},
    {"cache_idle", "DBTHROTTLE_CACHE_IDLE", "50ms", &as_bounded_duration, FIELD(cache_idle_ms),
     .rule.duration = {.min_ms = 1, .max_ms = 60000, .range = "must be from 1ms to 1m"},
     .worker_only = true, .doc = "a kept permit unused this long goes back by itself"},
    {"local_handover", "DBTHROTTLE_LOCAL_HANDOVER", "on", &as_bool, FIELD(local_handover),
     .worker_only = true,
     .doc = "pass a permit from thread to thread while only this process waits"},
    /* Host-level sharing (docs/configuration.md, "Host-level sharing"). */
    {"host_share", "DBTHROTTLE_HOST_SHARE", "on", &as_bool, FIELD(host_share), .worker_only = true,
     .doc = "pass a permit between this host's processes while only they wait"},
    {"share_dir", "DBTHROTTLE_SHARE_DIR", "/dev/shm", &as_abs_path, FIELD(share_dir),
     .rule.text = {.max_len = 4000}, .worker_only = true,
     .doc = "where the host's shared segments live; processes share when they name the same"},
    {"host_relay", "DBTHROTTLE_HOST_RELAY", "off", &as_bool, FIELD(host_relay), .worker_only = true,
     .doc = "one process of this host speaks to Redis for the others (fewer connections)"},
    {"redis_password_file", "DBTHROTTLE_REDIS_PASSWORD_FILE", NULL, &as_text,
     FIELD(redis_password_file), .rule.text = {.unset_shown = "none"},
     .doc = "a file whose first line is the Redis password (instead of in the URL)"},
    {"sentinel_user", "DBTHROTTLE_SENTINEL_USER", NULL, &as_text, FIELD(sentinel_user),
     .rule.text = {.max_len = 256, .unset_shown = "none", .quoted = true},
     .doc = "the ACL user the sentinels of a redis-sentinel:// URL want"},
    {"sentinel_password_file", "DBTHROTTLE_SENTINEL_PASSWORD_FILE", NULL, &as_text,
     FIELD(sentinel_password_file), .rule.text = {.unset_shown = "none"},
     .doc = "a file whose first line is the sentinels' own password"},
    {"config", "DBTHROTTLE_CONFIG", NULL, &as_text, FIELD(config_file),
     .rule.text = {.unset_shown = "none"}, .env_only = true,
     .doc = "a configuration file with these settings"},
    {.key = NULL},
};

const char *dbt_mode_name(int mode)
{
    return mode >= 0 && mode < (int)(sizeof mode_words / sizeof *mode_words) ? mode_words[mode]
                                                                             : "?";
}

const char *dbt_mode_kind_word(int kind)
{
    return kind >= 0 && kind < DBT_MODE_KINDS ? mode_kinds[kind] : "?";
}

void dbt_mode_show(const dbt_mode mode[DBT_MODE_KINDS], unsigned named, char *out, size_t cap)
{
    unsigned all = (1u << DBT_MODE_KINDS) - 1;
    if ((named & all) == all && mode[0] == mode[1]) {
        snprintf(out, cap, "%s", dbt_mode_name((int)mode[0]));
        return;
    }
    size_t len = 0;
    out[0] = '\0';
    for (int k = 0; k < DBT_MODE_KINDS && len < cap; k++)
        if (named & (1u << k))
            len += (size_t)snprintf(out + len, cap - len, "%s%s=%s", len ? "," : "", mode_kinds[k],
                                    dbt_mode_name((int)mode[k]));
}

#define NSETTINGS (sizeof dbt_settings / sizeof *dbt_settings - 1)
_Static_assert(NSETTINGS <= DBT_MAX_SETTINGS, "dbt_config.sources has room for every setting");

const dbt_setting *dbt_setting_find(const char *key)
{
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (strcmp(key, s->env) == 0 || strcasecmp(key, s->key) == 0)
            return s;
    return NULL;
}

const dbt_setting *dbt_live_find(const char *key)
{
    const dbt_setting *s = dbt_setting_find(key);
    return s && s->live ? s : NULL;
}

bool dbt_live_parse(const char *text, dbt_live *out, char *refused, size_t cap)
{
    memset(out, 0, sizeof *out);
    refused[0] = '\0';
    /* "v" and 1 to 15 digits, then a newline or the end: as renew.lua and admin.lua read it
     * (LIVE_VERSION_DIGITS there), so that both sides agree on every text, even one by hand. */
    size_t nd = strspn(text + 1, "0123456789");
    if (text[0] != 'v' || nd == 0 || nd > 15 || (text[1 + nd] != '\n' && text[1 + nd] != '\0'))
        return false;
    long long v = strtoll(text + 1, NULL, 10);
    if (v <= 0)
        return false;
    const char *end = text + 1 + nd;
    out->version = v;
    size_t used = 0;
    for (const char *line = *end ? end + 1 : end; *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)len, line);
        line = nl ? nl + 1 : line + len;
        if (!buf[0])
            continue;
        char *eq = strchr(buf, '=');
        char err[DBT_ERRLEN] = "";
        const dbt_setting *s = NULL;
        if (len >= sizeof buf) {
            snprintf(err, sizeof err, "a line longer than %zu bytes", sizeof buf - 1);
        } else if (!eq) {
            snprintf(err, sizeof err, "not key=value");
        } else {
            *eq = '\0';
            s = dbt_live_find(buf);
            /* the file key as dbthrottle set writes it, only: another spelling would stay when
             * its key is cleared */
            if (!s || strcmp(buf, s->key) != 0)
                snprintf(err, sizeof err, "not a live setting's key");
            else if (s->kind->parse(s, &out->cfg, eq + 1, err))
                out->set[s - dbt_settings] = true;
        }
        if (err[0]) {
            size_t kl = strlen(out->refused_keys);
            /* the key as written: what is before '=' (the whole line when it has none) */
            snprintf(out->refused_keys + kl, sizeof out->refused_keys - kl, "%s%.*s", kl ? "," : "",
                     (int)(strcspn(buf, "=") < 40 ? strcspn(buf, "=") : 40), buf);
        }
        if (err[0] && used + 1 < cap) {
            int w = snprintf(refused + used, cap - used, "%s%s: %s", used ? "; " : "", buf, err);
            if (w > 0)
                used = used + (size_t)w < cap ? used + (size_t)w : cap - 1;
        }
    }
    return true;
}

void dbt_live_own_format(const dbt_config *cfg, char *out, size_t cap)
{
    static const char src_letter[] = {
        [DBT_SRC_DEFAULT] = 'd', [DBT_SRC_FILE] = 'f', [DBT_SRC_ENV] = 'e'};
    size_t len = 0;
    out[0] = '\0';
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        if (!s->live)
            continue;
        char shown[256], item[512];
        s->kind->show(s, cfg, shown, sizeof shown);
        int n = snprintf(item, sizeof item, "%s%s=%c:", len ? " " : "", s->key,
                         src_letter[dbt_setting_source(cfg, s)]);
        for (const unsigned char *q = (const unsigned char *)shown;
             *q && q - (const unsigned char *)shown < 64; q++)
            n += *q <= 0x20 || *q == '%' || *q == 0x7f
                     ? snprintf(item + n, sizeof item - (size_t)n, "%%%02X", *q)
                     : snprintf(item + n, sizeof item - (size_t)n, "%c", *q);
        if (strlen(shown) > 64) /* cut: said, never shown as the whole value */
            n += snprintf(item + n, sizeof item - (size_t)n, "...");
        if (len + (size_t)n + 1 > cap)
            break; /* whole items only */
        memcpy(out + len, item, (size_t)n + 1);
        len += (size_t)n;
    }
}

bool dbt_live_own_each(const char *text, dbt_live_own_fn each, void *arg)
{
    for (const char *p = text; *p;) {
        size_t n = strcspn(p, " ");
        char item[512];
        snprintf(item, sizeof item, "%.*s", (int)n, p);
        p += n + (p[n] == ' ');
        char *eq = strchr(item, '=');
        if (!eq || !eq[1] || eq[2] != ':' || !strchr("dfe", eq[1]))
            return false;
        *eq = '\0';
        dbt_source src = eq[1] == 'e' ? DBT_SRC_ENV : eq[1] == 'f' ? DBT_SRC_FILE : DBT_SRC_DEFAULT;
        char value[256];
        size_t v = 0;
        for (const char *q = eq + 3; *q && v + 1 < sizeof value; q++) {
            unsigned x;
            if (*q == '%' && sscanf(q + 1, "%2X", &x) == 1 && isxdigit((unsigned char)q[1]) &&
                isxdigit((unsigned char)q[2])) {
                value[v++] = (char)x;
                q += 2;
            } else {
                value[v++] = *q;
            }
        }
        value[v] = '\0';
        each(item, src, value, arg);
    }
    return true;
}

void dbt_live_free(dbt_live *l)
{
    dbt_settings_release(&l->cfg);
}

void dbt_settings_release(dbt_config *cfg)
{
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (s->kind->release)
            s->kind->release(s, cfg);
}

dbt_source dbt_setting_source(const dbt_config *cfg, const dbt_setting *s)
{
    return cfg->sources[s - dbt_settings];
}

int64_t dbt_server_check_ms(const dbt_config *cfg)
{
    if (cfg->server_check_ms != DBT_CHECK_AUTO)
        return cfg->server_check_ms;
    int64_t quarter = cfg->lease_ms / 4;
    return quarter < 1000 ? quarter : 1000;
}
