/* held_park.c - the watch over parked held commands (see held_park.h): one thread, asleep on one
 * eventfd until the nearest deadline.
 *
 * A parked command costs no thread, no wake-up and no system call: the program's thread links it
 * under the watch's lock, and the thread that frees its permit unlinks it. The watch's thread
 * wakes only when something came for a parked command (sem's wakes of a parked acquire and its
 * waker write to the watch's eventfd), or a deadline passed, or a park's deadline comes before the
 * one it sleeps until; then `due` says which need a thread. */
#include "held_park.h"

#include "clock.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dbt_park_cell *cells; /* the parked, newest first */
static int ncells;
static int kick = -1; /* eventfd: look again */
static bool started;
static int64_t sleeping_until = -1; /* the deadline the thread sleeps until; -1: none */
static bool asleep;
static void (*_Atomic fire_fn)(void *arg);
static bool (*_Atomic due_fn)(void *arg);

void dbt_park_set_fire(void (*fire)(void *arg), bool (*due)(void *arg))
{
    atomic_store(&due_fn, due);
    atomic_store(&fire_fn, fire);
}

/* mu held: c leaves the list. */
static void take(dbt_park_cell *c)
{
    if (c->prev)
        c->prev->next = c->next;
    else
        cells = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->parked = false;
    ncells--;
}

/* mu held: the nearest deadline, -1: none. */
static int64_t nearest(void)
{
    int64_t d = -1;
    for (dbt_park_cell *c = cells; c; c = c->next)
        if (c->deadline_us >= 0 && (d < 0 || c->deadline_us < d))
            d = c->deadline_us;
    return d;
}

/* Takes out (mu held) the parked commands that need a thread now: something came for them
 * (`due`), or their deadline passed; their args in *due (malloc'ed), their count returned. */
static int collect(void ***out)
{
    *out = NULL;
    if (ncells == 0)
        return 0;
    void **due_args = calloc((size_t)ncells, sizeof *due_args);
    if (!due_args)
        return 0; /* looked at again on the next wake or deadline */
    bool (*due)(void *) = atomic_load(&due_fn);
    int64_t now = dbt_now_us();
    int n = 0;
    for (dbt_park_cell *c = cells, *next; c; c = next) {
        next = c->next;
        if ((due && due(c->arg)) || (c->deadline_us >= 0 && c->deadline_us <= now)) {
            take(c);
            due_args[n++] = c->arg;
        }
    }
    *out = due_args;
    return n;
}

static void *watch(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&mu);
    for (;;) {
        int64_t until = nearest();
        int ms = -1;
        if (until >= 0) {
            int64_t left = until - dbt_now_us();
            ms = left <= 0 ? 0 : (int)((left + 999) / 1000);
        }
        sleeping_until = until;
        asleep = true;
        struct pollfd k = {.fd = kick, .events = POLLIN};
        pthread_mutex_unlock(&mu);
        int n = poll(&k, 1, ms);
        if (n > 0) {
            uint64_t v;
            ssize_t r = read(k.fd, &v, sizeof v);
            (void)r;
        }
        pthread_mutex_lock(&mu);
        asleep = false;
        void **due;
        int ndue = collect(&due);
        pthread_mutex_unlock(&mu);
        void (*fire)(void *) = atomic_load(&fire_fn);
        for (int i = 0; i < ndue; i++)
            fire(due[i]);
        free(due);
        pthread_mutex_lock(&mu);
    }
    return NULL;
}

/* In a child after fork(): the parent's thread is not here. Its parked commands are forgotten
 * with the rest of the parent's held state (held.c); the child makes its own watch if it parks. */
static void after_fork(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mu = fresh;
    if (kick >= 0)
        close(kick);
    kick = -1;
    cells = NULL;
    ncells = 0;
    started = asleep = false;
    sleeping_until = -1;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_init(void)
{
    pthread_atfork(NULL, NULL, after_fork);
}

/* mu held: the eventfd and the thread (detached, every signal blocked). */
static bool ready(void)
{
    if (started)
        return true;
    if (kick < 0 && (kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
        return false;
    pthread_attr_t a;
    if (pthread_attr_init(&a) != 0)
        return false;
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&a, 256 * 1024);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    started = pthread_create(&t, &a, watch, NULL) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&a);
    return started;
}

int dbt_park_notify_fd(void)
{
    if (!atomic_load(&fire_fn))
        return -1;
    pthread_once(&fork_once, fork_init);
    pthread_mutex_lock(&mu);
    int fd = ready() ? kick : -1;
    pthread_mutex_unlock(&mu);
    return fd;
}

bool dbt_park(dbt_park_cell *c, int64_t deadline_us, void *arg)
{
    pthread_mutex_lock(&mu);
    bool (*due)(void *) = atomic_load(&due_fn);
    /* Something came for it before it could be linked (a thread that passed it a permit found
     * nothing to claim): the caller finishes it, in its own call when it holds a permit, rather
     * than the watch handing it to a thread of ours at once. Asked under mu: nothing can claim
     * it meanwhile. */
    bool ok = !(due && due(arg)) && ready();
    if (ok) {
        c->deadline_us = deadline_us;
        c->arg = arg;
        c->parked = true;
        c->prev = NULL;
        c->next = cells;
        if (cells)
            cells->prev = c;
        cells = c;
        ncells++;
        /* A thread asleep past this deadline (or without one) would miss it: the watch looks
         * once more. */
        bool sooner =
            asleep && deadline_us >= 0 && (sleeping_until < 0 || deadline_us < sleeping_until);
        if (sooner) {
            uint64_t one = 1;
            ssize_t w = write(kick, &one, sizeof one);
            (void)w;
            sleeping_until = deadline_us;
        }
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

bool dbt_park_claim(dbt_park_cell *c)
{
    pthread_mutex_lock(&mu);
    bool was = c->parked;
    if (was)
        take(c);
    pthread_mutex_unlock(&mu);
    return was;
}
