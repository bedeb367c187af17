/* config.h - dbthrottle settings: their values (dbt_config), and the functions that parse
 * (config_values.c, class_rules.c), load (config_load.c) and name them. The ground of base/:
 * a header of types, so that every file may include it and none has to call up. */
#ifndef DBT_CONFIG_H
#define DBT_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Size of the buffer every parser writes its one-line error into. */
#define DBT_ERRLEN 512

/* A duration of "forever" (DBTHROTTLE_WAIT_TIMEOUT=infinite). */
#define DBT_FOREVER INT64_C(-1)

typedef enum { DBT_ON_ERROR_OPEN = 0, DBT_ON_ERROR_CLOSED = 1 } dbt_on_error;

/* DBTHROTTLE_MODE: enforce the limit, or only count what enforcing it would have done. */
typedef enum { DBT_MODE_ENFORCE = 0, DBT_MODE_SHADOW = 1 } dbt_mode;
/* The kinds of permit a mode is given for, in dbt_kind's order (keys.h): queries, connections. */
#define DBT_MODE_KINDS 2

/* DBTHROTTLE_SAMPLE: which commands go into the pool's command sample (dbthrottle report's):
 * those run in shadow mode, every one (enforced too), or none. */
typedef enum { DBT_SAMPLE_SHADOW = 0, DBT_SAMPLE_ALWAYS = 1, DBT_SAMPLE_OFF = 2 } dbt_sample_when;

typedef enum {
    DBT_LOG_OFF = 0,
    DBT_LOG_ERROR = 1,
    DBT_LOG_WARN = 2,
    DBT_LOG_INFO = 3,
    DBT_LOG_DEBUG = 4
} dbt_log_level;

typedef enum { DBT_FMT_LOGFMT = 0, DBT_FMT_JSON = 1 } dbt_log_format;

/* DBTHROTTLE_LOG_FACILITY, in the order of its words (settings.c); log.c maps each to syslog's
 * facility code. */
typedef enum {
    DBT_FACILITY_USER = 0,
    DBT_FACILITY_DAEMON = 1,
    DBT_FACILITY_LOCAL0 = 2 /* ... local7 = 9 */
} dbt_log_facility;
#define DBT_NFACILITIES 10
/* DBTHROTTLE_LOG=syslog:PATH: room for PATH in a sockaddr_un, with its NUL. */
#define DBT_SYSLOG_PATH_MAX 108

/* Where a setting's value came from (shown by `dbthrottle check` later). */
typedef enum { DBT_SRC_DEFAULT = 0, DBT_SRC_FILE = 1, DBT_SRC_ENV = 2 } dbt_source;

/* Room for the rows of the settings table (settings.c asserts that they fit). */
#define DBT_MAX_SETTINGS 40
/* DBTHROTTLE_SERVER_CHECK_INTERVAL=auto */
#define DBT_CHECK_AUTO (-1)

/* One server of a list ("host1:26379,host2:26379"); host owned (malloc'd). */
typedef struct {
    char *host; /* IPv6 without brackets */
    int port;
} dbt_host_port;
#define DBT_MAX_HOSTS 16

/* Cluster seeds a redis-cluster:// URL may list. */
#define DBT_MAX_SEEDS DBT_MAX_HOSTS

/* A parsed DBTHROTTLE_REDIS_URL. Strings are owned (malloc'd) and NULL when absent. */
typedef struct {
    bool is_unix;   /* unix:///path[?db=N] */
    bool tls;       /* rediss://: TLS, the server's certificate verified */
    char *host;     /* TCP host (IPv6 without brackets) */
    int port;       /* TCP port, default 6379 */
    char *path;     /* unix socket path */
    int db;         /* SELECT db, default 0 */
    char *user;     /* ACL user (Redis 6+), NULL when only a password is given */
    char *password; /* AUTH password; never logged */
    /* redis-sentinel://[user:password@]host1[:port1],.../MASTERNAME[/db]: the master is found
     * through these sentinels (host and port above stay unset); user and password are the
     * master's. nsentinels is 0 for every other form. */
    char *master_name;
    int nsentinels;
    dbt_host_port sentinels[DBT_MAX_HOSTS];
    /* redis-cluster://[user:password@]host1[:port1],host2[:port2],... (rediss-cluster:// with
     * TLS): the seeds asked for CLUSTER SLOTS, the first one also in host and port. A plain
     * redis:// URL whose server turns out to be a cluster node is routed the same way, with its
     * host as the only seed (preload/redis/cluster.c). */
    bool cluster;
    int nseeds;
    dbt_host_port seeds[DBT_MAX_SEEDS];
} dbt_redis_url;

/* One DBTHROTTLE_EXEMPT rule: connections whose field matches the glob never take a permit. */
typedef enum { DBT_EXEMPT_APP = 0, DBT_EXEMPT_USER = 1, DBT_EXEMPT_DATABASE = 2 } dbt_exempt_field;
#define DBT_MAX_EXEMPT 16
typedef struct {
    dbt_exempt_field field;
    char *pattern; /* fnmatch(3) glob */
} dbt_exempt_rule;

/* Classes and weights (docs/configuration.md, "Classes and weights"). A rule is a list of
 * conditions that must all match: a field's glob (fnmatch(3)), or for weights a POSIX extended
 * regular expression on the command's text, compiled once when the setting is read. */
typedef enum {
    DBT_RULE_APP = 0,
    DBT_RULE_USER = 1,
    DBT_RULE_DATABASE = 2,
    DBT_RULE_SQL = 3 /* DBTHROTTLE_WEIGHTS only */
} dbt_rule_field;
#define DBT_RULE_NFIELDS   4
#define DBT_MAX_RULES      16
#define DBT_MAX_RULE_CONDS 4
#define DBT_CLASS_NAME_MAX 32
/* The most classes a pool may define, in DBTHROTTLE_CLASSES and by dbthrottle class alike: the
 * scripts read this very #define (tools/embed-lua.sh makes it their MAX_CLASSES), so a script's
 * cost stays bounded whatever definitions Redis holds (docs/design.md, "Classes and weights"). */
#define DBT_MAX_CLASSES 16
/* Shadow mode's command sample (docs/design.md, "The command sample"): the most holds Redis keeps
 * per pool and kind, and for how long (sample.lua reads both: tools/embed-lua.sh); a process'
 * buffer of holds not sent yet, and the most one sample.lua call carries. */
#define DBT_SAMPLE_CAP    100000
#define DBT_SAMPLE_AGE_MS 3600000
#define DBT_SAMPLE_BUF    2048
#define DBT_SAMPLE_CHUNK  128
/* sql= is matched against the first this many bytes of a command's text (a bound on its cost). */
#define DBT_RULE_SQL_MAX 512
typedef struct {
    dbt_rule_field field;
    char *pattern; /* the glob or the regular expression as written (`\;` unescaped) */
    void *regex;   /* DBT_RULE_SQL: its compiled regex_t (owned); NULL otherwise */
} dbt_rule_cond;
typedef struct {
    char klass[DBT_CLASS_NAME_MAX + 1]; /* DBTHROTTLE_CLASS_RULES: the class a match gives */
    int weight;                         /* DBTHROTTLE_WEIGHTS: the weight a match gives */
    int ncond;
    dbt_rule_cond cond[DBT_MAX_RULE_CONDS];
} dbt_rule;
typedef struct {
    dbt_rule *rules; /* owned; NULL when none */
    int n;
} dbt_rule_list;
/* What a connection (and a command) is matched on; NULL: not known (no condition on it
 * matches). */
typedef struct {
    const char *value[DBT_RULE_NFIELDS];
} dbt_rule_values;

/* Every setting. Owned strings are freed by dbt_config_free(). */
typedef struct {
    dbt_redis_url redis;
    char *redis_url_redacted; /* the URL with its password replaced by "***", for logs */
    char *redis_ca;           /* rediss://: CA file or directory; NULL = the system's store */
    char *redis_cert;         /* rediss://: client certificate and its key, both or neither */
    char *redis_key;
    int max_queries;          /* 0 = unset: queries are not throttled */
    int max_connections;      /* 0 = unset: connections are not throttled */
    char *pool;               /* NULL = derive from the connection (host:port/dbname) */
    int64_t wait_timeout_ms;  /* DBT_FOREVER, or >= 0 (0 = never wait) */
    int64_t lease_ms;         /* > 0 */
    int64_t server_check_ms;  /* DBT_CHECK_AUTO, 0 = off, or ms: dbt_server_check_ms */
    int64_t redis_timeout_ms; /* > 0: connect and command timeout */
    dbt_on_error on_redis_error;
    /* DBTHROTTLE_MODE per kind of permit (queries, connections: DBT_MODE_KINDS), shadow: never
     * wait nor refuse, count what would have. mode_named: the kinds its value named (bit k); a
     * kind it did not name is enforce in a process' own value, and its own in a live one. */
    dbt_mode mode[DBT_MODE_KINDS];
    unsigned mode_named;
    dbt_sample_when sample; /* DBTHROTTLE_SAMPLE */
    char *log_path;         /* NULL = stderr; "syslog" or "syslog:/socket/path" = syslog */
    dbt_log_level log_level;
    dbt_log_format log_format;
    bool log_query;
    dbt_log_facility log_facility; /* syslog's facility */
    int64_t log_stats_ms;          /* period of the stats line per pool; 0 = off */
    char *key_prefix;              /* never NULL after a successful load */
    bool disable;
    char *config_file;                      /* DBTHROTTLE_CONFIG, NULL when unset */
    dbt_source sources[DBT_MAX_SETTINGS];   /* by row of dbt_settings[], see dbt_config_source */
    dbt_exempt_rule exempt[DBT_MAX_EXEMPT]; /* DBTHROTTLE_EXEMPT: any rule that matches exempts */
    int nexempt;
    int64_t idle_in_tx_warn_ms; /* warn when a permit is held idle in a transaction this long */
    bool cache_permits;         /* keep a query permit between commands while nobody waits */
    /* pass a permit from thread to thread of this process while only its threads wait */
    bool local_handover;
    int64_t cache_idle_ms; /* a kept permit unused this long goes back by itself */
    /* pass a permit between the processes of this host that share a pool (host-level sharing) */
    bool host_share;
    char *share_dir; /* an absolute path: where the host's segments live (default /dev/shm) */
    /* one process of the host speaks to Redis for the others (preload/redis/relay.c) */
    bool host_relay;
    /* Secrets outside the URL: the files' paths as set, and what dbt_config_load read from them
     * (the Redis one into redis.password; the sentinels' own into sentinel_password). */
    char *redis_password_file;
    char *sentinel_user;
    char *sentinel_password_file;
    char *sentinel_password; /* never logged */
    /* DBTHROTTLE_CLASS: this process' class for every connection (NULL: by class_rules) */
    char *klass;
    dbt_rule_list class_rules; /* DBTHROTTLE_CLASS_RULES: first match gives the class */
    /* DBTHROTTLE_CLASSES: the shipped definition, as the definition text Redis keeps
     * ("aging=<ms>;default=<name>;<name>:<share>:<priority>:<wait_ms>:<cap>;..."); NULL none */
    char *classes;
    dbt_rule_list weights; /* DBTHROTTLE_WEIGHTS: first match gives the weight */
    /* A password file readable by group or others: what to warn about (owned; NULL: none). */
    char *password_file_warning;
    /* The Redis password in the URL of a settings file group or others may read (owned). */
    char *config_password_warning;
    /* What dbt_config_load refused, kept so that each reader can ignore what it does not read:
     * by row of dbt_settings[], the message of a refused value whose setting has no good value
     * in effect since (the default, or an earlier source's, stands in the field); and the first
     * error no one setting owns (an unknown name, an unreadable file, a line that is not
     * key = value). Owned; NULL when none. */
    char *row_error[DBT_MAX_SETTINGS];
    char *other_error;
} dbt_config;

/* Value parsers (config_values.c): pure functions, no I/O. Each returns true on success; on failure
 * it writes a one-line message naming `setting` and the bad value into err (DBT_ERRLEN bytes) and
 * leaves *out untouched. */
bool dbt_parse_duration(const char *setting, const char *text, bool allow_zero, bool allow_forever,
                        int64_t *out_ms, char *err);
/* The largest limit a setting or a command takes. */
#define DBT_LIMIT_MAX 100000
bool dbt_parse_limit(const char *setting, const char *text, int *out, char *err);
bool dbt_parse_bool(const char *setting, const char *text, bool *out, char *err);
/* "host1[:port1],host2[:port2],..." (IPv6 in brackets) in [text, end): fills hosts (at most
 * DBT_MAX_HOSTS, each host malloc'd) and *n, the port default_port where none is given. Returns
 * NULL, or why it failed (then nothing is left allocated). For the Sentinel and Cluster forms. */
const char *dbt_parse_host_list(const char *text, const char *end, int default_port,
                                dbt_host_port *hosts, int *n);
void dbt_host_list_free(dbt_host_port *hosts, int *n);
/* *out must be zeroed or hold an earlier result: on success that one is freed and replaced. */
bool dbt_parse_redis_url(const char *setting, const char *text, dbt_redis_url *out, char *err);
/* "application_name=pg_monitor*,user=admin,database=ops": comma-separated field=glob rules;
 * "none": no rule (a live value that lifts the workers' own exemptions). */
bool dbt_parse_exempt(const char *setting, const char *text, dbt_exempt_rule *rules, int *n,
                      char *err);
void dbt_exempt_free(dbt_exempt_rule *rules, int n);
/* The pattern of the first rule a connection matches, NULL none: values[] are its
 * application_name, user and database (by dbt_exempt_field; NULL: not known, matches nothing). */
const char *dbt_exempt_match(const dbt_exempt_rule *rules, int n, const char *const values[3]);
void dbt_redis_url_free(dbt_redis_url *u);

/* Classes and weights (class_rules.c). A class name: [a-z0-9_-]{1,32}, but not "-" alone (the
 * default class's tag). */
bool dbt_class_name_valid(const char *name);
/* DBTHROTTLE_CLASS_RULES: "name:field=glob[,field=glob...][;name:...]". */
bool dbt_parse_class_rules(const char *setting, const char *text, dbt_rule_list *out, char *err);
/* DBTHROTTLE_WEIGHTS: "N:field=pattern[,field=pattern...][;N:...]", sql= a regex (`\;` for a
 * `;` in it). */
bool dbt_parse_weights(const char *setting, const char *text, dbt_rule_list *out, char *err);
/* DBTHROTTLE_CLASSES: "interactive=75%,priority=1,wait=5s,queue_cap=100;batch=25%;aging=30s;
 * default=batch" into the definition text (malloc'd, into *out, an earlier one freed). */
bool dbt_parse_classes(const char *setting, const char *text, char **out, char *err);
void dbt_rule_list_free(dbt_rule_list *l);
/* The first rule of l whose conditions all match v, or NULL. Thread-safe (regexec on a shared
 * compiled regex is). */
const dbt_rule *dbt_rules_match(const dbt_rule_list *l, const dbt_rule_values *v);
/* The rules back as text (as `dbthrottle check` shows them). */
void dbt_rules_show(const dbt_rule_list *l, bool weights, char *out, size_t cap);

/* The load (config_load.c). Sets every field to its default (the settings table's, through its
 * parsers). */
void dbt_config_defaults(dbt_config *cfg);
/* (settings.c) The client_connection_check_interval (ms) to ask of the server, 0 for none: auto is
 * min(1s, lease/4), so that the server ends a dead client's statement well before its permit's
 * lease can lapse (docs/design.md, "A dead client's statement"). */
int64_t dbt_server_check_ms(const dbt_config *cfg);

/* Applies one KEY=VALUE. key is either the environment name (DBTHROTTLE_MAX_QUERIES) or the short
 * file form (max_queries, case-insensitive). Returns false with a one-line message on an unknown
 * key or a bad value. */
bool dbt_config_set(dbt_config *cfg, const char *key, const char *value, dbt_source src, char *err);

/* Parses the text of a configuration file (`key = value` lines, '#' comments, blank lines,
 * optional double quotes around a value). `name` is used in messages ("FILE:LINE: ..."). No I/O.
 * Reads every line: on failure err holds the first error. */
bool dbt_config_parse_text(dbt_config *cfg, const char *name, const char *text, char *err);

/* Loads defaults, then the file named by DBTHROTTLE_CONFIG (if set), then every DBTHROTTLE_*
 * variable of `envp` (the environment wins). Unknown DBTHROTTLE_* names are errors. Reads on
 * past an error, so that every good value is in cfg (DBTHROTTLE_DISABLE must work whatever else
 * is wrong): on failure err holds the first error, and cfg's row_error/other_error each one (see
 * dbt_config_error_for). With DBTHROTTLE_CONFIG unset, the file is DBT_DEFAULT_CONFIG when it
 * exists (an installed /etc/dbthrottle.conf); set but empty, no file is read. */
bool dbt_config_load(dbt_config *cfg, char *const *envp, char *err);
/* dbt_config_load with another default file (the tests' own; NULL: none). */
bool dbt_config_load_with_default(dbt_config *cfg, char *const *envp, const char *default_file,
                                  char *err);

/* Who reads a configuration: a worker (the library) reads every setting; the operator's commands
 * (dbthrottle status, top, drain, ...) only those not marked worker_only in the table. */
typedef enum { DBT_READER_WORKER = 0, DBT_READER_OPERATOR = 1 } dbt_config_reader;

/* The message of the first error of cfg that matters to `reader` (the error no setting owns
 * first, then by row), or NULL when its settings are all good. */
const char *dbt_config_error_for(const dbt_config *cfg, dbt_config_reader reader);

/* True when the value in effect for the setting named `key` (either form) parsed: it is the
 * default or a value that was accepted, and no later value of it was refused. */
bool dbt_config_value_ok(const dbt_config *cfg, const char *key);

/* Where a setting came from, by short name ("max_queries"); DBT_SRC_DEFAULT for unknown names. */
dbt_source dbt_config_source(const dbt_config *cfg, const char *short_name);

void dbt_config_free(dbt_config *cfg);

/* A source in words, for `dbthrottle check`: "default", "file", "environment". */
const char *dbt_source_name(dbt_source s);

/* A level in words (log.c, which writes it in every line); "?" for a value out of range. */
const char *dbt_log_level_name(dbt_log_level l);

/* A mode in words (DBTHROTTLE_MODE's): "enforce", "shadow"; "?" for a value out of range. */
const char *dbt_mode_name(int mode);
/* The kinds' word for a mode (DBTHROTTLE_MODE=queries=shadow): "queries", "connections". */
const char *dbt_mode_kind_word(int kind);
/* A mode value as DBTHROTTLE_MODE spells it: "enforce" or "shadow" when it names both kinds
 * alike, else "queries=shadow", "queries=shadow,connections=enforce"... */
void dbt_mode_show(const dbt_mode mode[DBT_MODE_KINDS], unsigned named, char *out, size_t cap);

/* Copies text for a one-line message (log.c): control bytes escaped (\n, \t, \r, \xNN), cut after
 * `max` bytes with "...". When `quoted`, wraps it in double quotes and escapes '"' and '\\' too. */
void dbt_escape(const char *text, size_t max, bool quoted, char *out, size_t cap);

/* Writes `SETTING: bad value "TEXT": EXPECTED` into err (the value escaped and cut at 64 bytes);
 * returns false so parsers can `return dbt_bad_value(...)`. */
bool dbt_bad_value(const char *setting, const char *text, const char *expected, char *err);

#endif
