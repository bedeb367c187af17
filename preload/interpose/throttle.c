/* throttle.c - the permit decisions for one connection.
 *
 * A query permit is taken when a command is sent on a connection that holds none, and kept while
 * the connection is in a transaction (INTRANS, INERROR), in pipeline mode, or busy with the
 * command (COPY included); it goes back when the connection is idle again. So BEGIN ... COMMIT
 * is one permit, and a transaction never waits for a permit between its statements: releasing
 * there deadlocks when the holders of every permit wait for a row lock the transaction holds. */
#include "throttle.h"

#include "cancel_map.h"
#include "clock.h"
#include "conn_registry.h"
#include "lib.h"
#include "log.h"
#include "real.h"

#include <fnmatch.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

__thread int dbt_nested;

static int64_t now_ms(void)
{
    return dbt_now_us() / 1000;
}

/* "host:port/dbname" of the server the connection really reaches, as libpq resolved it
 * (defaults, service files and PG* variables applied). Never a password. */
static void default_pool(PGconn *conn, char *out, size_t cap)
{
    const char *host = DBT_REAL(PQhost)(conn), *port = DBT_REAL(PQport)(conn);
    const char *db = DBT_REAL(PQdb)(conn);
    snprintf(out, cap, "%s:%s/%s", host && *host ? host : "localhost",
             port && *port ? port : "5432", db ? db : "");
}

/* DBTHROTTLE_EXEMPT: monitoring, health checks and operators must get through a saturated pool
 * (a watchdog that waits for a permit held by sessions blocked on a lock deadlocks them all). */
/* application_name as the server reports it, or before the connection exists, as the
 * connection string, PGAPPNAME or the defaults set it. */
static bool app_name(PGconn *conn, char *out, size_t cap)
{
    const char *v = DBT_REAL(PQparameterStatus)(conn, "application_name");
    if (v) {
        snprintf(out, cap, "%s", v);
        return true;
    }
    PQconninfoOption *opts = DBT_REAL(PQconninfo)(conn);
    bool found = false;
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "application_name") == 0 && o->val) {
            snprintf(out, cap, "%s", o->val);
            found = true;
        }
    if (opts)
        DBT_REAL(PQconninfoFree)(opts);
    return found;
}

static const char *exempt_rule(const dbt_config *cfg, PGconn *conn)
{
    char app[256];
    for (int i = 0; i < cfg->nexempt; i++) {
        const char *v = NULL;
        switch (cfg->exempt[i].field) {
        case DBT_EXEMPT_APP:
            v = app_name(conn, app, sizeof app) ? app : NULL;
            break;
        case DBT_EXEMPT_USER:
            v = DBT_REAL(PQuser)(conn);
            break;
        case DBT_EXEMPT_DATABASE:
            v = DBT_REAL(PQdb)(conn);
            break;
        }
        if (v && fnmatch(cfg->exempt[i].pattern, v, 0) == 0)
            return cfg->exempt[i].pattern;
    }
    return NULL;
}

#define SQLSTATE_REFUSED  "53300" /* too_many_connections: "insufficient resources" */
#define SQLSTATE_CANCELED "57014" /* query_canceled, as the server says it */

static void set_refusal(dbt_conn *c, dbt_kind kind, const char *fmt_pool, int limit,
                        int64_t waited_ms, const char *why, const char *sqlstate)
{
    char msg[1024];
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
    }
    return c->pool;
}

/* Whether the connection is exempt, decided once per connection. */
static bool is_exempt(const dbt_lib *lib, dbt_conn *c, PGconn *conn)
{
    if (!c->checked_exempt) {
        c->checked_exempt = true;
        const char *rule = exempt_rule(&lib->cfg, conn);
        if (rule) {
            c->exempt = true;
            c->exempt_rule = rule;
        }
    }
    if (c->exempt && dbt_log_enabled(DBT_LOG_INFO)) {
        dbt_field f[] = {DBT_S("conn", c->id), DBT_S("rule", c->exempt_rule)};
        dbt_log(DBT_LOG_INFO, "exempt", f, 2);
    }
    return c->exempt;
}

/* Takes a permit of `kind` for c; false when refused (message set). A cancel of the connection
 * (PQcancel, PQrequestCancel) ends the wait as the server would end a statement. */
static bool take(const dbt_lib *lib, dbt_conn *c, PGconn *conn, dbt_kind kind, int limit,
                 const char *query, dbt_permit **slot)
{
    dbt_pool *pool = pool_of(lib, c, conn);
    if (!pool)
        return true; /* out of memory: better unthrottled than a crash */
    dbt_cancel_wait *cw = dbt_cancel_wait_begin(conn);
    dbt_acquire_opts o = {.limit = limit,
                          .wait_ms = lib->cfg.wait_timeout_ms,
                          .conn = c->id,
                          .query = lib->cfg.log_query ? query : NULL,
                          .interrupted = cw ? dbt_cancel_requested : NULL,
                          .arg = cw,
                          .waker = dbt_cancel_waker(cw)};
    int64_t t0 = now_ms();
    dbt_acq_result r = dbt_acquire(pool, kind, &o, slot);
    dbt_cancel_wait_end(cw);
    const char *name = dbt_pool_name(pool);
    switch (r) {
    case DBT_ACQ_GRANTED:
    case DBT_ACQ_UNTHROTTLED:
        return true;
    case DBT_ACQ_TIMEOUT:
        set_refusal(c, kind, name, limit, now_ms() - t0, "DBTHROTTLE_WAIT_TIMEOUT reached",
                    SQLSTATE_REFUSED);
        return false;
    case DBT_ACQ_INTERRUPTED:
        set_refusal(c, kind, name, limit, now_ms() - t0, "canceling statement due to user request",
                    SQLSTATE_CANCELED);
        return false;
    case DBT_ACQ_REFUSED:
    default:
        set_refusal(c, kind, name, limit, now_ms() - t0,
                    "Redis is unreachable and DBTHROTTLE_ON_REDIS_ERROR=closed", SQLSTATE_REFUSED);
        return false;
    }
}

/* A permit Redis may have given to another (its lease ran out unrenewed, or Redis lost it) is
 * given back, so that the command goes through the queue again rather than run over the limit:
 * even inside a transaction, where the permit was being kept. */
static void drop_if_lost(dbt_conn *c, dbt_permit **slot)
{
    if (!*slot || !dbt_permit_lost(*slot))
        return;
    if (dbt_log_enabled(DBT_LOG_WARN)) {
        dbt_field f[] = {DBT_S("conn", c->id), DBT_S("permit", dbt_permit_id(*slot)),
                         DBT_S("effect", "the next command acquires again, through the queue")};
        dbt_log(DBT_LOG_WARN, "reacquire", f, sizeof f / sizeof *f);
    }
    if (*slot == c->query_permit && c->idle_in_tx_since)
        c->idle_in_tx_since = 0;
    dbt_release(*slot);
    *slot = NULL;
}

/* What every permit decision starts with: the connection's entry, its last refusal forgotten,
 * and a bad configuration refused. Returns NULL when the command needs no decision (`*go` says
 * whether it may proceed). */
static dbt_conn *begin(PGconn *conn, const dbt_lib *lib, bool *go)
{
    *go = true;
    if (!lib->active && !lib->broken)
        return NULL;
    dbt_conn *c = dbt_conn_find(conn, true);
    if (!c)
        return NULL; /* out of memory: better unthrottled than a crash */
    free(c->refusal);
    c->refusal = NULL;
    if (lib->broken) {
        char msg[DBT_ERRLEN + 64];
        snprintf(msg, sizeof msg, "dbthrottle: bad configuration: %s\n", lib->error);
        c->refusal = strdup(msg);
        c->refusal_state = SQLSTATE_REFUSED;
        *go = false;
        return NULL;
    }
    return c;
}

bool dbt_throttle_connect(PGconn *conn)
{
    const dbt_lib *lib = dbt_lib_get();
    bool go;
    dbt_conn *c = begin(conn, lib, &go);
    if (!c)
        return go;
    if (c->conn_permit || lib->cfg.max_connections == 0 || is_exempt(lib, c, conn))
        return true;
    c->had_conn_permit =
        take(lib, c, conn, DBT_KIND_CONN, lib->cfg.max_connections, NULL, &c->conn_permit);
    return c->had_conn_permit;
}

void dbt_throttle_connect_failed(PGconn *conn)
{
    const dbt_lib *lib = dbt_lib_get();
    if (!lib->active)
        return;
    dbt_conn *c = dbt_conn_find(conn, false);
    if (c && c->conn_permit) {
        dbt_release(c->conn_permit);
        c->conn_permit = NULL;
    }
}

bool dbt_throttle_before(PGconn *conn, const char *query)
{
    const dbt_lib *lib = dbt_lib_get();
    bool go;
    dbt_conn *c = begin(conn, lib, &go);
    if (!c)
        return go;
    drop_if_lost(c, &c->conn_permit);
    if (!c->conn_permit && lib->cfg.max_connections > 0 && c->had_conn_permit &&
        !take(lib, c, conn, DBT_KIND_CONN, lib->cfg.max_connections, NULL, &c->conn_permit))
        return false;
    if (c->query_parked) {
        /* Kept since the last command: ours again, unless a waiter took it back meanwhile. */
        c->query_parked = false;
        dbt_permit_unpark(&c->query_permit);
    }
    drop_if_lost(c, &c->query_permit);
    if (c->query_permit) {
        if (c->idle_in_tx_since) {
            dbt_permit_note_idle(c->query_permit, false);
            c->idle_in_tx_since = 0;
        }
        return true;
    }
    if (lib->cfg.max_queries == 0 || is_exempt(lib, c, conn))
        return true;
    return take(lib, c, conn, DBT_KIND_QUERY, lib->cfg.max_queries, query, &c->query_permit);
}

void dbt_throttle_after(PGconn *conn)
{
    const dbt_lib *lib = dbt_lib_get();
    if (!lib->active)
        return;
    dbt_conn *c = dbt_conn_find(conn, false);
    if (!c || !c->query_permit || c->query_parked)
        return;
    PGTransactionStatusType tx = DBT_REAL(PQtransactionStatus)(conn);
    bool pipeline_idle = DBT_REAL(PQpipelineStatus)(conn) == PQ_PIPELINE_OFF ||
                         (c->pipe_sent == 0 && c->pipe_syncs == 0);
    if (tx == PQTRANS_IDLE && pipeline_idle) {
        if (dbt_permit_park(c->query_permit)) {
            c->query_parked = true; /* for the next command, while nobody waits */
        } else {
            dbt_release(c->query_permit);
            c->query_permit = NULL;
        }
        c->idle_in_tx_since = 0;
        c->pipe_sent = c->pipe_syncs = 0;
    } else if ((tx == PQTRANS_INTRANS || tx == PQTRANS_INERROR) && !c->idle_in_tx_since) {
        /* Kept across the transaction: see the comment at the top of this file. */
        c->idle_in_tx_since = 1;
        dbt_permit_note_idle(c->query_permit, true);
    }
}

void dbt_throttle_forget(PGconn *conn)
{
    const dbt_lib *lib = dbt_lib_get();
    if (!lib->active && !lib->broken)
        return;
    dbt_cancel_forget_conn(conn);
    dbt_conn *c = dbt_conn_take(conn);
    if (c) {
        dbt_release(c->query_permit);
        dbt_release(c->conn_permit);
    }
    dbt_conn_free(c);
}

static const char *c_state(const PGconn *conn)
{
    dbt_conn *c = dbt_conn_find(conn, false);
    return c && c->refusal_state ? c->refusal_state : SQLSTATE_REFUSED;
}

PGresult *dbt_throttle_refused_result(PGconn *conn)
{
    PGresult *r = DBT_REAL(PQmakeEmptyPGresult)(conn, PGRES_FATAL_ERROR);
    const char *msg = dbt_throttle_error(conn);
    if (r && msg)
        dbt_refused_add(r, msg, c_state(conn));
    return r;
}

const char *dbt_throttle_error(const PGconn *conn)
{
    dbt_conn *c = dbt_conn_find(conn, false);
    return c ? c->refusal : NULL;
}

static dbt_conn *pipeline_conn(PGconn *conn)
{
    const dbt_lib *lib = dbt_lib_get();
    return lib->active ? dbt_conn_find(conn, false) : NULL;
}

void dbt_throttle_pipeline_sent(PGconn *conn)
{
    dbt_conn *c = pipeline_conn(conn);
    if (c)
        c->pipe_sent++;
}

void dbt_throttle_pipeline_sync(PGconn *conn)
{
    dbt_conn *c = pipeline_conn(conn);
    if (c) {
        c->pipe_syncs++;
        c->pipe_sent = 0;
    }
}

void dbt_throttle_pipeline_synced(PGconn *conn)
{
    dbt_conn *c = pipeline_conn(conn);
    if (c && c->pipe_syncs > 0)
        c->pipe_syncs--;
}
