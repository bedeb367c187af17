/* hooks_conn.c - connections: a connection permit before the socket opens, and everything a
 * connection holds given back when it ends.
 *
 * Every way of connecting (PQconnectdb, PQconnectdbParams, PQsetdbLogin, PQconnectStart(Params)
 * with PQconnectPoll, PQreset, PQresetStart/PQresetPoll) passes through PQconnectPoll in state
 * CONNECTION_NEEDED before it opens a socket: libpq calls it through its PLT, so this one hook
 * sees them all, after libpq has resolved the target (defaults, service file, PG* variables). */
#include "cancel_map.h"
#include "held.h"
#include "hook.h"
#include "real.h"
#include "throttle.h"

HOOK void PQfinish(PGconn *conn)
{
    /* Permits go back once the socket is closed: given back first, the next connection they
     * admit could reach the server while this one is still open there. */
    dbt_held_withdraw(conn); /* a held command is never sent */
    struct dbt_conn *taken = conn ? dbt_throttle_take(conn) : NULL;
    __typeof__(&PQfinish) real = DBT_REAL(PQfinish);
    if (real)
        real(conn);
    dbt_throttle_give_back(taken);
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
    dbt_cancel_resolve_real(); /* before any cancel, which may come from a signal handler */
    if (conn && DBT_REAL(PQstatus)(conn) == CONNECTION_NEEDED && !dbt_throttle_connect(conn))
        return PGRES_POLLING_FAILED; /* libpq marks it CONNECTION_BAD; the message is ours */
    PostgresPollingStatusType st = real(conn);
    if (st == PGRES_POLLING_FAILED && conn)
        dbt_throttle_connect_failed(conn);
    else if (st == PGRES_POLLING_OK && conn)
        dbt_throttle_connected(conn);
    return st;
}
