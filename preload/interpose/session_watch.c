/* session_watch.c - see session_watch.h. A fixed table of cells, each a connection's, changed with
 * atomics only (an owner's events cost one load, or one compare-and-swap, each); one thread that
 * polls the watched sockets, started at the first watch, asleep while nothing is watched. */
#include "session_watch.h"

#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#define CELLS 4096
/* A connection watched after the poll began joins the next one: this bounds how late. */
#define POLL_MS 200

/* A cell's states: free; an owner's, not watched (its thread may be using the connection);
 * watched (idle: the watcher may claim it); claimed (the watcher is giving its permits back). */
enum { CELL_FREE, CELL_OWNED, CELL_WATCHED, CELL_CLAIMED };

static struct {
    atomic_int state;
    atomic_int fd;
    _Atomic(void *) owner;
} cells[CELLS];
static atomic_int cells_used; /* cells[0, cells_used) have been taken at some time */

static dbt_session_gone_fn on_gone;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static atomic_bool started, asleep;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The child of fork() has no watcher; its connections hold none of the parent's permits (the
 * registry forgets them), so none is watched until its own next command ends. */
static void child(void)
{
    pthread_mutex_t fresh_mu = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t fresh_cv = PTHREAD_COND_INITIALIZER;
    mu = fresh_mu;
    cv = fresh_cv;
    atomic_store(&started, false);
    atomic_store(&asleep, false);
    int used = atomic_load(&cells_used);
    for (int i = 0; i < used; i++)
        if (atomic_load(&cells[i].state) != CELL_FREE)
            atomic_store(&cells[i].state, CELL_OWNED);
}

static void install(void)
{
    pthread_atfork(NULL, NULL, child);
}

void dbt_session_watch_init(dbt_session_gone_fn gone)
{
    on_gone = gone;
    pthread_once(&atfork_once, install);
}

static bool hung_up(int fd)
{
    struct pollfd one = {.fd = fd, .events = POLLRDHUP};
    return poll(&one, 1, 0) == 1 && (one.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* The watcher saw a hangup on fd, cell i's socket when the poll began. */
static void claim(int i, int fd)
{
    int want = CELL_WATCHED;
    if (!atomic_compare_exchange_strong(&cells[i].state, &want, CELL_CLAIMED))
        return; /* its owner took it back: the owner's next libpq call finds the connection bad */
    /* Still the same socket, still hung up: the cell may have been watched anew meanwhile. */
    if (atomic_load(&cells[i].fd) != fd || !hung_up(fd)) {
        atomic_store(&cells[i].state, CELL_WATCHED);
        return;
    }
    on_gone(atomic_load(&cells[i].owner));
    atomic_store(&cells[i].state, CELL_OWNED); /* not watched again until its next command */
}

static int collect(struct pollfd *fds, int *idx, int cap)
{
    int n = 0, used = atomic_load(&cells_used);
    for (int i = 0; i < used && n < cap; i++)
        if (atomic_load(&cells[i].state) == CELL_WATCHED) {
            fds[n] = (struct pollfd){.fd = atomic_load(&cells[i].fd), .events = POLLRDHUP};
            idx[n++] = i;
        }
    return n;
}

static void *watcher(void *arg)
{
    (void)arg;
    static struct pollfd fds[CELLS];
    static int idx[CELLS];
    for (;;) {
        int n = collect(fds, idx, CELLS);
        if (n == 0) {
            /* Asleep until a watch: said before looking again, so a watch that comes between
             * the look and the sleep signals (its owner reads `asleep` after it publishes). */
            pthread_mutex_lock(&mu);
            atomic_store(&asleep, true);
            if (collect(fds, idx, 1) == 0)
                pthread_cond_wait(&cv, &mu);
            atomic_store(&asleep, false);
            pthread_mutex_unlock(&mu);
            continue;
        }
        if (poll(fds, (nfds_t)n, POLL_MS) <= 0)
            continue;
        for (int k = 0; k < n; k++)
            if (fds[k].revents & (POLLRDHUP | POLLHUP | POLLERR))
                claim(idx[k], fds[k].fd);
    }
    return NULL;
}

static void start(void)
{
    pthread_mutex_lock(&mu);
    if (!atomic_load(&started)) {
        /* Signals belong to the program's threads, never to ours. */
        sigset_t all, old;
        sigfillset(&all);
        pthread_sigmask(SIG_SETMASK, &all, &old);
        pthread_attr_t a;
        pthread_attr_init(&a);
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        pthread_t t;
        if (pthread_create(&t, &a, watcher, NULL) == 0)
            atomic_store(&started, true);
        pthread_attr_destroy(&a);
        pthread_sigmask(SIG_SETMASK, &old, NULL);
    }
    pthread_mutex_unlock(&mu);
}

static int take_cell(void)
{
    for (int i = 0; i < CELLS; i++) {
        int want = CELL_FREE;
        if (atomic_load_explicit(&cells[i].state, memory_order_relaxed) == CELL_FREE &&
            atomic_compare_exchange_strong(&cells[i].state, &want, CELL_OWNED)) {
            int used = atomic_load(&cells_used);
            while (used < i + 1 && !atomic_compare_exchange_weak(&cells_used, &used, i + 1))
                ;
            return i + 1;
        }
    }
    return 0; /* full: this connection keeps its permits until it is used or closed, as before */
}

void dbt_session_watch(int *cell, int fd, void *owner)
{
    if (fd < 0 || !on_gone)
        return;
    if (!*cell && !(*cell = take_cell()))
        return;
    int i = *cell - 1;
    atomic_store(&cells[i].fd, fd);
    atomic_store(&cells[i].owner, owner);
    atomic_store(&cells[i].state, CELL_WATCHED);
    if (!atomic_load(&started)) {
        start();
    } else if (atomic_load(&asleep)) {
        pthread_mutex_lock(&mu);
        pthread_cond_signal(&cv);
        pthread_mutex_unlock(&mu);
    }
}

void dbt_session_unwatch(int cell)
{
    if (!cell)
        return;
    atomic_int *st = &cells[cell - 1].state;
    for (;;) {
        /* Acquire: what the watcher did to the connection is seen once it let go. */
        int now = atomic_load_explicit(st, memory_order_acquire);
        if (now == CELL_OWNED)
            return;
        if (now == CELL_WATCHED && atomic_compare_exchange_strong(st, &now, CELL_OWNED))
            return;
        if (now == CELL_CLAIMED)
            sched_yield(); /* the watcher is giving its permits back: a Redis send, not a wait */
    }
}

void dbt_session_forget(int *cell)
{
    if (!*cell)
        return;
    dbt_session_unwatch(*cell);
    atomic_store(&cells[*cell - 1].state, CELL_FREE);
    *cell = 0;
}
