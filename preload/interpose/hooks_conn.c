/* hooks_conn.c - connections: a connection permit before the socket opens, and everything a
 * connection holds given back when it ends.
 *
 * Every way of connecting (PQconnectdb, PQconnectdbParams, PQsetdbLogin, PQconnectStart(Params)
 * with PQconnectPoll, PQreset, PQresetStart/PQresetPoll) passes through PQconnectPoll in state
 * CONNECTION_NEEDED before it opens a socket: libpq calls it through its PLT, so this one hook
 * sees them all, after libpq has resolved the target (defaults, service file, PG* variables).
 *
 * The functions that make a connection are hooked too, to add client_connection_check_interval
 * to its startup options (server_check.c): PQconnectStart(Params) (PQconnectdb(Params) reach them
 * through libpq's PLT, and retry here when a server refuses the option) and PQsetdbLogin. */
#include "held.h"
#include "hook.h"
#include "real.h"
#include "server_check.h"
#include "throttle.h"

/* ---- making a connection: the user's arguments, and the real call that takes them ----------- */

typedef struct {
    const char *conninfo;
    const char *const *keys, *const *vals;
    int expand;
    const char *host, *port, *options, *tty, *db, *login, *pwd;
} connect_args;

static PGconn *real_start(void *ctx)
{
    const connect_args *a = ctx;
    __typeof__(&PQconnectStart) real = DBT_REAL(PQconnectStart);
    return real ? real(a->conninfo) : NULL;
}

static PGconn *real_start_params(void *ctx)
{
    const connect_args *a = ctx;
    __typeof__(&PQconnectStartParams) real = DBT_REAL(PQconnectStartParams);
    return real ? real(a->keys, a->vals, a->expand) : NULL;
}

static PGconn *real_setdb_login(void *ctx)
{
    const connect_args *a = ctx;
    __typeof__(&PQsetdbLogin) real = DBT_REAL(PQsetdbLogin);
    return real ? real(a->host, a->port, a->options, a->tty, a->db, a->login, a->pwd) : NULL;
}

HOOK PGconn *PQconnectStart(const char *conninfo)
{
    connect_args a = {.conninfo = conninfo};
    return dbt_check_connect(real_start, &a, false);
}

HOOK PGconn *PQconnectStartParams(const char *const *keywords, const char *const *values,
                                  int expand_dbname)
{
    connect_args a = {.keys = keywords, .vals = values, .expand = expand_dbname};
    return dbt_check_connect(real_start_params, &a, false);
}

HOOK PGconn *PQsetdbLogin(const char *pghost, const char *pgport, const char *pgoptions,
                          const char *pgtty, const char *dbName, const char *login, const char *pwd)
{
    connect_args a = {.host = pghost,
                      .port = pgport,
                      .options = pgoptions,
                      .tty = pgtty,
                      .db = dbName,
                      .login = login,
                      .pwd = pwd};
    return dbt_check_connect(real_setdb_login, &a, true);
}

/* The blocking ones complete inside libpq, past PQconnectStart(Params): a server that refused
 * our option is known once they return, and they are made once more, without it. */
HOOK PGconn *PQconnectdb(const char *conninfo)
{
    __typeof__(&PQconnectdb) real = DBT_REAL(PQconnectdb);
    PGconn *conn = real ? real(conninfo) : NULL;
    if (dbt_check_refused(conn)) {
        PQfinish(conn);
        conn = real(conninfo);
    }
    return conn;
}

HOOK PGconn *PQconnectdbParams(const char *const *keywords, const char *const *values,
                               int expand_dbname)
{
    __typeof__(&PQconnectdbParams) real = DBT_REAL(PQconnectdbParams);
    PGconn *conn = real ? real(keywords, values, expand_dbname) : NULL;
    if (dbt_check_refused(conn)) {
        PQfinish(conn);
        conn = real(keywords, values, expand_dbname);
    }
    return conn;
}

HOOK void PQfinish(PGconn *conn)
{
    /* Permits go back once the socket is closed: given back first, the next connection they
     * admit could reach the server while this one is still open there. */
    dbt_held_withdraw(conn); /* a held command is never sent */
    dbt_throttle_finish(conn);
}

HOOK void PQreset(PGconn *conn)
{
    dbt_held_withdraw(conn);
    if (conn)
        dbt_throttle_forget(conn);
    __typeof__(&PQreset) real = DBT_REAL(PQreset);
    if (real)
        real(conn);
}

HOOK int PQresetStart(PGconn *conn)
{
    dbt_held_withdraw(conn);
    if (conn)
        dbt_throttle_forget(conn);
    __typeof__(&PQresetStart) real = DBT_REAL(PQresetStart);
    return real ? real(conn) : 0;
}

HOOK PostgresPollingStatusType PQconnectPoll(PGconn *conn)
{
    __typeof__(&PQconnectPoll) real = DBT_REAL(PQconnectPoll);
    if (!real)
        return PGRES_POLLING_FAILED;
    dbt_real_resolve_ahead(); /* before any cancel, which may come from a signal handler */
    bool needed = conn && DBT_REAL(PQstatus)(conn) == CONNECTION_NEEDED;
    if (needed && dbt_check_probing())
        return PGRES_POLLING_FAILED; /* a probe for its options only: no socket, no permit */
    if (needed && !dbt_throttle_connect(conn))
        return PGRES_POLLING_FAILED; /* libpq marks it CONNECTION_BAD; the message is ours */
    PostgresPollingStatusType st = real(conn);
    if (st == PGRES_POLLING_FAILED && conn) {
        dbt_check_failed(conn);
        dbt_throttle_connect_failed(conn);
    } else if (st == PGRES_POLLING_OK && conn)
        dbt_throttle_connected(conn);
    return st;
}
