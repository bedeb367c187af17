/* hooks_conn.c - the end of a connection gives back what it holds. */
#include "real.h"
#include "throttle.h"

#define HOOK __attribute__((visibility("default")))

HOOK void PQfinish(PGconn *conn)
{
    if (conn)
        dbt_throttle_forget(conn);
    __typeof__(&PQfinish) real = DBT_REAL(PQfinish);
    if (real)
        real(conn);
}

HOOK void PQreset(PGconn *conn)
{
    if (conn)
        dbt_throttle_forget(conn);
    __typeof__(&PQreset) real = DBT_REAL(PQreset);
    if (real)
        real(conn);
}

HOOK int PQresetStart(PGconn *conn)
{
    if (conn)
        dbt_throttle_forget(conn);
    __typeof__(&PQresetStart) real = DBT_REAL(PQresetStart);
    return real ? real(conn) : 0;
}
