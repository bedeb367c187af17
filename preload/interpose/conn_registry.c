/* conn_registry.c - what the throttle knows about each PGconn, and the results it made. */
#include "conn_registry.h"

#include "prepared.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024

/* Adaptive (spins a little before it sleeps): every command of every thread looks its connection
 * up here, twice, for a few instructions under the lock. */
static pthread_mutex_t mu = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static dbt_conn *buckets[BUCKETS];
static atomic_uint_fast64_t next_id;
static _Atomic(const dbt_conn_held_ops *) held_ops;

void dbt_conn_set_held_ops(const dbt_conn_held_ops *ops)
{
    atomic_store_explicit(&held_ops, ops, memory_order_release);
}

static size_t bucket_of(const void *p)
{
    uintptr_t x = (uintptr_t)p;
    x ^= x >> 17;
    x *= 0x9E3779B97F4A7C15ull;
    return (size_t)(x >> 54) % BUCKETS;
}

/* fork(): the map's lock is taken around fork() so the child inherits it unlocked and whole; in
 * the child, the permits the entries hold are the parent's, so each connection starts with none
 * (its next command takes a permit of the child's own). */
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void prepare(void)
{
    pthread_mutex_lock(&mu);
}

static void parent(void)
{
    pthread_mutex_unlock(&mu);
}

static void child(void)
{
    pthread_mutex_t fresh = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    mu = fresh;
    const dbt_conn_held_ops *ops = atomic_load_explicit(&held_ops, memory_order_acquire);
    for (size_t b = 0; b < BUCKETS; b++)
        for (dbt_conn *c = buckets[b]; c; c = c->next) {
            /* The parent's permits: only forgotten, see dbt_release. */
            dbt_conn_state_after_fork(&c->state, dbt_release);
            if (c->held && ops)
                ops->after_fork(c->held); /* never sent here */
        }
}

static void install(void)
{
    pthread_atfork(prepare, parent, child);
}

dbt_conn *dbt_conn_find(const void *pg, bool create)
{
    if (create)
        pthread_once(&atfork_once, install);
    size_t b = bucket_of(pg);
    pthread_mutex_lock(&mu);
    dbt_conn *c = buckets[b];
    while (c && c->pg != pg)
        c = c->next;
    if (!c && create && (c = calloc(1, sizeof *c)) != NULL) {
        c->pg = pg;
        snprintf(c->id, sizeof c->id, "c%llu",
                 (unsigned long long)atomic_fetch_add(&next_id, 1) + 1);
        c->next = buckets[b];
        buckets[b] = c;
    }
    pthread_mutex_unlock(&mu);
    return c;
}

bool dbt_conn_with_id(const char *id, void (*fn)(const void *pg, void *arg), void *arg)
{
    bool found = false;
    pthread_mutex_lock(&mu);
    for (size_t b = 0; b < BUCKETS && !found; b++)
        for (dbt_conn *c = buckets[b]; c && !found; c = c->next)
            if (strcmp(c->id, id) == 0) {
                fn(c->pg, arg);
                found = true;
            }
    pthread_mutex_unlock(&mu);
    return found;
}

dbt_conn *dbt_conn_take(const void *pg)
{
    size_t b = bucket_of(pg);
    pthread_mutex_lock(&mu);
    dbt_conn **pp = &buckets[b];
    while (*pp && (*pp)->pg != pg)
        pp = &(*pp)->next;
    dbt_conn *c = *pp;
    if (c)
        *pp = c->next;
    pthread_mutex_unlock(&mu);
    return c;
}

void dbt_conn_free(dbt_conn *c)
{
    if (c) {
        const dbt_conn_held_ops *ops = atomic_load_explicit(&held_ops, memory_order_acquire);
        if (c->held && ops)
            ops->free(c->held);
        dbt_prepared_free(c->prepared);
        free(c->refusal);
        free(c);
    }
}

/* ---- refused results: few and short-lived, so a small list will do ---------------------- */

typedef struct refused {
    const void *res;
    char *msg;
    const char *sqlstate;
    struct refused *next;
} refused;

static refused *refused_list;
static atomic_int refused_count; /* lets PQclear skip the lock in the common case */

void dbt_refused_add(const void *res, const char *msg, const char *sqlstate)
{
    refused *r = malloc(sizeof *r);
    if (!r || !(r->msg = strdup(msg))) {
        free(r);
        return;
    }
    r->res = res;
    r->sqlstate = sqlstate;
    pthread_mutex_lock(&mu);
    r->next = refused_list;
    refused_list = r;
    atomic_fetch_add(&refused_count, 1);
    pthread_mutex_unlock(&mu);
}

const char *dbt_refused_message(const void *res, const char **sqlstate)
{
    if (!res || atomic_load(&refused_count) == 0)
        return NULL;
    const char *msg = NULL;
    pthread_mutex_lock(&mu);
    for (refused *r = refused_list; r; r = r->next)
        if (r->res == res) {
            msg = r->msg;
            if (sqlstate)
                *sqlstate = r->sqlstate;
            break;
        }
    pthread_mutex_unlock(&mu);
    return msg; /* lives until PQclear of that result, which only its owner calls */
}

void dbt_refused_forget(const void *res)
{
    if (!res || atomic_load(&refused_count) == 0)
        return;
    refused *gone = NULL;
    pthread_mutex_lock(&mu);
    for (refused **pp = &refused_list; *pp; pp = &(*pp)->next)
        if ((*pp)->res == res) {
            gone = *pp;
            *pp = gone->next;
            atomic_fetch_sub(&refused_count, 1);
            break;
        }
    pthread_mutex_unlock(&mu);
    if (gone) {
        free(gone->msg);
        free(gone);
    }
}
