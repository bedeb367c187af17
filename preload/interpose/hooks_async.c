/* hooks_async.c - what an event loop asks of a connection, answered while its command is held
 * (held.h): the connection reads busy until the library sends the command, and every call that
 * reaches libpq meanwhile is made under the held state's lock, never beside our own send. On a
 * connection holding nothing, each hook is one atomic load and libpq's own call. */
#include "held.h"
#include "hook.h"
#include "real.h"
#include "send_op.h"
#include "throttle.h"

/* libpq's call `call`, under the held state's lock when there is one; `held_value` is the answer
 * while the command is held and not yet sent (it may name `real`, libpq's function). */
#define HELD_OR_REAL(fail, held_value, call, ...)                                                  \
    do {                                                                                           \
        __typeof__(&call) real = DBT_REAL(call);                                                   \
        if (!real)                                                                                 \
            return fail;                                                                           \
        dbt_held *h = dbt_nested ? NULL : dbt_held_lock(conn);                                     \
        if (!h)                                                                                    \
            return real(__VA_ARGS__);                                                              \
        __typeof__(real(__VA_ARGS__)) r =                                                          \
            dbt_held_waiting(h) && !dbt_held_gone(h) ? (held_value) : real(__VA_ARGS__);           \
        dbt_held_unlock(h);                                                                        \
        return r;                                                                                  \
    } while (0)

/* Busy while held: the program waits for readability, as for a command the server still runs. */
HOOK int PQisBusy(PGconn *conn)
{
    HELD_OR_REAL(0, 1, PQisBusy, conn);
}

/* Notifications and notices may still arrive while a command is held: libpq reads them. A
 * session found gone ends the wait at once. */
HOOK int PQconsumeInput(PGconn *conn)
{
    __typeof__(&PQconsumeInput) real = DBT_REAL(PQconsumeInput);
    if (!real)
        return 0;
    dbt_held *h = dbt_nested ? NULL : dbt_held_lock(conn);
    if (!h)
        return real(conn);
    int r = real(conn);
    if (r == 0)
        (void)dbt_held_gone(h);
    dbt_held_unlock(h);
    return r;
}

/* Asked for a held command: made right after our thread sends it. */
HOOK int PQsetSingleRowMode(PGconn *conn)
{
    __typeof__(&PQsetSingleRowMode) real = DBT_REAL(PQsetSingleRowMode);
    if (!real)
        return 0;
    dbt_held *h = dbt_nested ? NULL : dbt_held_lock(conn);
    if (!h)
        return real(conn);
    int r = dbt_held_single_row(h, conn);
    dbt_held_unlock(h);
    return r;
}

HOOK PGnotify *PQnotifies(PGconn *conn)
{
    HELD_OR_REAL(NULL, real(conn), PQnotifies, conn);
}

/* Nothing is left to flush of a held command: our thread flushes it all when it sends it. */
HOOK int PQflush(PGconn *conn)
{
    HELD_OR_REAL(-1, 0, PQflush, conn);
}

HOOK int PQsetnonblocking(PGconn *conn, int arg)
{
    HELD_OR_REAL(-1, real(conn, arg), PQsetnonblocking, conn, arg);
}

/* A command is running, as far as the program can tell. */
HOOK PGTransactionStatusType PQtransactionStatus(const PGconn *conn)
{
    HELD_OR_REAL(PQTRANS_UNKNOWN, PQTRANS_ACTIVE, PQtransactionStatus, conn);
}

/* libpq refuses to enter pipeline mode on a busy connection; so do we on one whose command is
 * held. */
HOOK int PQenterPipelineMode(PGconn *conn)
{
    __typeof__(&PQenterPipelineMode) real = DBT_REAL(PQenterPipelineMode);
    if (!real)
        return 0;
    dbt_held *h = dbt_nested ? NULL : dbt_held_lock(conn);
    if (!h)
        return real(conn);
    int r;
    if (dbt_held_waiting(h)) {
        dbt_held_set_error(h, "cannot enter pipeline mode, connection not idle\n");
        r = 0;
    } else {
        r = real(conn);
    }
    dbt_held_unlock(h);
    return r;
}

/* Behind the commands held on the connection, like them. */
HOOK int PQsendFlushRequest(PGconn *conn)
{
    __typeof__(&PQsendFlushRequest) real = DBT_REAL(PQsendFlushRequest);
    if (!real)
        return 0;
    dbt_send_op op = {.type = DBT_OP_FLUSH_REQUEST};
    int rc;
    if (!dbt_nested && conn && dbt_held_enqueue(conn, &op, &rc))
        return rc;
    return real(conn);
}
