/* throttle.c - the glue between libpq and the permit state machine (conn_state.c): it finds the
 * connection's entry, gathers what libpq knows of the connection into dbt_conn_facts, hands the
 * state machine the permit operations over the semaphore client (the connection's pool, its
 * exemption, its limits, a cancel that ends a wait), and words its refusals for libpq. */
#include "throttle.h"

#include "cancel_map.h"
#include "clock.h"
#include "conn_registry.h"
#include "lib.h"
#include "log.h"
#include "prepared.h"
#include "real.h"
#include "sem_client.h"
#include "server_name.h"
#include "session_watch.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__thread int dbt_nested;

static int64_t now_ms(void)
{
    return dbt_now_us() / 1000;
}

static void evict_cancel(const char *conn_id, const char *event);
static void no_cancels_in_child(void);

/* The process' throttle (lib.c). An active one has dbthrottle evict --cancel (and closed mode's
 * lapsing leases) cancel the command running on a connection of ours: wired at the throttle's
 * first use, before any connection can hold a permit to be evicted. */
static pthread_once_t wire_once = PTHREAD_ONCE_INIT;

static void wire(void)
{
    if (dbt_lib_get()->active) {
        pthread_atfork(NULL, NULL, no_cancels_in_child);
        dbt_on_evict_cancel(evict_cancel);
    }
}

static const dbt_lib *throttle_lib(void)
{
    pthread_once(&wire_once, wire);
    return dbt_lib_get();
}

/* "<server>/dbname": the server as server_name.c names it (one name for every spelling of one
 * address and port), and the database libpq resolved (defaults, service files and PG* variables
 * applied). Never a password. */
static void default_pool(PGconn *conn, char *out, size_t cap)
{
    char server[400];
    dbt_server_name(conn, server, sizeof server);
    const char *db = DBT_REAL(PQdb)(conn);
    snprintf(out, cap, "%s/%s", server, db ? db : "");
}

/* DBTHROTTLE_EXEMPT: monitoring, health checks and operators must get through a saturated pool
 * (a watchdog that waits for a permit held by sessions blocked on a lock deadlocks them all). */
/* Whether the server's report of application_name is `sent` as PostgreSQL stores it: each byte
 * outside printable ASCII turned into '?' (15 and older) or "\xNN" (16 and newer). */
static bool server_cleaned(const char *sent, const char *reported)
{
    const unsigned char *a = (const unsigned char *)sent;
    const char *b = reported;
    for (; *a; a++) {
        if (*a >= 32 && *a <= 126) {
            if (*b++ != (char)*a)
                return false;
        } else if (*b == '?') {
            b++;
        } else {
            char hex[5];
            snprintf(hex, sizeof hex, "\\x%02x", *a);
            if (strncmp(b, hex, 4) != 0)
                return false;
            b += 4;
        }
    }
    return *b == '\0';
}

/* application_name as the client sent it: the connection string's or PGAPPNAME, else the
 * program's default (fallback_application_name: psql's "psql"), as the server uses them; or as the
 * server reports it when a SET changed it since. The server's own report cannot be matched
 * against a rule with non-ASCII characters: PostgreSQL replaces them. */
static bool app_name(PGconn *conn, char *out, size_t cap)
{
    const char *reported = DBT_REAL(PQparameterStatus)(conn, "application_name");
    PQconninfoOption *opts = DBT_REAL(PQconninfo)(conn);
    const char *given = NULL, *fallback = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword; o++) {
        if (!o->val || !o->val[0])
            continue;
        if (strcmp(o->keyword, "application_name") == 0)
            given = o->val;
        else if (strcmp(o->keyword, "fallback_application_name") == 0)
            fallback = o->val;
    }
    const char *sent = given ? given : fallback;
    bool found = true;
    if (sent && (!reported || server_cleaned(sent, reported)))
        snprintf(out, cap, "%s", sent);
    else if (reported)
        snprintf(out, cap, "%s", reported);
    else
        found = false;
    if (opts)
        DBT_REAL(PQconninfoFree)(opts);
    return found;
}

/* The process' own DBTHROTTLE_EXEMPT rule the connection matches, NULL none. */
static const char *exempt_rule(const dbt_config *cfg, PGconn *conn)
{
    char app[256];
    const char *values[3] = {
        [DBT_EXEMPT_USER] = DBT_REAL(PQuser)(conn), [DBT_EXEMPT_DATABASE] = DBT_REAL(PQdb)(conn)};
    for (int i = 0; i < cfg->nexempt && !values[DBT_EXEMPT_APP]; i++)
        if (cfg->exempt[i].field == DBT_EXEMPT_APP) /* read only when a rule asks */
            values[DBT_EXEMPT_APP] = app_name(conn, app, sizeof app) ? app : NULL;
    return dbt_exempt_match(cfg->exempt, cfg->nexempt, values);
}

#define SQLSTATE_REFUSED  "53300" /* too_many_connections: "insufficient resources" */
#define SQLSTATE_CANCELED "57014" /* query_canceled, as the server says it */

static void set_refusal(dbt_conn *c, dbt_kind kind, const char *fmt_pool, int limit,
                        int64_t waited_ms, const char *why, const char *sqlstate)
{
    char msg[2048];
    snprintf(msg, sizeof msg,
             "dbthrottle: no %s permit for pool \"%.300s\" (limit %d) after waiting %" PRId64
             " ms: %s\n",
             dbt_kind_name(kind), fmt_pool, limit, waited_ms, why);
    free(c->refusal);
    c->refusal = strdup(msg);
    c->refusal_state = sqlstate;
}

/* The connection's pool, chosen once: DBTHROTTLE_POOL, or where libpq resolved it to go. */
static dbt_pool *pool_of(const dbt_lib *lib, dbt_conn *c, PGconn *conn)
{
    if (!c->pool) {
        char name[600];
        if (lib->cfg.pool)
            snprintf(name, sizeof name, "%s", lib->cfg.pool);
        else
            default_pool(conn, name, sizeof name);
        c->pool = dbt_client_pool(lib->client, lib->cfg.pool ? lib->cfg.pool : name);
        if (c->pool) {
            dbt_pool_await_live(c->pool); /* its live settings, before its first decision */
            /* dbthrottle clients lists it from now on, idle too (sem's conns.c) */
            char app[256] = "", server[600];
            if (c->ident_known)
                snprintf(app, sizeof app, "%s", c->app);
            else
                (void)app_name(conn, app, sizeof app);
            default_pool(conn, server, sizeof server);
            dbt_pool_conn_opened(c->pool, c->id, app, server);
        }
    }
    return c->pool;
}

static dbt_rule_values ident_of(dbt_conn *c, PGconn *conn);

/* Between transactions and out of pipeline mode: where a connection may take up a new live
 * exemption or class. An exempt connection's transaction holds no permit; were the exemption
 * lifted inside it, its next statement would queue while the transaction holds its locks. */
static bool between_transactions(PGconn *conn)
{
    return DBT_REAL(PQtransactionStatus)(conn) == PQTRANS_IDLE &&
           DBT_REAL(PQpipelineStatus)(conn) == PQ_PIPELINE_OFF;
}

/* Whether the connection is exempt: decided once per connection by the process' own rules, and
 * again when its pool's live settings changed, by the pool's live exempt when the operator set one
 * (dbthrottle set POOL exempt ...). Asked only while the connection holds no permit of the kind
 * (conn_state.c): a permit held stays until its release. */
static bool is_exempt(const dbt_lib *lib, dbt_conn *c, PGconn *conn)
{
    /* Its pool hears the live settings (the process reports, as a disabled one does, though no
     * connection of it takes a permit): an exemption of its own can be lifted live, and
     * dbthrottle status and clients list it. */
    dbt_pool *pool = c->pool;
    if (!c->checked_exempt && (pool = pool_of(lib, c, conn)) != NULL)
        dbt_pool_announce(pool);
    long long live = pool ? dbt_pool_live_applied(pool) : 0;
    if (!c->checked_exempt || (live != c->exempt_live && between_transactions(conn))) {
        c->checked_exempt = true;
        c->exempt_live = live;
        int by_live = -1;
        if (live) {
            dbt_rule_values id = ident_of(c, conn);
            const char *values[3] = {[DBT_EXEMPT_APP] = id.value[DBT_RULE_APP],
                                     [DBT_EXEMPT_USER] = id.value[DBT_RULE_USER],
                                     [DBT_EXEMPT_DATABASE] = id.value[DBT_RULE_DATABASE]};
            by_live = dbt_pool_live_exempt(pool, values, c->exempt_rule, sizeof c->exempt_rule);
        }
        if (by_live < 0) {
            const char *rule = exempt_rule(&lib->cfg, conn);
            snprintf(c->exempt_rule, sizeof c->exempt_rule, "%s", rule ? rule : "");
            by_live = rule != NULL;
        }
        c->exempt = by_live == 1;
        if (pool)
            dbt_pool_conn_exempt(pool, c->id, c->exempt);
    }
    if (c->exempt && dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("conn", c->id), DBT_S("rule", c->exempt_rule)};
        dbt_log(DBT_LOG_INFO, "exempt", f, 2);
    }
    return c->exempt;
}

/* ---- classes and weights (docs/configuration.md, "Classes and weights") ------------------- */

/* What the rules match a connection on: its application_name (read once, as the exemption
 * reads it), user and database; sql stays NULL. */
static dbt_rule_values ident_of(dbt_conn *c, PGconn *conn)
{
    if (!c->ident_known) {
        c->ident_known = true;
        c->has_app = app_name(conn, c->app, sizeof c->app);
    }
    dbt_rule_values v = {{NULL}};
    v.value[DBT_RULE_APP] = c->has_app ? c->app : NULL;
    v.value[DBT_RULE_USER] = DBT_REAL(PQuser)(conn);
    v.value[DBT_RULE_DATABASE] = DBT_REAL(PQdb)(conn);
    return v;
}

/* The connection's class: DBTHROTTLE_CLASS, else the first class rule that matches (the pool's
 * live class_rules when set, else DBTHROTTLE_CLASS_RULES), else "-" (the pool's default class).
 * Decided at its first permit, and again between transactions once the pool's live settings
 * changed. NULL when neither the process nor the pool sets classes: its ids stay untagged, as
 * before classes. */
static const char *class_of(const dbt_lib *lib, dbt_conn *c, PGconn *conn)
{
    const dbt_config *cfg = &lib->cfg;
    /* The pool's live class_rules (dbthrottle set POOL class_rules ...) in place of the
     * process' own; DBTHROTTLE_CLASS, this process' own class for all, still wins. Asked only
     * while the connection holds no query permit (conn_state.c). */
    long long live = c->pool ? dbt_pool_live_applied(c->pool) : 0;
    if (!cfg->klass && !cfg->class_rules.n && !live)
        return NULL;
    if (!c->checked_class || (live != c->class_live && between_transactions(conn))) {
        c->checked_class = true;
        c->class_live = live;
        c->klass = c->klass_buf;
        int by_live = -1;
        if (cfg->klass) {
            snprintf(c->klass_buf, sizeof c->klass_buf, "%s", cfg->klass);
        } else {
            dbt_rule_values v = ident_of(c, conn);
            if (live)
                by_live = dbt_pool_live_rule(c->pool, false, &v, c->klass_buf, NULL);
            if (by_live == 0) {
                snprintf(c->klass_buf, sizeof c->klass_buf, "-");
            } else if (by_live < 0 && !cfg->class_rules.n) {
                c->klass = NULL; /* neither the process nor the pool classes it */
            } else if (by_live < 0) {
                const dbt_rule *r = dbt_rules_match(&cfg->class_rules, &v);
                snprintf(c->klass_buf, sizeof c->klass_buf, "%s", r ? r->klass : "-");
            }
        }
        if (!c->klass)
            return NULL;
        if (dbt_log_enabled(DBT_LOG_DEBUG)) {
            dbt_field f[] = {DBT_S("conn", c->id), DBT_S("class", c->klass)};
            dbt_log(DBT_LOG_DEBUG, "class", f, 2);
        }
    }
    return c->klass;
}

/* A command's weight: the first DBTHROTTLE_WEIGHTS rule its connection and its text match; 1
 * when none does (or the process has no rules). */
static int weight_of(const dbt_lib *lib, dbt_conn *c, PGconn *conn, const char *query)
{
    /* the pool's live weights, when set, in place of the process' own (the pool is locked for
     * them only then) */
    bool live = c->pool && dbt_pool_live_sets(c->pool, offsetof(dbt_config, weights));
    if ((!lib->cfg.weights.n && !live) || !conn)
        return 1;
    dbt_rule_values v = ident_of(c, conn);
    v.value[DBT_RULE_SQL] = query;
    int w = 1, by_live = live ? dbt_pool_live_rule(c->pool, true, &v, NULL, &w) : -1;
    if (by_live >= 0)
        return w;
    const dbt_rule *r = dbt_rules_match(&lib->cfg.weights, &v);
    return r ? r->weight : 1;
}

/* Prepared statements' texts are kept while the library throttles, whatever the process' own
 * weights read: the pool's live weights (dbthrottle set POOL weights 'N:sql=...') may read the
 * SQL text of a statement prepared before they were set. A copy per PQprepare. */
void dbt_throttle_note_prepare(PGconn *conn, const char *name, const char *query)
{
    const dbt_lib *lib = throttle_lib();
    if (!lib->active || !conn)
        return;
    dbt_conn *c = dbt_conn_find(conn, true);
    if (c)
        dbt_prepared_note(&c->prepared, name, query);
}

const char *dbt_throttle_prepared_text(const PGconn *conn, const char *name)
{
    const dbt_lib *lib = throttle_lib();
    if (!lib->active || !conn)
        return NULL;
    dbt_conn *c = dbt_conn_find(conn, false);
    return c ? dbt_prepared_text(c->prepared, name) : NULL;
}

/* How an acquire for c ended, in libpq's words: true when the command goes ahead; else the
 * refusal is set on c. `t0` is when the command asked (ms), `waited` whether it could wait. */
static bool outcome(dbt_conn *c, dbt_pool *pool, dbt_kind kind, int limit, bool waited, int64_t t0,
                    dbt_acq_result r)
{
    const char *name = dbt_pool_name(pool);
    switch (r) {
    case DBT_ACQ_GRANTED:
    case DBT_ACQ_UNTHROTTLED:
        return true;
    case DBT_ACQ_TIMEOUT: {
        /* A wait that timed out may be one this process' own family could never end (a
         * transaction idle on its workers or on a full pipe holds the permit): say so. */
        int64_t waited_ms = now_ms() - t0;
        char why[1200] = "DBTHROTTLE_WAIT_TIMEOUT reached", deadlock[1000];
        if (dbt_last_wait_live())
            snprintf(why, sizeof why,
                     "the pool's live wait_timeout reached (set by the operator: dbthrottle "
                     "settings %.100s)",
                     name);
        long long class_wait;
        if (dbt_last_class_wait(&class_wait))
            snprintf(why, sizeof why,
                     "the wait of class \"%s\" (%lld ms) reached (dbthrottle class %.100s %s "
                     "--wait)",
                     c->klass ? c->klass : "-", class_wait, name, c->klass ? c->klass : "-");
        if (waited && dbt_pool_explain_wait(pool, deadlock, sizeof deadlock)) {
            size_t n = strlen(why);
            snprintf(why + n, sizeof why - n, "; %s", deadlock);
        }
        set_refusal(c, kind, name, limit, waited_ms, why, SQLSTATE_REFUSED);
        return false;
    }
    case DBT_ACQ_INTERRUPTED:
        set_refusal(c, kind, name, limit, now_ms() - t0, "canceling statement due to user request",
                    SQLSTATE_CANCELED);
        return false;
    case DBT_ACQ_MISCONFIGURED: {
        /* A configuration error, refused as a bad setting is: the message names the cause and
         * what to fix. */
        char why[256], msg[600];
        dbt_pool_misconfig(pool, why, sizeof why);
        snprintf(msg, sizeof msg, "Redis refuses this configuration: %s",
                 why[0] ? why : "see the log");
        set_refusal(c, kind, name, limit, now_ms() - t0, msg, SQLSTATE_REFUSED);
        return false;
    }
    case DBT_ACQ_QUEUE_FULL: {
        /* Refused at once, as a cap asks: waiting longer would not have helped this command. */
        char klass[40] = "-", why[300];
        long long cap = -1;
        dbt_last_queue_full(klass, sizeof klass, &cap);
        snprintf(why, sizeof why,
                 "class \"%s\" has its queue cap of %lld waiters (dbthrottle class %.100s %s "
                 "--queue-cap N)",
                 klass, cap, name, klass);
        set_refusal(c, kind, name, limit, now_ms() - t0, why, SQLSTATE_REFUSED);
        return false;
    }
    case DBT_ACQ_REFUSED:
    case DBT_ACQ_QUEUED: /* never here: dbt_acquire_start's callers handle it */
    default: {
        char why[300] = "Redis is unreachable and DBTHROTTLE_ON_REDIS_ERROR=closed";
        if (dbt_pool_live_sets(pool, offsetof(dbt_config, on_redis_error)))
            snprintf(why, sizeof why,
                     "Redis is unreachable and the pool's live on_redis_error is closed (set by "
                     "the operator: dbthrottle settings %.100s)",
                     name);
        set_refusal(c, kind, name, limit, now_ms() - t0, why, SQLSTATE_REFUSED);
        return false;
    }
    }
}

/* The session a permit is for, for the holders' list that joins with pg_stat_activity (backend
 * pid, application_name as the server reports it, user, database), into out; NULL before the
 * connection is made (a connection permit taken at connect: it has none yet). No round trip:
 * libpq keeps all four. */
static const char *session_of(PGconn *conn, char *out, size_t cap)
{
    if (!conn || DBT_REAL(PQstatus)(conn) != CONNECTION_OK)
        return NULL;
    int pid = DBT_REAL(PQbackendPID)(conn);
    if (pid <= 0 || !dbt_format_session(pid, DBT_REAL(PQparameterStatus)(conn, "application_name"),
                                        DBT_REAL(PQuser)(conn), DBT_REAL(PQdb)(conn), out, cap))
        return NULL;
    return out;
}

/* Takes a permit of `kind` for c; false when refused (message set). A cancel of the connection
 * (PQcancel, PQrequestCancel) ends the wait as the server would end a statement. With `pending`
 * (a PQsend* call, which must not wait), a query permit that is not free at once is queued for
 * and *pending set: the wait is held.c's (dbt_throttle_held_wait). */
static dbt_verdict take(const dbt_lib *lib, dbt_conn *c, PGconn *conn, dbt_kind kind, int limit,
                        int weight, const char *query, dbt_permit **slot,
                        dbt_acquire_wait **pending, dbt_cancel_wait *cell)
{
    dbt_pool *pool = pool_of(lib, c, conn);
    if (!pool)
        return DBT_PROCEED; /* out of memory: better unthrottled than a crash */
    /* the operator's live value for the pool, if set (dbthrottle set), else the process' own */
    /* (computed before the initializer: its expressions are not sequenced among themselves) */
    bool live = false;
    int64_t wait_ms = dbt_pool_wait_timeout_ms(pool, lib->cfg.wait_timeout_ms, &live);
    dbt_acquire_opts o = {.limit = limit,
                          .wait_ms = wait_ms,
                          .wait_live = live,
                          .conn = c->id,
                          .query = lib->cfg.log_query ? query : NULL,
                          .klass = class_of(lib, c, conn),
                          .weight = kind == DBT_KIND_QUERY ? weight : 1};
    char session[DBT_SESSION_LEN];
    o.session = session_of(conn, session, sizeof session);
    int64_t t0 = now_ms();
    dbt_acq_result r;
    /* The caller's cell, else (a connection permit) one of our own for the wait. A PQsend* that
     * cannot queue (no memory) waits in place in dbt_acquire_start: the cell ends that wait too. */
    bool queue_only = pending && kind == DBT_KIND_QUERY;
    bool own = !cell && !queue_only;
    dbt_cancel_wait *cw = own ? dbt_cancel_wait_begin(conn) : cell;
    o.interrupted = cw ? dbt_cancel_requested : NULL;
    o.arg = cw;
    o.waker = dbt_cancel_waker(cw);
    if (queue_only) {
        r = dbt_acquire_start(pool, kind, &o, slot, pending);
        if (r == DBT_ACQ_QUEUED)
            return DBT_DEFER;
    } else {
        r = dbt_acquire(pool, kind, &o, slot);
    }
    if (own)
        dbt_cancel_wait_end(cw);
    return outcome(c, pool, kind, limit, o.wait_ms != 0, t0, r) ? DBT_PROCEED : DBT_REFUSE;
}

/* ---- the permit operations the state machine uses: the semaphore client, for one connection */

typedef struct {
    const dbt_lib *lib;
    dbt_conn *c;
    PGconn *conn; /* NULL where no operation needs it (forget, connect failed) */
    /* A PQsend* call: a query permit not free at once is queued for, and the wait handed to the
     * caller here (NULL: the acquire waits in the call). */
    dbt_acquire_wait **pending;
    const char *query; /* the command's text (NULL: none, or not a command) */
    /* The command's cancel cell, claimed as its call began: what comes before the acquire (the
     * pool's first live settings, a connection to Redis) may take round trips, and a cancel in
     * them must still end the wait. NULL: take claims one (a connection permit), or none. */
    dbt_cancel_wait *cell;
    int weight; /* its weight, once weight_for has worked it out (0: not yet) */
} permit_ctx;

/* The command's weight, worked out once per command and only when a permit is at stake. */
static int weight_for(permit_ctx *x)
{
    if (!x->weight)
        x->weight = weight_of(x->lib, x->c, x->conn, x->query);
    return x->weight;
}

static int limit_of(const dbt_lib *lib, dbt_kind kind)
{
    return kind == DBT_KIND_CONN ? lib->cfg.max_connections : lib->cfg.max_queries;
}

static bool op_throttled(void *ctx, dbt_kind kind)
{
    permit_ctx *x = ctx;
    return limit_of(x->lib, kind) != 0 && !is_exempt(x->lib, x->c, x->conn);
}

static dbt_verdict op_acquire(void *ctx, dbt_kind kind, const char *query, dbt_permit **slot)
{
    permit_ctx *x = ctx;
    int weight = kind == DBT_KIND_QUERY ? weight_for(x) : 1;
    return take(x->lib, x->c, x->conn, kind, limit_of(x->lib, kind), weight, query, slot,
                x->pending, x->cell);
}

static void op_release(void *ctx, dbt_permit *permit)
{
    (void)ctx;
    dbt_release(permit);
}

static bool op_park(void *ctx, dbt_permit *permit)
{
    (void)ctx;
    return dbt_permit_park(permit);
}

static void op_unpark(void *ctx, dbt_permit **permit)
{
    permit_ctx *x = ctx;
    /* A kept permit serves only a command of its own weight (its class is the connection's):
     * another takes a permit of its own shape, through the queue. */
    if (*permit && x->conn && dbt_permit_weight(*permit) != weight_for(x)) {
        dbt_release(*permit);
        *permit = NULL;
        return;
    }
    dbt_permit_unpark(permit);
}

static bool op_lost(void *ctx, dbt_permit *permit)
{
    permit_ctx *x = ctx;
    if (!dbt_permit_lost(permit))
        return false;
    if (dbt_log_enabled(DBT_LOG_WARN)) {
        dbt_field f[] = {DBT_S("conn", x->c->id), DBT_S("permit", dbt_permit_id(permit)),
                         DBT_S("effect", "the next command acquires again, through the queue")};
        dbt_log(DBT_LOG_WARN, "reacquire", f, sizeof f / sizeof *f);
    }
    return true;
}

static void op_note_idle(void *ctx, dbt_permit *permit, bool idle)
{
    (void)ctx;
    dbt_permit_note_idle(permit, idle);
}

static void op_unthrottled(void *ctx)
{
    permit_ctx *x = ctx;
    if (x->c->pool)
        dbt_pool_count_unthrottled(x->c->pool);
    if (dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("conn", x->c->id),
                         DBT_S("reason", "the transaction began without a permit (Redis was "
                                         "unreachable): it runs to its end without one")};
        dbt_log(DBT_LOG_INFO, "unthrottled", f, sizeof f / sizeof *f);
    }
}

static const dbt_permit_ops sem_ops = {.throttled = op_throttled,
                                       .acquire = op_acquire,
                                       .release = op_release,
                                       .park = op_park,
                                       .unpark = op_unpark,
                                       .lost = op_lost,
                                       .note_idle = op_note_idle,
                                       .unthrottled = op_unthrottled};

/* ---- the facts libpq knows ----------------------------------------------------------------- */

static dbt_conn_facts facts_of(PGconn *conn)
{
    dbt_conn_facts f = {.tx = DBT_TX_UNKNOWN,
                        .pipeline = DBT_PIPELINE_OFF,
                        .dead = DBT_REAL(PQstatus)(conn) == CONNECTION_BAD};
    switch (DBT_REAL(PQtransactionStatus)(conn)) {
    case PQTRANS_IDLE:
        f.tx = DBT_TX_IDLE;
        break;
    case PQTRANS_ACTIVE:
        f.tx = DBT_TX_ACTIVE;
        break;
    case PQTRANS_INTRANS:
        f.tx = DBT_TX_INTRANS;
        break;
    case PQTRANS_INERROR:
        f.tx = DBT_TX_INERROR;
        break;
    case PQTRANS_UNKNOWN:
    default:
        break;
    }
    switch (DBT_REAL(PQpipelineStatus)(conn)) {
    case PQ_PIPELINE_ON:
        f.pipeline = DBT_PIPELINE_ON;
        break;
    case PQ_PIPELINE_ABORTED:
        f.pipeline = DBT_PIPELINE_ABORTED;
        break;
    case PQ_PIPELINE_OFF:
    default:
        break;
    }
    return f;
}

/* ---- a session the server ended ------------------------------------------------------------ */

/* On the watcher's thread (session_watch.c), while the connection's own thread leaves it alone. */
static void session_gone(void *owner)
{
    dbt_conn *c = owner;
    if (!dbt_conn_state_holds(&c->state))
        return;
    permit_ctx x = {.lib = throttle_lib(), .c = c, .conn = NULL};
    dbt_conn_state_session_ended(&c->state, &sem_ops, &x);
    dbt_field f[] = {DBT_S("conn", c->id),
                     DBT_S("reason", "the server closed the connection (restart, "
                                     "pg_terminate_backend, idle_in_transaction_session_timeout)"),
                     DBT_S("effect", "its permits went back")};
    dbt_log(DBT_LOG_WARN, "session_ended", f, sizeof f / sizeof *f);
}

static pthread_once_t watch_once = PTHREAD_ONCE_INIT;

static void watch_init(void)
{
    dbt_session_watch_init(session_gone);
}

/* The connection's own thread takes its state back from the watcher before each event. */
static dbt_conn *mine(dbt_conn *c)
{
    if (c)
        dbt_session_unwatch(c->watch_cell);
    return c;
}

/* Idle between commands with a permit (in a transaction, kept, a connection permit): watched, so
 * that a session the server ends gives its permits back at once. */
static void watch_if_idle(dbt_conn *c, PGconn *conn, dbt_conn_facts f)
{
    if (!dbt_conn_state_holds(&c->state) || f.tx == DBT_TX_ACTIVE || f.tx == DBT_TX_UNKNOWN ||
        f.dead || f.pipeline != DBT_PIPELINE_OFF)
        return;
    pthread_once(&watch_once, watch_init);
    dbt_session_watch(&c->watch_cell, DBT_REAL(PQsocket)(conn), c);
}

/* ---- dbthrottle evict --cancel ------------------------------------------------------------- */

static void make_cancel(const void *pg, void *arg)
{
    __typeof__(&PQgetCancel) get = DBT_REAL(PQgetCancel);
    *(PGcancel **)arg = get ? get((PGconn *)pg) : NULL; /* a copy of the connection's keys */
}

/* The operator evicted this connection's permit and asked that its command stop, or (closed
 * mode) its lease is about to lapse unrenewed and Redis would then grant it to another: the server
 * cancels it, as PQcancel would from the program (so that neither leaves the limit + 1 statements
 * running). The program sees the server's error, SQLSTATE 57014 (query_canceled); the log says
 * why. On the renewer's thread. */
typedef struct {
    PGcancel *cancel;
    char conn_id[64];
    char event[32];
} cancel_job;

/* Cancels being sent on their threads. The program often exits right after its command got the
 * cancel's error, while the thread that sent it has yet to see the server hang up and log how it
 * went: the process' exit then waits a little for it (CI lost the lapse_cancel line that way,
 * under load). A fork()ed child has none of those threads. */
static atomic_int cancels_in_flight;
enum { EXIT_WAITS_FOR_CANCELS_MS = 1000 };

static void no_cancels_in_child(void)
{
    atomic_store(&cancels_in_flight, 0);
}

__attribute__((destructor)) static void wait_for_cancels(void)
{
    for (int waited = 0; atomic_load(&cancels_in_flight) > 0 && waited < EXIT_WAITS_FOR_CANCELS_MS;
         waited += 5)
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
}

/* Sends one cancel and says how it went. PQcancel connects to the server and waits for it to
 * hang up, with no timeout of its own: against a server host cut off, a connect's SYN retries
 * last about two minutes. */
static void *send_cancel(void *arg)
{
    cancel_job *j = arg;
    char err[256] = "";
    __typeof__(&PQcancel) send = DBT_REAL(PQcancel);
    bool sent = send && send(j->cancel, err, sizeof err);
    __typeof__(&PQfreeCancel) free_cancel = DBT_REAL(PQfreeCancel);
    if (free_cancel)
        free_cancel(j->cancel);
    dbt_field f[] = {DBT_S("conn", j->conn_id),
                     DBT_S("effect", sent ? "its command was cancelled at the server"
                                          : "the cancel could not be sent"),
                     DBT_S("error", sent ? "-" : err)};
    dbt_log(sent ? DBT_LOG_WARN : DBT_LOG_ERROR, j->event, f, sizeof f / sizeof *f);
    free(j);
    atomic_fetch_sub(&cancels_in_flight, 1);
    return NULL;
}

static void evict_cancel(const char *conn_id, const char *event)
{
    PGcancel *cancel = NULL;
    if (!dbt_conn_with_id(conn_id, make_cancel, &cancel) || !cancel)
        return;
    cancel_job *j = calloc(1, sizeof *j);
    if (!j) {
        __typeof__(&PQfreeCancel) free_cancel = DBT_REAL(PQfreeCancel);
        if (free_cancel)
            free_cancel(cancel);
        return;
    }
    j->cancel = cancel;
    snprintf(j->conn_id, sizeof j->conn_id, "%s", conn_id);
    snprintf(j->event, sizeof j->event, "%s", event);
    /* On a thread of its own, detached: the renewer that asks must not wait on a server that
     * does not answer (its renewals, and the other cancels, would wait as long: every lease
     * lost). Where no thread can be made, sent here. */
    pthread_attr_t attr;
    pthread_t t;
    atomic_fetch_add(&cancels_in_flight, 1);
    bool started = pthread_attr_init(&attr) == 0;
    if (started) {
        started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                  pthread_create(&t, &attr, send_cancel, j) == 0;
        pthread_attr_destroy(&attr);
    }
    if (!started)
        send_cancel(j);
}

/* ---- the events ------------------------------------------------------------------------------ */

/* What a command or a connect starts with: the connection's entry, and a bad configuration
 * refused. Returns NULL when the event needs no decision (`*go` says whether it may proceed). */
static dbt_conn *begin(PGconn *conn, const dbt_lib *lib, bool *go)
{
    *go = true;
    if (!lib->active && !lib->broken)
        return NULL;
    dbt_conn *c = mine(dbt_conn_find(conn, true));
    if (!c)
        return NULL; /* out of memory: better unthrottled than a crash */
    if (lib->broken && lib->exempt_known && exempt_rule(&lib->cfg, conn))
        return NULL; /* exempt: the bad setting is not one an exempt connection reads */
    if (lib->broken) {
        char msg[DBT_ERRLEN + 64];
        snprintf(msg, sizeof msg, "dbthrottle: bad configuration: %s\n", lib->error);
        free(c->refusal);
        c->refusal = strdup(msg);
        c->refusal_state = SQLSTATE_REFUSED;
        dbt_conn_state_refuse(&c->state);
        *go = false;
        return NULL;
    }
    return c;
}

/* The entry of a connection the throttle already knows, for the events after a command. */
static dbt_conn *known(PGconn *conn, const dbt_lib *lib)
{
    return lib->active ? mine(dbt_conn_find(conn, false)) : NULL;
}

/* A disabled process with a limit set takes no permit, but reports itself in the pool of each
 * connection it opens (dbthrottle status lists it as disabled). */
static void announce(const dbt_lib *lib, PGconn *conn)
{
    char name[600];
    if (lib->cfg.pool)
        snprintf(name, sizeof name, "%s", lib->cfg.pool);
    else
        default_pool(conn, name, sizeof name);
    dbt_pool *p = dbt_client_pool(lib->client, name);
    if (p)
        dbt_pool_announce(p);
}

bool dbt_throttle_connect(PGconn *conn)
{
    const dbt_lib *lib = throttle_lib();
    if (lib->announce_only) {
        announce(lib, conn);
        return true;
    }
    bool go;
    dbt_conn *c = begin(conn, lib, &go);
    if (!c)
        return go;
    permit_ctx x = {.lib = lib, .c = c, .conn = conn};
    return dbt_conn_state_connect(&c->state, &sem_ops, &x) == DBT_PROCEED;
}

void dbt_throttle_connect_failed(PGconn *conn)
{
    const dbt_lib *lib = throttle_lib();
    dbt_conn *c = known(conn, lib);
    permit_ctx x = {.lib = lib, .c = c, .conn = NULL};
    if (c)
        dbt_conn_state_connect_failed(&c->state, &sem_ops, &x);
}

bool dbt_throttle_before(PGconn *conn, const char *query)
{
    const dbt_lib *lib = throttle_lib();
    bool go;
    dbt_conn *c = begin(conn, lib, &go);
    if (!c)
        return go;
    /* Claimed before anything that may take a round trip (permit_ctx's cell). */
    dbt_cancel_wait *cell = dbt_cancel_wait_begin(conn);
    permit_ctx x = {.lib = lib, .c = c, .conn = conn, .query = query, .cell = cell};
    if (DBT_REAL(PQstatus)(conn) == CONNECTION_BAD)
        dbt_conn_state_session_ended(&c->state, &sem_ops, &x); /* libpq fails the command */
    bool ok = dbt_conn_state_command(&c->state, &sem_ops, &x, query) == DBT_PROCEED;
    dbt_cancel_wait_end(cell);
    return ok;
}

dbt_verdict dbt_throttle_before_send(PGconn *conn, const char *query, dbt_cancel_wait **cell,
                                     dbt_acquire_wait **pending)
{
    *pending = NULL;
    *cell = NULL;
    const dbt_lib *lib = throttle_lib();
    bool go;
    dbt_conn *c = begin(conn, lib, &go);
    if (!c)
        return go ? DBT_PROCEED : DBT_REFUSE;
    /* Claimed before anything that may take a round trip (permit_ctx's cell). */
    *cell = dbt_cancel_wait_begin(conn);
    permit_ctx x = {
        .lib = lib, .c = c, .conn = conn, .pending = pending, .query = query, .cell = *cell};
    if (DBT_REAL(PQstatus)(conn) == CONNECTION_BAD)
        dbt_conn_state_session_ended(&c->state, &sem_ops, &x); /* libpq fails the command */
    return dbt_conn_state_command(&c->state, &sem_ops, &x, query);
}

dbt_verdict dbt_throttle_held_wait(PGconn *conn, dbt_acquire_wait *pending, int64_t t0_ms,
                                   bool (*interrupted)(void *), void *arg, dbt_waker *waker)
{
    const dbt_lib *lib = throttle_lib();
    dbt_conn *c = dbt_conn_find(conn, false);
    if (!c || !c->pool)
        return DBT_PROCEED; /* never: the send that queued made both */
    int limit = limit_of(lib, DBT_KIND_QUERY);
    /* the wait's deadline and its source were set as it began (dbt_acquire_start) */
    dbt_acquire_opts o = {.limit = limit,
                          .wait_ms = lib->cfg.wait_timeout_ms,
                          .conn = c->id,
                          .interrupted = interrupted,
                          .arg = arg,
                          .waker = waker};
    dbt_permit *permit = NULL;
    dbt_acq_result r = dbt_acquire_wait_for(pending, &o, &permit);
    dbt_verdict v =
        outcome(c, c->pool, DBT_KIND_QUERY, limit, true, t0_ms, r) ? DBT_PROCEED : DBT_REFUSE;
    dbt_conn_state_deferred_end(&c->state, v, permit);
    return v;
}

void dbt_throttle_sent(PGconn *conn, bool sent)
{
    const dbt_lib *lib = throttle_lib();
    dbt_conn *c = known(conn, lib);
    permit_ctx x = {.lib = lib, .c = c, .conn = conn};
    if (c)
        dbt_conn_state_sent(&c->state, &sem_ops, &x, sent, facts_of(conn));
}

void dbt_throttle_after(PGconn *conn)
{
    const dbt_lib *lib = throttle_lib();
    dbt_conn *c = known(conn, lib);
    permit_ctx x = {.lib = lib, .c = c, .conn = conn};
    if (!c)
        return;
    dbt_conn_facts f = facts_of(conn);
    dbt_conn_state_ended(&c->state, &sem_ops, &x, f);
    watch_if_idle(c, conn, f);
}

void dbt_throttle_connected(PGconn *conn)
{
    dbt_conn *c = known(conn, throttle_lib());
    if (c)
        watch_if_idle(c, conn, facts_of(conn));
}

void dbt_throttle_pipeline_sync(PGconn *conn)
{
    dbt_conn *c = known(conn, throttle_lib());
    if (c)
        dbt_conn_state_pipeline_sync(&c->state);
}

void dbt_throttle_pipeline_synced(PGconn *conn)
{
    const dbt_lib *lib = throttle_lib();
    dbt_conn *c = known(conn, lib);
    permit_ctx x = {.lib = lib, .c = c, .conn = conn};
    if (!c)
        return;
    dbt_conn_facts f = facts_of(conn);
    dbt_conn_state_pipeline_synced(&c->state, &sem_ops, &x, f);
    watch_if_idle(c, conn, f);
}

/* What PQfinish and PQreset do in two halves: the entry is taken before libpq frees conn (NULL
 * when there is none), and what it held goes back after. */
static dbt_conn *take_entry(PGconn *conn)
{
    const dbt_lib *lib = throttle_lib();
    if (!lib->active && !lib->broken)
        return NULL;
    dbt_cancel_forget_conn(conn);
    dbt_conn *c = dbt_conn_take(conn);
    if (c)
        dbt_session_forget(&c->watch_cell); /* before libpq closes the socket */
    return c;
}

static void give_back(dbt_conn *c)
{
    if (!c)
        return;
    permit_ctx x = {.lib = throttle_lib(), .c = c, .conn = NULL};
    dbt_conn_state_forget(&c->state, &sem_ops, &x);
    if (c->pool)
        dbt_pool_conn_closed(c->pool, c->id); /* dbthrottle clients no longer lists it */
    dbt_conn_free(c);
}

void dbt_throttle_finish(PGconn *conn)
{
    dbt_conn *taken = conn ? take_entry(conn) : NULL;
    __typeof__(&PQfinish) real = DBT_REAL(PQfinish);
    if (real)
        real(conn);
    give_back(taken);
}

void dbt_throttle_forget(PGconn *conn)
{
    give_back(take_entry(conn));
}

const char *dbt_throttle_refusal(const PGconn *conn, const char **sqlstate)
{
    dbt_conn *c = dbt_conn_find(conn, false);
    *sqlstate = c && c->refusal_state ? c->refusal_state : SQLSTATE_REFUSED;
    return c ? c->refusal : NULL;
}

const char *dbt_throttle_error(const PGconn *conn)
{
    dbt_conn *c = dbt_conn_find(conn, false);
    return c && dbt_conn_state_refused(&c->state) ? c->refusal : NULL;
}
