/* hooks_cancel.c - PQcancel and friends: a cancel also ends a wait for a permit.
 *
 * A command that waits in our queue has not reached the server, so the server's cancel finds
 * nothing to cancel; without these hooks Ctrl-C in psql would do nothing until a permit came.
 * Each hook tells cancel_map.c and then calls libpq's own function, because the command may have
 * got its permit and reached the server in the meantime.
 *
 * PQcancel (and PQrequestCancel, which old programs call from SIGINT) may run in a signal
 * handler: there nothing may look a symbol up (dlsym takes locks and allocates its error
 * message), log or allocate. libpq 15's PQrequestCancel itself calls PQgetCancel, PQcancel and
 * PQfreeCancel through its PLT, i.e. our hooks. So libpq's four functions are resolved together,
 * beforehand, at every point
 * that comes before a program can cancel: when the library is loaded (if libpq already is), when
 * a program resolves a libpq function through dlsym (ctypes: libpq is then not in the global
 * scope), at each connect and at PQgetCancel. In the handler the hooks only read atomics. */
#include "cancel_map.h"
#include "hook.h"
#include "real.h"

#include <libpq-fe.h>

static _Atomic(void *) real_cancel, real_request_cancel, real_get_cancel, real_free_cancel;

/* Quiet: at load time libpq may not be loaded yet (a program that dlopens it later). */
static void resolve(_Atomic(void *) *slot, const char *name)
{
    if (atomic_load_explicit(slot, memory_order_acquire))
        return;
    void *f = dbt_real_peek(name);
    if (f)
        atomic_store_explicit(slot, f, memory_order_release);
}

void dbt_cancel_resolve_real(void)
{
    resolve(&real_get_cancel, "PQgetCancel");
    resolve(&real_free_cancel, "PQfreeCancel");
    resolve(&real_cancel, "PQcancel");
    resolve(&real_request_cancel, "PQrequestCancel");
}

__attribute__((constructor)) static void resolve_at_load(void)
{
    dbt_cancel_resolve_real();
}

HOOK PGcancel *PQgetCancel(PGconn *conn)
{
    /* Resolved already when PQrequestCancel calls this from a handler (see the top). */
    __typeof__(&PQgetCancel) real = (__typeof__(&PQgetCancel))atomic_load(&real_get_cancel);
    if (!real) {
        dbt_cancel_resolve_real();
        real = (__typeof__(&PQgetCancel))dbt_real_lookup(&real_get_cancel, "PQgetCancel");
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
    __typeof__(&PQfreeCancel) real = (__typeof__(&PQfreeCancel))atomic_load(&real_free_cancel);
    if (!real)
        real = (__typeof__(&PQfreeCancel))dbt_real_lookup(&real_free_cancel, "PQfreeCancel");
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
    __typeof__(&PQcancel) real = (__typeof__(&PQcancel))atomic_load(&real_cancel);
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
        (__typeof__(&PQrequestCancel))atomic_load(&real_request_cancel);
    return real ? real(conn) : 0; /* unresolved only if no connection was ever made through us */
}
