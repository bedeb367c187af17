/* real.c - resolves the real libpq functions behind our hooks.
 *
 * dlsym(RTLD_NEXT) is not always enough: a libpq loaded with RTLD_LOCAL (psycopg2's extension
 * module pulls it in that way) is not "next" in the global scope, so RTLD_NEXT finds nothing and a
 * naive preload crashes Python on its first connection. Then the libpq.so.5 already in the process
 * is asked directly (RTLD_NOLOAD: never load one ourselves). The functions a signal handler may
 * reach (the cancels) are resolved ahead, at load and before a program can cancel (real.h). */
#include "real.h"

#include "log.h"

#include <dlfcn.h>
#include <stddef.h>

/* dlsym is interposed too (hooks_dlsym.c): ours must reach glibc's. dlvsym is not interposed.
 * glibc 2.34 moved dlsym into libc (version GLIBC_2.34); older ones have GLIBC_2.2.5. */
dbt_dlsym_fn dbt_real_dlsym(void)
{
    static _Atomic(void *) real;
    void *f = atomic_load_explicit(&real, memory_order_acquire);
    if (!f) {
        f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.34");
        if (!f)
            f = dlvsym(RTLD_NEXT, "dlsym", "GLIBC_2.2.5");
        atomic_store_explicit(&real, f, memory_order_release);
    }
    return (dbt_dlsym_fn)f;
}

dbt_dlopen_fn dbt_real_dlopen(void)
{
    static _Atomic(void *) real;
    void *f = atomic_load_explicit(&real, memory_order_acquire);
    if (!f) {
        dbt_dlsym_fn real_dlsym = dbt_real_dlsym();
        f = real_dlsym ? real_dlsym(RTLD_NEXT, "dlopen") : NULL;
        if (f)
            atomic_store_explicit(&real, f, memory_order_release);
    }
    return (dbt_dlopen_fn)f;
}

void *dbt_real_peek(const char *name)
{
    dbt_dlsym_fn real_dlsym = dbt_real_dlsym();
    if (!real_dlsym)
        return NULL;
    void *f = real_dlsym(RTLD_NEXT, name);
    if (!f) {
        /* glibc's dlopen: ours (hooks_dlopen.c) would only pass these flags on. */
        dbt_dlopen_fn real_dlopen = dbt_real_dlopen();
        void *h = real_dlopen ? real_dlopen("libpq.so.5", RTLD_LAZY | RTLD_NOLOAD) : NULL;
        if (h) {
            f = real_dlsym(h, name);
            dlclose(h);
        }
    }
    return f;
}

void *dbt_real_lookup(_Atomic(void *) *slot, const char *name)
{
    void *f = atomic_load_explicit(slot, memory_order_acquire);
    if (f)
        return f;
    f = dbt_real_peek(name);
    if (f) {
        atomic_store_explicit(slot, f, memory_order_release);
    } else {
        dbt_field fl[] = {DBT_S("function", name),
                          DBT_S("error", "cannot find the real libpq function")};
        dbt_log(DBT_LOG_ERROR, "symbol_error", fl, 2);
    }
    return f;
}

/* ---- resolved ahead ------------------------------------------------------------------------- */

static _Atomic(void *) ahead[DBT_AHEAD_N];
static const char *const ahead_names[DBT_AHEAD_N] = {
    [DBT_AHEAD_GET_CANCEL] = "PQgetCancel",
    [DBT_AHEAD_FREE_CANCEL] = "PQfreeCancel",
    [DBT_AHEAD_CANCEL] = "PQcancel",
    [DBT_AHEAD_REQUEST_CANCEL] = "PQrequestCancel",
};

void dbt_real_resolve_ahead(void)
{
    for (int i = 0; i < DBT_AHEAD_N; i++) {
        if (atomic_load_explicit(&ahead[i], memory_order_acquire))
            continue;
        void *f = dbt_real_peek(ahead_names[i]);
        if (f)
            atomic_store_explicit(&ahead[i], f, memory_order_release);
    }
}

__attribute__((constructor)) static void resolve_ahead_at_load(void)
{
    dbt_real_resolve_ahead();
}

void *dbt_real_ahead(dbt_ahead_fn fn)
{
    return atomic_load_explicit(&ahead[fn], memory_order_acquire);
}

void *dbt_real_ahead_lookup(dbt_ahead_fn fn)
{
    return dbt_real_lookup(&ahead[fn], ahead_names[fn]);
}
