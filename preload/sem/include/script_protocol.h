/* script_protocol.h - the C side of the Lua scripts' protocol (the scripts in lua/), in one place:
 * what each script takes (argument builders) and what it answers (reply parsers), by name rather
 * than by position. The positions are those of lua/protocol/NAME.def, each script's one table: the
 * build makes from it both the scripts' Lua names and the C names here (protocol.h), so that the
 * two sides cannot drift apart.
 *
 * Pure: no I/O, no locks. A builder fills a dbt_script_call that dbt_script_run (script_run.h)
 * sends; a parser reads a redisReply into a struct, and on a reply of the wrong shape (element
 * count, element type, nil, an error reply) returns false with a one-line message in err (at
 * least DBT_ERRLEN bytes) rather than reading past what is there. The library and the dbthrottle
 * command use the same builders and parsers, so the two cannot drift apart. */
#ifndef DBT_SCRIPT_PROTOCOL_H
#define DBT_SCRIPT_PROTOCOL_H

#include "config.h"
#include "keys.h"
#include "protocol.h" /* made from lua/protocol/NAME.def: DBT_ARG_*, DBT_<SCRIPT>_ARG_*, the constants */
#include "scripts.h"

#include <hiredis.h>
#include <stdbool.h>
#include <stdint.h>

/* ---- arguments ------------------------------------------------------------------------------ */

/* ARGV[1..DBT_BASE_ARGS] (DBT_ARG_*, lua/protocol/_common.def) are the same for every script; a
 * script's own come after. The era's five (docs/design.md, "Failover and data loss") are set when
 * the call is sent on a connection (dbt_script_bind_era): until then they say "no era check". */

/* How far Redis' clock (ms) is ahead of this process' monotonic one, as read from server run_id
 * at at_us (dbt_now_us; 0: never): an upper bound, a Redis time a reply carried minus this
 * process' time before its call was sent. */
typedef struct {
    char run_id[41];
    int64_t ahead_ms, at_us;
} dbt_redis_clock;

/* The most arguments of a script call with a fixed count (adapt.lua's lease, the longest). */
#define DBT_CALL_MAX_FIXED_ARGS (DBT_BASE_ARGS + 10)

/* One script call, ready to send: the script, its keys (one semaphore, or both kinds' for
 * renew.lua and status.lua) and its arguments, with the text of the numbers it formats. Points
 * into the dbt_keys and strings it was built from, which must outlive it. */
typedef struct {
    const dbt_script *script;
    const char *keys[2 * DBT_NKEYS + 2]; /* + the process registry's two (renew, status) */
    int nkeys;
    const char **args; /* fixed_args, or the caller's array (renew.lua: one per id) */
    int nargs;
    const char *fixed_args[DBT_CALL_MAX_FIXED_ARGS];
    int64_t lease_ms; /* the lease it carries (the config's, or dbt_script_set_lease's) */
    char lease[24], ttl[24], number[8][24]; /* adapt.lua's lease formats 7 */
    char id_count[DBT_NKINDS * 2][16];      /* renew.lua: how many ids of each list */
    char record_ttl[24];
    char live_version[24];                /* renew.lua's live group (dbt_renew_add_live) */
    char quarantine[24], era_started[24]; /* the era's numbers, as text */
    char era_prev[41];                    /* the pool's last run_id (the caller sets it) */
    char era_token[41];                   /* the run_id it was sent with (dbt_script_bind_era) */
    char adopt[48]; /* the adopt token it was sent with, when its connection had one */
    /* renew.lua's until argument (dbt_renew_add_until): until when, on the clock of the server it
     * is sent to, the leases it names may still be believed in by the process; set from until_us
     * (this process' monotonic clock) when it is sent (dbt_script_bind_clock). until_arg: its
     * index in args (0: none). */
    int64_t until_us;
    dbt_redis_clock clock; /* the renewer's latest reading, beside the connection's own */
    int until_arg;
    char until[24];
    int group_at[DBT_RENEW_NGROUPS + 1]; /* renew.lua: where each group starts (dbt_renew_layout) */
} dbt_script_call;

/* Keys live three leases after their last use: long enough that a live holder's renewal
 * (every lease/3) always finds them, short enough that an idle pool leaves nothing behind. */
int64_t dbt_key_ttl_ms(const dbt_config *cfg);

/* Q, a quarantine (docs/design.md, "Failover and data loss"): the longest a live holder may
 * take to re-assert its permits once a new server answers, one renewal period plus one failed
 * attempt: lease/3 + DBTHROTTLE_REDIS_TIMEOUT + 1 s (the renewer's retry). */
int64_t dbt_quarantine_ms(const dbt_config *cfg);
/* The same for a lease other than the config's (a pool's live lease). */
int64_t dbt_quarantine_for_ms(int64_t lease_ms, const dbt_config *cfg);

/* A built call (acquire, release, cancel, renew) made to carry lease_ms and the keys' TTL that
 * goes with it, and the Q of longest_ms, the longest lease a permit of the process may still
 * carry (a pool's live lease changed lately: lease.c). */
void dbt_script_set_lease(dbt_script_call *c, int64_t lease_ms, int64_t longest_ms,
                          const dbt_config *cfg);

/* The DBT_BASE_ARGS arguments every script takes first, into args[0..DBT_BASE_ARGS-1]; lease and
 * ttl are caller buffers of 24 bytes. The era's are "no era check" (see dbt_script_bind_era). */
void dbt_script_args(const dbt_keys *k, dbt_kind kind, const dbt_config *cfg, char *lease,
                     char *ttl, const char **args);

/* The era of the server c is sent to (called just before sending, on the connection's values):
 * its run_id (copied into c->era_token) and start (ms); the process' last run_id for the pool
 * is c->era_prev. */
void dbt_script_bind_era(dbt_script_call *c, const char *run_id, int64_t started_ms);

/* renew.lua's until (dbt_renew_add_until) on the clock of server run_id, whose connection read
 * INFO's clock (conn_ahead_ms, conn_at_us: dbt_redis's clock_ahead_ms, clock_at_us) or c's own
 * reading of that server, the fresher, at now_us; "" (no claim: any id missing is evidence of
 * loss) when neither is of that server. */
void dbt_script_bind_clock(dbt_script_call *c, const char *run_id, int64_t conn_ahead_ms,
                           int64_t conn_at_us, int64_t now_us);

/* Who holds or waits, for dbthrottle status: "<host> <pid> <conn>" (conn "-" when NULL or ""),
 * control bytes made '_' (so that it never holds a separator). DBT_WHO_LEN holds any. */
#define DBT_WHO_LEN 160
void dbt_format_who(const char *host, long pid, const char *conn, char *out, size_t cap);

/* acquire.lua: take a permit now, or join the queue (try_only: never queue). who: "<host> <pid>
 * <conn>" (dbt_format_who), for dbthrottle status. session: the database session the permit is for,
 * as dbt_format_session makes it (NULL or "": none). shipped_classes: the class definitions the
 * process ships (DBTHROTTLE_CLASSES as definition text,
 * "aging=<ms>;default=<name>;<name>:<share>:<priority>: <wait_ms>:<cap>;..."), in force while the
 * operator has defined none; NULL or "": none. */
typedef struct {
    const char *id;
    int limit;
    bool try_only;
    const char *who;
    const char *shipped_classes;
    const char *session;
    bool shadow; /* DBTHROTTLE_MODE=shadow: granted whatever the limit; the reply says "would" */
} dbt_acquire_call;

void dbt_build_acquire(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                       const dbt_acquire_call *a);

/* release.lua and cancel.lua take the permit's (or the waiter's) id. A release says how long its
 * holder held the permit (held_ms; -1 not known: Redis counts from the permit's grant), for the
 * hold histogram; a cancel whether its waiter gave up (counted as cancelled) or the place is only
 * not needed any more (cancel.def). */
void dbt_build_release(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                       const char *id, int64_t held_ms);
void dbt_build_cancel(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                      const char *id, bool gave_up);
/* sample.lua: a chunk of the process' holds for the command sample (sample.c formats holds: one
 * line per hold, nholds of them, as sample.def says); dropped: the holds not kept since the last
 * chunk. */
void dbt_build_sample(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                      const char *cid, uint64_t first, int nholds, const char *holds,
                      uint64_t dropped, int64_t built_us, const char *clock);

/* What local handover did without Redis, per kind, until a renewal adds it to the counters
 * (renew.lua's last arguments). */
typedef struct {
    uint64_t grants, queued;
    int64_t wait_us;
} dbt_local_counts;

/* The ids a renewal names, per kind: held permits, then queued waiters. */
typedef struct {
    char **ids;
    int n, cap;
} dbt_id_list;
enum { DBT_RENEW_HELD, DBT_RENEW_QUEUED, DBT_RENEW_LISTS };

/* renew.lua's arguments (lua/protocol/renew.def): the four counts, then its groups in order, each
 * at the place dbt_renew_layout gives (the ids, the local counts: dbt_build_renew; the record:
 * dbt_renew_add_record; the doings: dbt_renew_add_doing; the local waits:
 * dbt_renew_add_local_hist; until: dbt_renew_add_until, to be called in that order). */

/* The arguments dbt_build_renew fills for `nids` ids in all (the counts, the ids, the local
 * counts). */
#define DBT_RENEW_NARGS(nids)                                                                      \
    (DBT_RENEW_ARG_REST + (nids)*DBT_RENEW_IDS_SIZE + DBT_NKINDS * DBT_RENEW_COUNTS_SIZE)
/* How many arguments renew.lua takes for these lists (NULL: none) with every group added
 * (DBT_RENEW_NARGS_FIXED for none). */
int dbt_renew_nargs(dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS]);

/* renew.lua: renews the ids of both kinds (lists NULL: none, a renewal of nothing for its counts)
 * and adds local[] to the counters. args: DBT_RENEW_NARGS(total ids) entries, or
 * dbt_renew_nargs(lists) for a call the dbt_renew_add_* complete; kept by c. A group added after
 * one left out puts "" in the places of those left out. */
void dbt_build_renew(dbt_script_call *c, const dbt_keys *k, const dbt_config *cfg,
                     dbt_id_list lists[DBT_NKINDS][DBT_RENEW_LISTS],
                     const dbt_local_counts local[DBT_NKINDS], const char **args);

/* A process' record in the pool's registry (renew.lua writes it, status.lua reads it): who it
 * is, and whether it throttles. Sent as one line of tab-separated fields (dbt_format_record);
 * renew.lua puts Redis' clock in front ("<seen ms>\t<record>"). */
typedef struct {
    char host[64];
    long pid, ppid, pgid;
    char program[64];
    char version[32];
    char state[16];   /* "throttling", "refusing" (a permanent error), "disabled", "shadow" */
    char mode[8];     /* on_redis_error: "open" or "closed" */
    char reason[256]; /* why it refuses; "" */
    unsigned long long unthrottled, refused, timeouts; /* since the process began */
    long long outage_since_ms, outage_until_ms; /* the last outage, wall clock; 0: none; until
                                                 * 0: it lasts */
    unsigned long long outage_unthrottled, outage_refused;
    long long every_ms;             /* how often the process reports */
    long long silent_after_ms;      /* not heard from this long: cut off from Redis, or gone */
    long held, waiting, idle_in_tx; /* permits held, waiting, held idle in a transaction */
    long long seen_ms;              /* Redis' clock when last reported (read back only) */
    long long expiry_ms;            /* when the record expires (read back only) */
    char cid[17];                   /* read back only */
    /* The host group G (16 hex digits) whose processes pass permits of this pool among
     * themselves (host-level sharing), "" when the process does not share. After the numbers, so
     * that a reader of an older version, which stops at them, still reads the record. */
    char group[17];
    /* The version of the pool's live settings the process applied (0: none; -1: not said, a
     * record of an older version, which does not apply them), and the keys of it its parser
     * refused ("wait_timeout,lease"; "" none). After the group (written then, "" or not). */
    long long live_version;
    char live_refused[128];
    /* Its own values of the live-able settings and where each came from (dbt_live_own_format),
     * "" not said: dbthrottle settings shows the values in force. */
    char own[384];
} dbt_proc_record;

/* The record's text (without seen_ms), fields made safe (a tab or a control byte becomes '_').
 * Returns false when out is too small. */
bool dbt_format_record(const dbt_proc_record *r, char *out, size_t cap);
/* Reads "<seen ms>\t<record>" back; false when it is not one (an older or newer format). */
bool dbt_parse_record(const char *text, dbt_proc_record *r);

/* One connection of a process, as dbthrottle clients shows it (registry.c makes them). */
typedef struct {
    char conn[24];    /* "c<N>", as the trace and the holders name it */
    char state[16];   /* DBT_CLIENT_* */
    long long for_ms; /* how long it has been in that state (-1: not known, as for idle) */
    long long age_ms; /* since the library first saw it (its first command) */
    char app[64];     /* application_name, cut short */
    char server[128]; /* "<server>/<database>", as the default pool name spells it */
} dbt_client_row;

#define DBT_CLIENT_RUNNING "running" /* holds a permit for a command */
#define DBT_CLIENT_IDLE_TX "idle_tx" /* holds one idle inside a transaction */
#define DBT_CLIENT_KEPT    "kept"    /* keeps one between commands (kept permits) */
#define DBT_CLIENT_WAITING "waiting" /* waits for a permit */
#define DBT_CLIENT_EXEMPT  "exempt"  /* an exempt connection: takes no permit, idle or not */
#define DBT_CLIENT_IDLE    "idle"    /* none of those */
#define DBT_CLIENTS_SHOWN  50        /* the most rows a process reports (the busy first) */
#define DBT_CLIENTS_MAX    (64 + DBT_CLIENTS_SHOWN * 300)

/* The connections' text: "c1\t<known>" then one line per row, fields tab-separated and made safe
 * (a tab or a control byte becomes '_'); `known` counts those not shown too. False when out is
 * too small. */
bool dbt_format_clients(const dbt_client_row *rows, int n, long known, char *out, size_t cap);
/* Reads it back into up to cap rows: how many, or -1 when it is not that format. */
int dbt_parse_clients(const char *text, dbt_client_row *rows, int cap, long *known);

/* The record's arguments. */
#define DBT_RENEW_RECORD_ARGS DBT_RENEW_RECORD_SIZE
/* Adds the process record to a built renewal (GROUP record): the registry's keys, the client id,
 * the record's text, how long it lives (ms), and whether the process leaves (goodbye: the record is
 * removed). */
void dbt_renew_add_record(dbt_script_call *c, const dbt_keys *k, const char *cid,
                          const char *record, int64_t ttl_ms, bool goodbye);
/* Its connections' text beside it (dbt_format_clients; "" by default: none kept). */
void dbt_renew_add_clients(dbt_script_call *c, const char *clients);

/* What the holders named by a renewal do now, one argument per held id, in the order of the
 * renewal's held ids (the query kind's, then the connection kind's), made by dbt_format_doing:
 * "<state letter>\x1f<session>[\x1f<who>[\x1f<held ms>]]", the letter 'r' running a command, 'i'
 * idle in a transaction, 'k' kept between commands, '-' unchanged; session "" leaves the one Redis
 * has; who (dbt_format_who; NULL or "": not sent) is the holder now, which differs from the
 * acquirer's when the permit was passed to another connection or process, and held_ms (-1: not
 * sent) how long that holder has held it. renew.lua rewrites a holder's info only when they
 * differ from it; a new who takes its since from held_ms (HELD is that holder's own time). */
#define DBT_DOING_LEN (2 + DBT_SESSION_LEN + 1 + DBT_WHO_LEN + 21)
void dbt_format_doing(char state, const char *session, const char *who, int64_t held_ms, char *out,
                      size_t cap);
/* Adds them to a renewal that has its record (dbt_renew_add_record), after those added before
 * (GROUP doing: one per held id it names; more are not sent). */
void dbt_renew_add_doing(dbt_script_call *c, char *const *doing, int n);

/* status.lua: both kinds' state, at most max_rows holders and waiters each (0: all). */
void dbt_build_status(dbt_script_call *c, const dbt_keys *k, int max_rows);

/* admin.lua: the operator's controls (dbt_admin_op: lua/protocol/admin.def); arg NULL for those
 * that take none. */
void dbt_build_admin(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                     dbt_admin_op op, const char *arg);

/* adapt.lua: the adaptive controller's (dbthrottle adapt) lease on one semaphore, and the limit it
 * sets while it holds it (lua/adapt.lua; dbt_adapt_op: lua/protocol/adapt.def). */
typedef struct {
    dbt_adapt_op op;
    const char *token; /* "<host>:<pid>:<16 hex>", one per controller process */
    /* lease: what the record says of the controller */
    int64_t lease_ms;
    const char *host;
    long pid;
    int min, max;
    int64_t ttl_ms, interval_ms, window_ms;
    /* set */
    int limit;
    const char *reason; /* one line */
} dbt_adapt_args;
/* Builds the call for a->op; the strings a names must outlive c. */
void dbt_build_adapt(dbt_script_call *c, const dbt_keys *k, dbt_kind kind, const dbt_config *cfg,
                     const dbt_adapt_args *a);

/* ---- replies -------------------------------------------------------------------------------- */

/* A parser: reads r into *out; false with a message in err when r is not what the script
 * answers. */
typedef bool (*dbt_reply_parser)(const redisReply *r, void *out, char *err);

/* acquire.lua's reply (its fields and dbt_acquire_status: lua/protocol/acquire.def). */
typedef struct {
    dbt_acquire_status status;
    long long holders, queue;
    long long limit_seen;    /* the previous acquirer's limit when it differs from ours, else 0 */
    long long ticket;        /* queued: its place in the queue; granted: the ticket counter then */
    bool sole;               /* queued: the queue holds this process' waiters only */
    long long quarantine_ms; /* the semaphore's quarantine: ms left (0: none) */
    char why[16];            /* and why: "changed", "restarted", "lost" ("" none) */
    char class_name[33];     /* the class the caller was served as; "" when none is defined */
    long long class_wait_ms; /* its wait timeout (replaces DBTHROTTLE_WAIT_TIMEOUT); -1 none */
    long long class_cap;     /* its queue cap; -1 none */
    dbt_acquire_would would; /* shadow: what enforcing would have done (RUN from older scripts) */
} dbt_acquire_reply;
bool dbt_parse_acquire(const redisReply *r, void *out /* dbt_acquire_reply */, char *err);

/* release.lua: whether the permit was still held (else it had expired, or was released). */
bool dbt_parse_release(const redisReply *r, void *out /* bool */, char *err);

/* cancel.lua's outcome (dbt_cancel_outcome: lua/protocol/cancel.def). */
bool dbt_parse_cancel(const redisReply *r, void *out /* dbt_cancel_outcome */, char *err);
/* sample.lua's reply: the members the sample holds now. */
bool dbt_parse_sample(const redisReply *r, void *out /* long long */, char *err);

/* A list of ids inside a reply (valid while the reply is): every element is a string. */
typedef struct {
    redisReply *const *items;
    size_t n;
} dbt_reply_ids;
static inline const char *dbt_reply_id(const dbt_reply_ids *l, size_t i)
{
    return l->items[i]->str;
}

/* The room of renew.lua's sole owner: "<cid or G>/<class>.<weight>" at its longest and a NUL. */
#define DBT_SOLE_OWNER_MAX 64
/* Lost holder i of renew.lua's reply: its id, and in *mark how the operator evicted it
 * (DBT_EVICTED_PLAIN or DBT_EVICTED_CANCEL: renew.lua's "<mark>:<id>"), or 0 (lost). */
const char *dbt_renew_lost_holder(const dbt_reply_ids *lost, size_t i, char *mark);

/* renew.lua's reply (its fields: lua/protocol/renew.def; without now: a reply of the scripts
 * before it). Points into the reply: free the reply after using it. */
typedef struct {
    dbt_reply_ids lost_holders;          /* ids Redis no longer holds */
    dbt_reply_ids lost_waiters;          /* ids Redis no longer has queued nor granted */
    dbt_reply_ids granted_waiters;       /* waiters Redis already granted */
    long long queue[DBT_NKINDS];         /* queue length */
    bool handover_allowed[DBT_NKINDS];   /* not while drained or held above the limit */
    long long quarantine_ms[DBT_NKINDS]; /* quarantine: ms left (0: none) */
    char why[DBT_NKINDS][16];            /* and why (see dbt_acquire_reply) */
    long long reasserted[DBT_NKINDS];    /* ids Redis lacked, added back (holders) or queued
                                          * again (waiters) */
    /* The owner whose waiters were the whole queue when it last queued one (OWN['*']: a cid, a
     * host group G, either with "/<class>.<weight>" for a tagged shape), "" none. Longer ones
     * (not of this library) are cut, so never equal to one of ours. */
    char sole_owner[DBT_NKINDS][DBT_SOLE_OWNER_MAX];
    long long now_ms; /* Redis' clock when it ran (ms; 0: a script before it said) */
    /* The renewing owner's share of the limit (-1: none in force, or a script before shares
     * said nothing) and the units it holds (docs/design.md, "Shares"). */
    long long share[DBT_NKINDS];
    long long held[DBT_NKINDS];
    /* The pool's live settings' text ("" none) when their version is not the one the renewal
     * said the process applied; NULL: unchanged (or a script before live settings). */
    const char *live;
} dbt_renew_reply;
bool dbt_parse_renew(const redisReply *r, void *out /* dbt_renew_reply */, char *err);

/* The counters of one semaphore's stats hash, as status.lua reports them. */
enum {
    DBT_CTR_GRANTS,
    DBT_CTR_QUEUED,
    DBT_CTR_REFUSED,
    DBT_CTR_CANCELLED,
    DBT_CTR_EXPIRED,
    DBT_CTR_EVICTED,
    DBT_CTR_WAIT_MS,
    DBT_CTR_QUARANTINES,  /* quarantines entered (docs/design.md, "Failover and data loss") */
    DBT_CTR_REASSERTED,   /* holders Redis lacked that their process re-asserted */
    DBT_CTR_REQUEUED,     /* waiters Redis lacked that were queued again */
    DBT_CTR_CLAMPED,      /* grants of a weight above the limit, cut to the limit (ran alone) */
    DBT_CTR_CAPPED,       /* refused by their class' queue cap */
    DBT_CTR_AGED,         /* grants made by the aging rule, whatever the waiter's class */
    DBT_CTR_WOULD_WAIT,   /* shadow grants that enforcing would have queued */
    DBT_CTR_WOULD_REFUSE, /* shadow grants that enforcing would have refused */
    DBT_NCOUNTERS
};
extern const char *const dbt_counter_names[DBT_NCOUNTERS]; /* the fields of the stats hash */

/* A holder or a waiter: "<since> <host> <pid> <conn>" then "\x1f"-separated state, class and
 * session (backend pid, application_name, user, database) as the scripts record it; fields stay
 * empty when absent. */
typedef struct {
    char *permit;
    char host[64];
    long pid;
    char conn[64];
    int64_t since_ms;  /* granted (holder) or queued (waiter), Redis clock */
    int64_t expiry_ms; /* holder: when its lease runs out; waiter: 0 */
    int weight;        /* from the id: its units (1 for an untagged id) */
    char klass[33];    /* from the id: the class it names ("-" the default one; "" untagged) */
    /* The session behind it (issue 18; empty/0 when an older worker or a connection permit taken
     * before the session existed does not say): what it does now, as of its process' last
     * renewal ("running" a command, "idle_tx" idle in a transaction, "kept" between commands;
     * waiters: ""), and what joins it with pg_stat_activity. */
    char state[12];
    long backend_pid;
    char app[64], user[64], db[64];
} dbt_status_entry;

/* One histogram of a semaphore (issue 18), kept by the scripts in Redis: how long waiters waited
 * for a grant ('w', from queued to granted by Redis' clock; 0 for a grant at once) or permits
 * were held ('h', from grant to release, cancel, eviction or expiry), per class ("" when the pool
 * has no classes). Buckets are NOT cumulative; their bounds are the kind's hist_bound_ms. */
#define DBT_HIST_MAX 24
typedef struct {
    char series; /* 'w' or 'h' */
    char klass[33];
    long long bucket[DBT_HIST_MAX]; /* bucket[i]: bound_ms[i-1] < value <= bound_ms[i]; the
                                     * last (index nbounds) is above every bound (+Inf) */
    long long sum_ms, count;
} dbt_status_hist;

/* The waits local handover granted without Redis (handover.c), per kind, for the wait histogram:
 * per class tag of the permits ("" untagged, "-" the default class) the count in each bucket and
 * the sum (ms). A renewal adds them to Redis' (dbt_renew_add_local_hist); renew.lua names the
 * class each tag is served as. At most DBT_LOCAL_HIST_TAGS tags per renewal period. */
#define DBT_LOCAL_HIST_TAGS 4
typedef struct {
    struct {
        char tag[33];
        uint32_t bucket[DBT_HIST_MAX];
        int64_t sum_ms;
    } tag[DBT_LOCAL_HIST_TAGS];
    int ntags;
} dbt_local_hist;

/* The histograms' bucket bounds as the scripts have them (lua/_common.lua's HIST_BOUNDS, read from
 * the compiled-in text: one list): how many, at most cap (0: not found). */
int dbt_hist_bounds(double *out, int cap);
/* Adds one wait (ms) of a permit of class tag `tag` to h, bucketed by bounds[0..nbounds-1]; false
 * when h has no room for another tag (the wait is then counted in grants and wait_ms only). */
bool dbt_local_hist_add(dbt_local_hist *h, const double *bounds, int nbounds, const char *tag,
                        int64_t ms);
/* Adds b to a (a renewal that failed: b is reported with the next). */
void dbt_local_hist_merge(dbt_local_hist *a, const dbt_local_hist *b);
/* h as renew.lua reads it: "<tag, or . untagged> <sum> <i>:<n> ...", tags separated by ';'.
 * False when out is too small (DBT_LOCAL_HIST_TEXT is enough). */
#define DBT_LOCAL_HIST_TEXT (DBT_LOCAL_HIST_TAGS * (40 + 24 + DBT_HIST_MAX * 16))
bool dbt_format_local_hist(const dbt_local_hist *h, char *out, size_t cap);
/* Adds both kinds' texts to a renewal after its doing args (dbt_renew_add_doing; GROUP waits). */
void dbt_renew_add_local_hist(dbt_script_call *c, const char *const text[DBT_NKINDS]);

/* Adds both kinds' holds that ended in a pass without Redis (dbt_format_local_hist of
 * pool.unreported_holds) to a renewal, after its until (dbt_renew_add_until; GROUP holds). */
void dbt_renew_add_local_holds(dbt_script_call *c, const char *const text[DBT_NKINDS]);
/* The version of the pool's live settings the process applied (0: none): the reply carries their
 * text when Redis' differs (dbt_renew_reply.live). */
void dbt_renew_add_live(dbt_script_call *c, long long version);

/* Adds renew.lua's until argument to a renewal that has its local waits (dbt_renew_add_local_hist;
 * GROUP believed): until_us, the latest time (this process'
 * monotonic clock) until which any lease it names may still be believed in, its last accepted
 * acquire or renewal's send + the lease (0: none named); clock, the renewer's latest reading of
 * Redis' clock (at_us 0: none). Sent as a time on the clock of the server the call reaches
 * (dbt_script_bind_clock), by which renew.lua tells an id whose lease ran out in a stall from
 * one Redis lost (docs/design.md, "Failover and data loss"). */
void dbt_renew_add_until(dbt_script_call *c, int64_t until_us, const dbt_redis_clock *clock);

/* One class of a semaphore's definitions, and its state. */
typedef struct {
    char name[33];
    int share, priority;
    long long wait_ms, cap;   /* -1: none */
    long long guarantee;      /* units, at the override, else the limit seen */
    long long held;           /* units its permits hold */
    long long waiters;        /* queued */
    long long borrowed;       /* units held beyond its guarantee */
    long long oldest_wait_ms; /* how long its first waiter has waited; 0: none waits */
    bool is_default;          /* what no defined class names is served as */
    bool implicit;            /* the implicit default class: no definition names it */
} dbt_status_class;

/* The adaptive controller's record (dbthrottle adapt; lua/adapt.lua keeps it in the hash beside
 * the override, "<override key>:adapt", 7 days after its last write), as status.lua reads it.
 * Every field is text in Redis; a field that is missing or not what it should be is named in
 * `unreadable` and left 0 or "", so that status says so instead of guessing. limit, reason and
 * changed_at are absent until the controller first changes the limit: not unreadable then. */
typedef struct {
    char owner[96];           /* "<host>:<pid>:<16 hex>" of the lease's holder; "" resigned */
    char host[64];            /* the controller's */
    long long pid;            /* the controller's; 0 unknown */
    long long lease_until_ms; /* Redis clock: it leads while owner != "" and this is ahead */
    long long since_ms;       /* when this owner took the lease; 0 unknown */
    long long min, max;       /* the bounds it keeps the limit in; 0 unknown */
    long long limit;          /* the last limit it set; 0 none yet */
    long long changed_at_ms;  /* when it set it (Redis clock); 0 none yet */
    char reason[200];         /* why, one line; "" none yet */
    long long ttl_ms, interval_ms, window_ms; /* the override's TTL it keeps, its period and its
                                               * window; 0 unknown */
    char unreadable[400]; /* "pid missing, min not a positive integer (\"x\")": the fields
                           * missing or malformed, or why the record could not be read at all (a
                           * key of another type); "" all is well */
    bool lease_unknown;   /* owner or lease_until unreadable: whether it leads cannot be told */
} dbt_status_adapt;

/* Whether the controller of record a leads at now_ms: an owner and a lease not yet run out. */
bool dbt_status_adapt_leads(const dbt_status_adapt *a, int64_t now_ms);

/* What Redis holds for one process of a semaphore now (status.lua's by_process): the permits and
 * places its holders' and waiters' infos name it for (as of the grant, or the process' last
 * renewal, which names the holder of a permit passed without Redis), and how many of those
 * permits are idle in a transaction (as of its last renewal). */
typedef struct {
    char host[64];
    long pid;
    long held, waiting, idle_in_tx;
    /* The limits its holders' and waiters' ids carry, ascending (a process configured for one
     * limit has one; more after a change of its configuration), the first 4. */
    long limits[4];
    int nlimits;
} dbt_status_proc_count;

typedef struct {
    long long limit_seen; /* the limit the last acquirer configured; 0 = none */
    long long override;   /* the operator's; 0 = none */
    bool drained;
    long long nholders, nwaiters; /* live, whole counts */
    dbt_status_entry *holders;    /* oldest grant first */
    int nh;
    dbt_status_entry *waiters; /* queue order */
    int nw;
    long long counters[DBT_NCOUNTERS];
    long long quarantine_ms;   /* in quarantine: ms left (0: none) */
    char why[16];              /* and why: "changed", "restarted", "lost" */
    bool used;                 /* any of the above is there */
    dbt_status_class *classes; /* the class definitions in force (none: NULL, 0) */
    int nclasses;
    long long aging_ms;       /* the aging bound; 0: none */
    bool classes_shipped;     /* from a worker's DBTHROTTLE_CLASSES, not the operator's */
    long long oldest_wait_ms; /* the longest current wait (any class); 0: none waits */
    int nbounds;              /* the histograms' bucket bounds, as status.lua states them */
    double hist_bound_ms[DBT_HIST_MAX];
    dbt_status_hist *hists; /* the histograms with data (none: NULL, 0) */
    int nhists;
    /* Units whose lease ran out but that were never released (a stopped or cut-off holder that
     * may still run), and those permits (oldest grant first); 0 from an older status.lua. */
    long long nlapsed;
    dbt_status_entry *lapsed;
    int nl;
    /* The owner whose waiters are the whole queue (owners['*']: a process' cid, or a host group
     * G, with "/<class>.<weight>" for a tagged shape): it passes permits without Redis. "" none,
     * or from an older status.lua. */
    char sole[80];
    /* The override's PTTL (ms): -2 none, -1 without a TTL (an operator's, set by hand), > 0 with
     * a TTL (an adaptive controller's: it lapses then unless renewed); -2 from an older status.lua
     * too, as for no override. */
    long long override_pttl_ms;
    dbt_status_adapt *adapt; /* the controller's record; NULL when there is none */
    /* What is wrong with the stored class definitions, one line from status.lua ("" nothing, or
     * an older status.lua): not valid (not in force), or over DBT_MAX_CLASSES classes (only the
     * first are in force). */
    char classes_problem[400];
    bool classes_over; /* the operator's hold more than DBT_MAX_CLASSES classes */
    /* Per process, what Redis holds for it (NULL, 0 with nothing live); has_by_proc false from
     * an older status.lua, which did not say. */
    dbt_status_proc_count *by_proc;
    int nby_proc;
    bool has_by_proc;
    bool by_proc_whole; /* it counted every live id (else only the first 1000: a sample) */
    /* How long the semaphore has been idle (ms, by its counters' TTL: within TTL/2 of the truth); 0
     * while anyone holds or waits, -1 without counters or from an older status.lua. */
    long long idle_ms;
} dbt_status_kind;

/* status.lua's reply (its fields: lua/protocol/status.def). Owns its entries (copied out of the
 * reply): free with dbt_status_free, also after a failed parse. */
typedef struct {
    int64_t now_ms; /* Redis' clock when read */
    dbt_status_kind kind[DBT_NKINDS];
    dbt_proc_record *procs; /* the processes whose record has not expired */
    int nprocs;
    char *settings; /* the pool's live settings' text (dbthrottle set); NULL none */
} dbt_status_reply;
bool dbt_parse_status(const redisReply *r, void *out /* dbt_status_reply */, char *err);
void dbt_status_free(dbt_status_reply *s);

/* admin.lua's reply (its fields: lua/protocol/admin.def). */
typedef struct {
    long long granted, holders;
    bool evicted;
    char info[256]; /* the evicted permit's "<since> <host> <pid> <conn>", else "" */
    long long now_ms;
} dbt_admin_reply;
bool dbt_parse_admin(const redisReply *r, void *out /* dbt_admin_reply */, char *err);

/* adapt.lua's reply (its fields and dbt_adapt_status: lua/protocol/adapt.def). */
typedef struct {
    dbt_adapt_status status;
    char owner[128];     /* the live lease's token; "" none */
    char owner_host[64]; /* and its host, pid; "", 0 none */
    long owner_pid;
    long long lease_left_ms; /* 0 none */
    long long override;      /* the limit key's value; 0 absent */
    long long override_pttl; /* its PTTL: -2 absent, -1 an operator's (no TTL), else ms left */
    long long granted;       /* waiters granted by a set */
    long long now_ms;        /* Redis' clock */
} dbt_adapt_reply;
bool dbt_parse_adapt(const redisReply *r, void *out /* dbt_adapt_reply */, char *err);

/* ---- classes and ids --------------------------------------------------------------------------
 */

/* A class name: 1 to 32 of [a-z0-9_-], and not "-" alone (the default class' tag). */
bool dbt_class_name_ok(const char *s);

/* The shape of a permit id: "<cid>.<serial>.<limit>" (untagged: klass "", weight 1) or
 * "<cid>.<serial>.<class>.<weight>.<limit>" (tagged; class "-" = the default class). klass has
 * 33 bytes; any out pointer may be NULL. False when id is neither form. */
bool dbt_parse_id_shape(const char *id, char *klass, int *weight, int *limit);

#endif
