/* real.h - the real libpq functions behind our hooks, resolved lazily and robustly. */
#ifndef DBT_REAL_H
#define DBT_REAL_H

#include <stdatomic.h>

typedef void *(*dbt_dlsym_fn)(void *, const char *);
typedef void *(*dbt_dlopen_fn)(const char *, int);

/* glibc's own dlsym (ours interposes it). NULL if it cannot be found. */
dbt_dlsym_fn dbt_real_dlsym(void);

/* glibc's own dlopen (ours interposes it: hooks_dlopen.c), the next definition after ours,
 * found quietly. NULL if it cannot be found. */
dbt_dlopen_fn dbt_real_dlopen(void);

/* Finds the real `name`: the next definition after ours (RTLD_NEXT), or, when libpq is not in the
 * global scope (Python extension modules load it RTLD_LOCAL), the one in the libpq.so.5 that is
 * already loaded. NULL when neither exists; the caller then fails the call the libpq way. */
void *dbt_real_lookup(_Atomic(void *) *slot, const char *name);

/* The same search, without caching or logging (for dlsym, which asks about any program's PQ*). */
void *dbt_real_peek(const char *name);

/* ---- resolved ahead ----------------------------------------------------------------------------
 * PQcancel and PQrequestCancel may run in a signal handler (psql's Ctrl-C), where nothing may be
 * looked up: dlsym takes locks and allocates its error message. libpq 15's PQrequestCancel calls
 * PQgetCancel, PQcancel and PQfreeCancel through its PLT, i.e. our hooks. So these four are
 * resolved together, beforehand, at every point that comes before a program can cancel: when the
 * library is loaded (if libpq already is), when a program resolves a libpq function through dlsym
 * (ctypes: libpq is then not in the global scope), at each connect and at PQgetCancel. */
typedef enum {
    DBT_AHEAD_GET_CANCEL,
    DBT_AHEAD_FREE_CANCEL,
    DBT_AHEAD_CANCEL,
    DBT_AHEAD_REQUEST_CANCEL,
    DBT_AHEAD_N
} dbt_ahead_fn;

/* Resolves those not found yet, quietly (libpq may not be loaded yet). Not async-signal-safe;
 * cheap once all are found. */
void dbt_real_resolve_ahead(void);

/* The real function, or NULL while it is not resolved: an atomic load, async-signal-safe. */
void *dbt_real_ahead(dbt_ahead_fn fn);

/* dbt_real_lookup of it: outside a signal handler only (it looks up, and logs when not found). */
void *dbt_real_ahead_lookup(dbt_ahead_fn fn);

/* DBT_REAL(PQexec) is the real PQexec, typed. Each use site keeps its own cache slot. */
#define DBT_REAL(fn)                                                                               \
    ({                                                                                             \
        static _Atomic(void *) dbt_slot_;                                                          \
        (__typeof__(&fn))dbt_real_lookup(&dbt_slot_, #fn);                                         \
    })

#endif
