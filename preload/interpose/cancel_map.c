/* cancel_map.c - see cancel_map.h. Two fixed tables of atomics, scanned linearly: a program has
 * few PGcancel objects and fewer commands waiting at once, and a signal handler may neither lock
 * nor allocate. A full table degrades to libpq's own behaviour (the cancel reaches only the
 * server), never to a crash. */
#include "cancel_map.h"

#include <pthread.h>
#include <stdatomic.h>

#define CANCEL_SLOTS 1024
#define WAIT_SLOTS   1024

/* PGcancel -> PGconn. An entry is claimed by its `cancel` field and published by `conn`. */
static struct {
    _Atomic(uintptr_t) cancel;
    _Atomic(uintptr_t) conn;
} cancels[CANCEL_SLOTS];

/* A waiting command. A cancel records the claim generation it saw, so a cancel that arrives late
 * for a wait that has ended cannot end the next wait to claim the cell. gen starts at 0 and
 * cancelled_gen at 0 too, but a claim moves gen to 1 before any wait asks. */
struct dbt_cancel_wait {
    _Atomic(uintptr_t) conn;
    atomic_uint_fast64_t gen;
    atomic_uint_fast64_t cancelled_gen;
    dbt_waker waker;
};
static struct dbt_cancel_wait waits[WAIT_SLOTS];

void dbt_cancel_note(const void *conn, const void *cancel)
{
    if (!conn || !cancel)
        return;
    for (int i = 0; i < CANCEL_SLOTS; i++) {
        uintptr_t free_ = 0;
        if (atomic_compare_exchange_strong(&cancels[i].cancel, &free_, (uintptr_t)cancel)) {
            atomic_store(&cancels[i].conn, (uintptr_t)conn);
            return;
        }
    }
}

void dbt_cancel_forget(const void *cancel)
{
    if (!cancel)
        return;
    for (int i = 0; i < CANCEL_SLOTS; i++)
        if (atomic_load(&cancels[i].cancel) == (uintptr_t)cancel) {
            atomic_store(&cancels[i].conn, 0);
            atomic_store(&cancels[i].cancel, 0);
            return;
        }
}

void dbt_cancel_forget_conn(const void *conn)
{
    if (!conn)
        return;
    for (int i = 0; i < CANCEL_SLOTS; i++) {
        uintptr_t expect = (uintptr_t)conn;
        /* The PGcancel stays claimed (PQfreeCancel frees it) but no longer names a connection.
         * A plain load first: PQfinish should not pay a locked instruction per entry. */
        if (atomic_load_explicit(&cancels[i].conn, memory_order_relaxed) == expect)
            atomic_compare_exchange_strong(&cancels[i].conn, &expect, 0);
    }
}

/* conn only changes 0 -> BUSY -> conn (claim, with gen moving on in between) and conn -> 0
 * (end). So a conn seen between two equal reads of gen belongs to the wait of that generation;
 * if the generation moved meanwhile (a claim in progress), look again. */
#define BUSY ((uintptr_t)1)

void dbt_cancel_fire_conn(const void *conn)
{
    if (!conn)
        return;
    for (int i = 0; i < WAIT_SLOTS; i++) {
        struct dbt_cancel_wait *w = &waits[i];
        for (int tries = 0; tries < 8; tries++) {
            uint_fast64_t gen = atomic_load(&w->gen);
            uintptr_t owner = atomic_load(&w->conn);
            if (atomic_load(&w->gen) != gen)
                continue;
            if (owner == (uintptr_t)conn) {
                atomic_store(&w->cancelled_gen, gen);
                dbt_waker_fire(&w->waker);
            }
            break;
        }
    }
}

void dbt_cancel_fire(const void *cancel)
{
    if (!cancel)
        return;
    for (int i = 0; i < CANCEL_SLOTS; i++)
        if (atomic_load(&cancels[i].cancel) == (uintptr_t)cancel) {
            uintptr_t conn = atomic_load(&cancels[i].conn);
            if (conn)
                dbt_cancel_fire_conn((const void *)conn);
            return;
        }
}

/* In a child of fork() no wait runs: the waits were the parent's other threads', whose slots and
 * eventfds the child frees (sem/pool.c). Their cells are cleared, so that a cancel in the child
 * writes to no descriptor number the child may reuse, and the cells are not lost for good. */
static void child_after_fork(void)
{
    for (int i = 0; i < WAIT_SLOTS; i++) {
        atomic_store(&waits[i].waker.efd_plus1, 0);
        atomic_store(&waits[i].waker.users, 0);
        atomic_store(&waits[i].conn, 0);
    }
}

static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

static void install(void)
{
    pthread_atfork(NULL, NULL, child_after_fork);
}

dbt_cancel_wait *dbt_cancel_wait_begin(const void *conn)
{
    pthread_once(&atfork_once, install);
    for (int i = 0; i < WAIT_SLOTS; i++) {
        uintptr_t free_ = 0;
        if (atomic_compare_exchange_strong(&waits[i].conn, &free_, BUSY)) {
            atomic_fetch_add(&waits[i].gen, 1);
            atomic_store(&waits[i].conn, (uintptr_t)conn);
            return &waits[i];
        }
    }
    return NULL;
}

bool dbt_cancel_requested(void *arg)
{
    struct dbt_cancel_wait *w = arg;
    return atomic_load(&w->cancelled_gen) == atomic_load(&w->gen);
}

dbt_waker *dbt_cancel_waker(dbt_cancel_wait *w)
{
    return w ? &w->waker : NULL;
}

void dbt_cancel_wait_end(dbt_cancel_wait *w)
{
    if (w)
        atomic_store(&w->conn, 0);
}
