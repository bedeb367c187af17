/* hooks_cancel.c - PQcancel and friends: a cancel also ends a wait for a permit.
 *
 * A command that waits in our queue has not reached the server, so the server's cancel finds
 * nothing to cancel; without these hooks Ctrl-C in psql would do nothing until a permit came.
 * Each hook tells cancel_map.c and then calls libpq's own function, because the command may have
 * got its permit and reached the server in the meantime.
 *
 * PQcancel (and PQrequestCancel, which old programs call from SIGINT) may run in a signal
 * handler: there nothing may look a symbol up, log or allocate. real.c resolves libpq's four
 * cancel functions ahead (real.h, "resolved ahead"); in the handler the hooks only read atomics. */
#include "cancel_map.h"
#include "hook.h"
#include "real.h"

#include <libpq-fe.h>

HOOK PGcancel *PQgetCancel(PGconn *conn)
{
    /* Resolved already when PQrequestCancel calls this from a handler (see the top). */
    __typeof__(&PQgetCancel) real = (__typeof__(&PQgetCancel))dbt_real_ahead(DBT_AHEAD_GET_CANCEL);
    if (!real) {
        dbt_real_resolve_ahead();
        real = (__typeof__(&PQgetCancel))dbt_real_ahead_lookup(DBT_AHEAD_GET_CANCEL);
    }
    if (!real)
        return NULL;
    PGcancel *cancel = real(conn);
    dbt_cancel_note(conn, cancel);
    return cancel;
}

HOOK void PQfreeCancel(PGcancel *cancel)
{
    dbt_cancel_forget(cancel);
    __typeof__(&PQfreeCancel) real =
        (__typeof__(&PQfreeCancel))dbt_real_ahead(DBT_AHEAD_FREE_CANCEL);
    if (!real)
        real = (__typeof__(&PQfreeCancel))dbt_real_ahead_lookup(DBT_AHEAD_FREE_CANCEL);
    if (real)
        real(cancel);
}

/* libpq's wording of a failure, into the caller's buffer, with nothing but stores. */
static void say(char *buf, int cap, const char *msg)
{
    int i = 0;
    for (; buf && i + 1 < cap && msg[i]; i++)
        buf[i] = msg[i];
    if (buf && cap > 0)
        buf[i] = '\0';
}

HOOK int PQcancel(PGcancel *cancel, char *errbuf, int errbufsize)
{
    dbt_cancel_fire(cancel);
    __typeof__(&PQcancel) real = (__typeof__(&PQcancel))dbt_real_ahead(DBT_AHEAD_CANCEL);
    if (!real) {
        /* Never here for a PGcancel our PQgetCancel made: it resolved PQcancel first. */
        say(errbuf, errbufsize, "dbthrottle: libpq's PQcancel was not found");
        return 0;
    }
    return real(cancel, errbuf, errbufsize);
}

HOOK int PQrequestCancel(PGconn *conn)
{
    dbt_cancel_fire_conn(conn);
    __typeof__(&PQrequestCancel) real =
        (__typeof__(&PQrequestCancel))dbt_real_ahead(DBT_AHEAD_REQUEST_CANCEL);
    return real ? real(conn) : 0; /* unresolved only if no connection was ever made through us */
}
