/* hooks_cancel.c - PQcancel and friends: a cancel also ends a wait for a permit.
 *
 * A command that waits in our queue has not reached the server, so the server's cancel finds
 * nothing to cancel; without these hooks Ctrl-C in psql would do nothing until a permit came.
 * Each hook tells cancel_map.c and then calls libpq's own function, because the command may have
 * got its permit and reached the server in the meantime. PQcancel may run in a signal handler:
 * its hook only touches atomics, and its real function is resolved beforehand, in PQgetCancel. */
#include "cancel_map.h"
#include "hook.h"
#include "real.h"

#include <libpq-fe.h>

static _Atomic(void *) real_cancel;

HOOK PGcancel *PQgetCancel(PGconn *conn)
{
    __typeof__(&PQgetCancel) real = DBT_REAL(PQgetCancel);
    if (!real)
        return NULL;
    dbt_real_lookup(&real_cancel, "PQcancel"); /* not from a signal handler, later */
    PGcancel *cancel = real(conn);
    dbt_cancel_note(conn, cancel);
    return cancel;
}

HOOK void PQfreeCancel(PGcancel *cancel)
{
    dbt_cancel_forget(cancel);
    __typeof__(&PQfreeCancel) real = DBT_REAL(PQfreeCancel);
    if (real)
        real(cancel);
}

HOOK int PQcancel(PGcancel *cancel, char *errbuf, int errbufsize)
{
    dbt_cancel_fire(cancel);
    __typeof__(&PQcancel) real = (__typeof__(&PQcancel))atomic_load(&real_cancel);
    if (!real) /* a PGcancel we did not see made: not in a signal handler, presumably */
        real = (__typeof__(&PQcancel))dbt_real_lookup(&real_cancel, "PQcancel");
    return real ? real(cancel, errbuf, errbufsize) : 0;
}

HOOK int PQrequestCancel(PGconn *conn)
{
    dbt_cancel_fire_conn(conn);
    __typeof__(&PQrequestCancel) real = DBT_REAL(PQrequestCancel);
    return real ? real(conn) : 0;
}
