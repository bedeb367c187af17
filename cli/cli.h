/* cli.h - what the subcommands of the dbthrottle command share.
 *
 * The command is a client of the same code as the library: the configuration parser, the Redis
 * connection and the scripts come from preload/ (libdbthrottle-core.a); nothing is written twice.
 * Exit codes: 0 done, 1 failed (Redis, a bad setting, nothing found), 2 bad usage. */
#ifndef DBT_CLI_H
#define DBT_CLI_H

#include "config.h"
#include "keys.h"
#include "route.h"
#include "script_run.h"
#include "settings.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define EXIT_USAGE 2

/* A subcommand: argv[0] is its name. */
typedef int (*dbt_cmd_fn)(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_top(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_limit(int argc, char **argv);
int cmd_drain(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_evict(int argc, char **argv);
int cmd_clients(int argc, char **argv);
int cmd_set(int argc, char **argv);
int cmd_settings(int argc, char **argv);
int cmd_mode(int argc, char **argv);
int cmd_forget(int argc, char **argv);
int cmd_class(int argc, char **argv);
int cmd_acquire(int argc, char **argv);
int cmd_exporter(int argc, char **argv);
int cmd_adapt(int argc, char **argv);
int cmd_report(int argc, char **argv);

/* Prints "dbthrottle CMD: MESSAGE (see dbthrottle CMD --help)" and returns EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The usage error for what getopt_long refused ('?'), from its optopt: an unknown option, an
 * option without its value, or a value that begins with '-' (it goes after --). Exit 2. */
struct option;
int cli_option_error(const char *cmd, const struct option *longopts, char **argv);
/* Prints "dbthrottle CMD: MESSAGE" to stderr and returns 1. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The options every command that talks to Redis takes. */
typedef struct {
    const char *redis_url;  /* --redis URL */
    const char *key_prefix; /* --key-prefix P */
} cli_redis_opts;

/* Handles --redis and --key-prefix in a getopt_long loop: true when `opt` was one of them. */
#define CLI_OPT_REDIS      1001
#define CLI_OPT_KEY_PREFIX 1002
bool cli_redis_opt(cli_redis_opts *o, int opt, const char *arg);

/* Loads the settings exactly as the library does (DBTHROTTLE_CONFIG, then DBTHROTTLE_*), then
 * the command line's --redis and --key-prefix. Prints the library's message and returns false on
 * a bad setting. */
bool cli_load_config(const char *cmd, const cli_redis_opts *o, dbt_config *cfg);

/* Connects as the library does; prints the error and returns NULL on failure. */
dbt_redis *cli_connect(const char *cmd, const dbt_config *cfg);

/* Runs a script call on one pool's keys `k`: on r, or with Redis Cluster (cluster.h) on a
 * connection of its own to the primary that serves the pool's slot, its redirections followed as
 * the library follows them (dbt_route_run_for). Returns like dbt_script_run. */
redisReply *cli_pool_script(dbt_redis *r, const dbt_config *cfg, const dbt_keys *k,
                            dbt_script_call *c, dbt_reply_parser parse, void *out, char *err);

/* Runs admin.lua (an operator's control) on one semaphore of the pool: false with a message in
 * err, the script's own refusal included. */
bool cli_admin(dbt_redis *r, const dbt_config *cfg, const char *pool, dbt_kind kind,
               dbt_admin_op op, const char *arg, dbt_admin_reply *out, char *err);

/* Every key that matches the glob `match`, found by SCAN (never KEYS) on r, or with Redis Cluster
 * on every primary: each batch SCAN returns to `each`, with the server it came from (false stops,
 * a message in err). False on failure, a message in err. */
typedef bool (*cli_scan_fn)(dbt_redis *server, const redisReply *keys, void *arg, char *err);
bool cli_scan_keys(const dbt_config *cfg, dbt_redis *r, const char *match, cli_scan_fn each,
                   void *arg, char *err);
/* Every pool with keys under the prefix, found by SCAN (never KEYS), sorted by name; with Redis
 * Cluster, on every primary. Returns the count (names in *out, free with cli_free_names), or -1
 * with a message in err. */
int cli_list_pools(dbt_redis *r, const dbt_config *cfg, char ***out, char *err);
void cli_free_names(char **names, int n);
/* 1 when Redis holds any key of the pool (either kind's semaphore, its processes' records): a
 * worker used it or an operator set it and it has not expired; 0 when none; -1 with a message in
 * err. */
int cli_pool_seen(dbt_redis *r, const dbt_config *cfg, const char *pool, char *err);
/* Refuses (one line, exit 2) an operator's change to a pool Redis has never seen, a typo's
 * likeliest sign, naming the pools that exist; returns -1 to go on (the pool exists, or create). */
int cli_refuse_unknown_pool(const char *cmd, dbt_redis *r, const dbt_config *cfg, const char *pool,
                            bool create);
/* The same for a command that only reads the pool (nothing to --create). */
int cli_refuse_unused_pool(const char *cmd, dbt_redis *r, const dbt_config *cfg, const char *pool);
/* "the pools there: a, b and 3 more" (the first 12), "no pool is there under this key prefix",
 * or why they could not be listed: what a command that was given an unknown pool says. */
#define CLI_KNOWN_POOLS_LEN 1024
void cli_known_pools(dbt_redis *r, const dbt_config *cfg, char *out, size_t cap);

/* ---- before a worker starts (preflight.c) ---------------------------------------------------- */

/* The library dbthrottle run preloads: beside this program (the build tree), in ../lib (an
 * installed prefix), or where make install put it. An absolute path (ld.so ignores a bare name
 * that is not in its search path), so the program may also change directory. */
bool cli_find_library(char *out, size_t cap);
/* True when the library at path loads (dlopen in a child: nothing it does reaches this process);
 * else a one-line reason in err. */
bool cli_check_library(const char *path, char *err);
/* Loads path as cli_check_library does, with ld.so's search for a bare name (as for an
 * LD_PRELOAD entry): true and the file it was found at in resolved (when not NULL), or false and
 * dlerror()'s words in err. */
bool cli_load_library(const char *path, char *resolved, size_t cap, char *err);
/* True when an entry of LD_PRELOAD names a copy of this library (its file name begins with
 * libdbthrottle). */
bool cli_is_our_library(const char *entry);
/* True when the log the settings name (DBTHROTTLE_LOG) opens as the worker will open it, or none
 * is named; else a one-line reason naming the setting in err. Closes it again. */
bool cli_check_log(const dbt_config *cfg, char *err);
/* True when Redis answers with cfg's credentials, is 7.0 or newer (its version in version), will
 * not evict the pools' keys, and lets this user run every command a worker sends, the scripts'
 * own included: a dry run on pool's keys that changes nothing. Else a one-line reason naming what
 * to fix in err, and *permanent says whether it is a configuration error (the library's table,
 * dbt_redis_error_permanent) or an outage that may pass (a refused connection, a timeout,
 * LOADING, BUSY, ...). */
bool cli_check_redis(const dbt_config *cfg, const char *pool, char *version, size_t vcap, char *err,
                     bool *permanent);
/* 1 when Redis persists its data (RDB save points or the append-only file), 0 when a restart
 * loses it, -1 when it cannot tell (message in err). */
int cli_redis_persists(const dbt_config *cfg, char *err);
/* The pool a check's dry run uses when DBTHROTTLE_POOL is not set. */
#define CLI_CHECK_POOL "dbthrottle-check"

/* The version of the library file at path, read from the marker in its text (libversion.c): true
 * with it in out; false with a reason in err (not readable, or no marker: older than 0.15.0). */
bool cli_library_version(const char *path, char *out, size_t cap, char *err, size_t errcap);

/* ---- a pool's state, read by status.lua (view.c) ------------------------------------------ */

typedef struct {
    char *name;
    int64_t now_ms;                   /* Redis' clock when read */
    dbt_status_kind kind[DBT_NKINDS]; /* see script_protocol.h */
    dbt_proc_record *procs;           /* the processes that use it (their live records) */
    int nprocs;
    bool missing;   /* named, but no key of it in Redis (status --prometheus leaves it out) */
    char *settings; /* its live settings' text (dbthrottle set), NULL none */
} cli_pool_view;

/* One value of a live-able setting in force in a pool's processes (in_force.c): the value as
 * its row shows it, where it came from ("live", "environment", "file", "default"), and in how
 * many processes. */
typedef struct {
    char value[256];
    char from[24];
    int processes;
} cli_in_force;
/* The values of row in force in v's processes, most processes first (a tie: by value, then by
 * where from), at most cap: live is the pool's live settings as Redis holds them (NULL: none).
 * Returns how many. */
int cli_in_force_of(const cli_pool_view *v, const dbt_live *live, const dbt_setting *row,
                    cli_in_force *groups, int cap);

/* ,"live_settings": ..., "settings_in_force": ...: a pool's live settings as Redis holds them,
 * where its processes stand with them, and the values in force (status --json, settings --json).
 */
void cli_json_settings(FILE *out, const cli_pool_view *v);

/* How long the pool has been idle (ms: its least idle kind, by status.lua's idle_ms); 0 in use,
 * -1 not known (no counters). */
int64_t cli_pool_idle_ms(const cli_pool_view *v);
/* The listing commands' idle filter (status, top, exporter; not for pools named): drops from v
 * (freed, the rest moved up) every pool idle for longer than after_ms that no live process record
 * names, counting them in *hidden; the new count. after_ms 0: none dropped. */
int cli_hide_idle(cli_pool_view *v, int n, int64_t after_ms, int *hidden);
/* --idle-after's value: a duration ("1h"), or "off" (0). */
bool cli_parse_idle_after(const char *text, int64_t *ms, char *err);
/* Its default: a pool nobody used for an hour is left out of listings. */
#define CLI_IDLE_AFTER_DEFAULT "1h"

/* Reads a pool's state in one round trip. max_rows: holders and waiters listed per semaphore
 * (0 = all). False with a message in err. */
bool cli_view_pool(dbt_redis *r, const dbt_config *cfg, const char *pool, int max_rows,
                   cli_pool_view *v, char *err);
void cli_view_free(cli_pool_view *v);
/* The limit in force: the override, else the last acquirer's; 0 when unknown. */
long long cli_effective_limit(const dbt_status_kind *k);

/* Who sets a semaphore's override, as its PTTL and the adaptive controller's record say
 * (docs/design.md's "An adaptive limit"): the controller sets the override with a TTL and renews
 * it while it leads; an operator's (dbthrottle limit) has none. */
typedef enum {
    CLI_ADAPT_NONE,     /* no record, no override with a TTL: nothing adaptive to say */
    CLI_ADAPT_STOPPED,  /* a record of a controller that leads no more, no override of its own */
    CLI_ADAPT_LEADING,  /* a controller leads and the override is its own (adaptive) */
    CLI_ADAPT_GONE,     /* the override has a TTL, but no controller leads: it lapses */
    CLI_ADAPT_OPERATOR, /* a controller leads, but an operator set the override by hand */
    CLI_ADAPT_WAITING,  /* a controller leads, with no override in force (none set yet) */
    CLI_ADAPT_UNKNOWN,  /* the record cannot say whether its controller leads (unreadable) */
} cli_adapt_state;
cli_adapt_state cli_adapt_of(const dbt_status_kind *k, int64_t now_ms);
/* The state's name in --json: "adaptive", "gone", "operator", ...; NULL for CLI_ADAPT_NONE. */
const char *cli_adapt_name(cli_adapt_state s);

/* Reads the named pools (or every pool when n == 0). Returns the count, or -1 with a message in
 * err. */
int cli_view_pools(dbt_redis *r, const dbt_config *cfg, char **names, int n, int max_rows,
                   cli_pool_view **out, char *err);
void cli_views_free(cli_pool_view *v, int n);
/* Whether the pool of a view has any key in Redis: 1 yes, 0 none (it never existed, or every
 * key expired), -1 with a message in err. Asks Redis only when the view shows nothing. */
int cli_pool_exists(dbt_redis *r, const dbt_config *cfg, const cli_pool_view *v, char *err);
/* Reads the pools as cli_view_pools, on *r (connected first when NULL or stale; may be left NULL),
 * all of it within one DBTHROTTLE_REDIS_TIMEOUT budget. How long it took in *seconds. False with
 * a message in err. */
bool cli_read_pools(const dbt_config *cfg, dbt_redis **r, char **names, int n, int max_rows,
                    cli_pool_view **out, int *count, double *seconds, char *err);

/* ---- output (render.c) ---------------------------------------------------------------------- */

/* What the idle filter left out of a listing (cli_hide_idle): how many pools, idle for longer
 * than after_ms. */
typedef struct {
    int pools;
    int64_t after_ms;
} cli_hidden_idle;

/* The table that status prints and top refreshes. max_rows limits the listed holders and
 * waiters per semaphore (0 = all). hidden: what the idle filter left out (NULL: nothing). */
void cli_render_text(FILE *out, const cli_pool_view *v, int n, const char *prefix,
                     const cli_hidden_idle *hidden);
/* One semaphore's classes (definitions and use), as status, top and dbthrottle class print
 * them; nothing when it has no definitions. */
void cli_render_classes(FILE *out, const dbt_status_kind *k);
/* One line, loud, when its stored definitions are not what is in force (not valid, or over
 * DBT_MAX_CLASSES classes); nothing otherwise. */
void cli_render_classes_problem(FILE *out, const dbt_status_kind *k);
/* status --json: documented in dbthrottle(1), stable (version 1). */
void cli_render_json(FILE *out, const cli_pool_view *v, int n, const char *prefix,
                     const cli_hidden_idle *hidden);
/* status --prometheus and exporter (prom.c): the text exposition format. n < 0: Redis could not
 * be read (dbthrottle_up 0, and only the series that need no Redis). scrape_seconds: how long
 * reading took. */
void cli_render_prometheus(FILE *out, const cli_pool_view *v, int n, double scrape_seconds);
/* A process record's state: as it says, or, when it has been silent longer than it promised,
 * what its on_redis_error mode makes it do cut off (reason says why). */
const char *cli_record_state(const dbt_proc_record *r, int64_t now_ms, char *reason, size_t cap);

/* ---- names and numbers (text.c) ------------------------------------------------------------ */

/* A JSON string, always valid (control bytes as \u00XX, bytes that are not UTF-8 as U+FFFD). */
void cli_json_str(FILE *out, const char *s);

/* A sample value without float noise (status --prometheus, the exporter, the histogram bounds):
 * the shortest text that reads back as v ("1.061"), integers without an exponent, "+Inf", "NaN". */
void cli_prom_number(double v, char *out, size_t cap);
/* Length of the valid UTF-8 sequence at s (1-4), or 0 when the bytes there are not one. */
int cli_utf8_len(const unsigned char *s);
/* s, then blanks up to `width` columns, counting a UTF-8 character as one column (printf's
 * "%-20s" counts bytes: a name with "é" pushed the columns after it). */
void cli_put_padded(FILE *out, const char *s, int width);
bool cli_utf8_valid(const char *s);
/* A name for a line of text: as dbt_escape (control bytes escaped, cut after max bytes with
 * "...", quoted on request), and bytes that are not UTF-8 shown as \xNN too. */
void cli_escape_name(const char *text, size_t max, bool quoted, char *out, size_t cap);
/* The bytes of text in lowercase hex (JSON's name_raw): cap >= 2 * strlen + 1 for all of it. */
void cli_hex(const char *text, char *out, size_t cap);
/* One process of the fleet, over every pool it uses (render.c): its records joined by client id,
 * its state as the records and their age say. */
typedef struct {
    const dbt_proc_record *rec; /* the most recently seen of its records */
    const char *pools[64];      /* the pools it uses (views' names) */
    const char *groups[64];     /* the host group it shares each of them with (NULL: none) */
    long long live[64];         /* the live settings' version it applied in each (-1: not said) */
    int npools;
    const char *state; /* throttling, unthrottled, refusing, disabled */
    char reason[320];
    int64_t silent_ms; /* since its last report, by Redis' clock */
    unsigned long long unthrottled, refused, timeouts, outage_unthrottled, outage_refused;
    long long outage_since_ms, outage_until_ms;
    long held, waiting, idle_in_tx;
} cli_process;
/* The processes of the views, in host and pid order (free with free()); the count, -1 when out
 * of memory. */
int cli_processes(const cli_pool_view *v, int n, cli_process **out);

/* ---- the limits the workers configured (limits_in_use.c) ------------------------------------ */

/* One limit the live holders' and waiters' ids of a semaphore carry, and the processes they name
 * (the first 16; nprocs counts all). */
typedef struct {
    long limit;
    const dbt_status_proc_count *procs[16];
    int nprocs;
} cli_limit_use;
/* The limits in use in k, ascending (at most cap); more than one: the workers disagree. */
int cli_limits_in_use(const dbt_status_kind *k, cli_limit_use *out, int cap);
/* The status table's line when they disagree (nothing when they agree). */
void cli_render_limits_in_use(FILE *out, const dbt_status_kind *k);
/* The kind's "limits_in_use" member of --json: [{limit, processes: [{host, pid}], process_count}].
 */
void cli_json_limits_in_use(FILE *out, const dbt_status_kind *k);

/* ---- host-level sharing as status shows it (host_groups.c) ---------------------------------- */

/* A host group of a pool: processes of one host that pass permits among themselves. */
typedef struct {
    const char *group; /* G, 16 hex digits */
    const char *host;  /* the host of its first process */
    int processes;     /* how many of the pool's live records name it */
} cli_host_group;
/* The host groups the pool's process records name, in the order first named (at most cap). */
int cli_host_groups(const cli_pool_view *v, cli_host_group *out, int cap);

/* Who a semaphore's sole owner (owners['*']) is: nobody, a host group, a process, or an owner no
 * record names (a process that has not reported yet). */
typedef enum { CLI_SOLE_NONE, CLI_SOLE_HOST, CLI_SOLE_PROCESS, CLI_SOLE_UNKNOWN } cli_sole_kind;
typedef struct {
    cli_sole_kind kind;
    char owner[80];             /* the group G or the process' cid, without the shape */
    char shape[80];             /* "<class>.<weight>" of a tagged shape, "" */
    const dbt_proc_record *rec; /* the process (PROCESS) or one of the group's (HOST), or NULL */
} cli_sole;
void cli_sole_of(const cli_pool_view *v, const dbt_status_kind *k, cli_sole *out);

/* "1.2s", "350ms", "3m05s", "2h10m". */
void cli_duration(int64_t ms, char *out, size_t cap);

#endif
