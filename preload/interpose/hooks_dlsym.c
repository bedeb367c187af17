/* hooks_dlsym.c - programs that find libpq's functions with dlsym(handle, ...) are throttled too.
 *
 * LD_PRELOAD only wins the global symbol lookup; a program that dlopen()s libpq and asks the handle
 * for "PQexec" (Python's ctypes, hence psycopg 3) gets libpq's own function. So dlsym itself is
 * interposed: when the answer is exactly the libpq function our hook forwards to, the hook is
 * returned instead. A different libpq (a private copy bundled with a wheel or gem) is left alone,
 * since our hooks forward to the global one and a PGconn must go back to the libpq that made it. */
#include "real.h"
#include "throttle.h"

#include <dlfcn.h>
#include <string.h>

#define HOOK __attribute__((visibility("default")))

typedef struct {
    const char *name;
    void *hook;
} hooked;

/* Every function that hooks_*.c defines (the same list as exports.map). */
static const hooked table[] = {
    {"PQexec", (void *)PQexec},
    {"PQexecParams", (void *)PQexecParams},
    {"PQprepare", (void *)PQprepare},
    {"PQexecPrepared", (void *)PQexecPrepared},
    {"PQdescribePrepared", (void *)PQdescribePrepared},
    {"PQdescribePortal", (void *)PQdescribePortal},
    {"PQfn", (void *)PQfn},
    {"PQsendQuery", (void *)PQsendQuery},
    {"PQsendQueryParams", (void *)PQsendQueryParams},
    {"PQsendPrepare", (void *)PQsendPrepare},
    {"PQsendQueryPrepared", (void *)PQsendQueryPrepared},
    {"PQsendDescribePrepared", (void *)PQsendDescribePrepared},
    {"PQsendDescribePortal", (void *)PQsendDescribePortal},
    {"PQgetResult", (void *)PQgetResult},
    {"PQexitPipelineMode", (void *)PQexitPipelineMode},
    {"PQpipelineSync", (void *)PQpipelineSync},
    {"PQerrorMessage", (void *)PQerrorMessage},
    {"PQresultErrorMessage", (void *)PQresultErrorMessage},
    {"PQresultVerboseErrorMessage", (void *)PQresultVerboseErrorMessage},
    {"PQresultErrorField", (void *)PQresultErrorField},
    {"PQclear", (void *)PQclear},
    {"PQfinish", (void *)PQfinish},
    {"PQreset", (void *)PQreset},
    {"PQresetStart", (void *)PQresetStart},
    {"PQconnectPoll", (void *)PQconnectPoll},
};

HOOK void *dlsym(void *handle, const char *symbol)
{
    void *(*real)(void *, const char *) = dbt_real_dlsym();
    if (!real)
        return NULL;
    /* RTLD_NEXT and RTLD_DEFAULT are answered relative to the calling object, which glibc finds
     * from the return address: these must reach glibc as a tail call (a jump), so that the caller
     * it sees is the program's code, not ours. Other preloaded interposers rely on this. */
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || symbol[0] != 'P' || symbol[1] != 'Q')
        return real(handle, symbol);
    void *f = real(handle, symbol);
    if (!f)
        return f;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(symbol, table[i].name) == 0) {
            /* Only the libpq our hooks forward to; never another copy. */
            return dbt_real_peek(symbol) == f ? table[i].hook : f;
        }
    return f;
}
