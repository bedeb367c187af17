/* hooks_dlsym.c - programs that find libpq's functions with dlsym(handle, ...) are throttled too.
 *
 * LD_PRELOAD only wins the global symbol lookup; a program that dlopen()s libpq and asks the handle
 * for "PQexec" (Python's ctypes, hence psycopg 3) gets libpq's own function. So dlsym itself is
 * interposed: when the answer is exactly the libpq function our hook forwards to, the hook is
 * returned instead. A different libpq (a private copy bundled with a wheel or gem) is left alone,
 * since our hooks forward to the global one and a PGconn must go back to the libpq that made it. */
#include "hook.h"
#include "real.h"

#include <dlfcn.h>
#include <libpq-fe.h>
#include <string.h>

typedef struct {
    const char *name;
    void *hook;
} hooked;

/* Every libpq function we hook (hooks.def, the list the exports are made from). */
static const hooked table[] = {
#define DBT_HOOK(name) {#name, (void *)name},
#include "hooks.def"
#undef DBT_HOOK
};

HOOK void *dlsym(void *handle, const char *symbol)
{
    void *(*real)(void *, const char *) = dbt_real_dlsym();
    if (!real)
        return NULL;
    /* RTLD_NEXT and RTLD_DEFAULT are answered relative to the calling object, which glibc finds
     * from the return address: these must reach glibc as a tail call (a jump), so that the caller
     * it sees is the program's code, not ours. Other preloaded interposers rely on this. Every
     * name in hooks.def starts with PQ (a lo_* hook would need this widened; the integration
     * test's dlsym check would report it). */
    if (handle == RTLD_NEXT || handle == RTLD_DEFAULT || symbol[0] != 'P' || symbol[1] != 'Q')
        return real(handle, symbol);
    void *f = real(handle, symbol);
    if (!f)
        return f;
    for (size_t i = 0; i < sizeof table / sizeof *table; i++)
        if (strcmp(symbol, table[i].name) == 0) {
            /* Only the libpq our hooks forward to; never another copy. */
            if (dbt_real_peek(symbol) != f)
                return f;
            /* A program that resolves libpq through a handle (ctypes) may cancel from a signal
             * handler later, where nothing may be looked up: resolved now. */
            dbt_real_resolve_ahead();
            return table[i].hook;
        }
    return f;
}
