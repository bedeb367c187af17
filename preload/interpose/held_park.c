/* held_park.c - the watch over parked held commands (see held_park.h): one thread, one epoll set
 * of the commands' eventfds, the nearest deadline as its timeout.
 *
 * A parked command costs no thread and no wake-up: the program's thread adds its fd (epoll_ctl
 * wakes nobody), and the thread that frees its permit takes it out again. The watch's thread
 * wakes only when a command needs a thread of its own (its fd is readable: Redis granted it, it
 * was handed the listener's role, it was cancelled or withdrawn) or its deadline passed, and for
 * a park whose deadline comes before the one it sleeps until. */
#include "held_park.h"

#include "clock.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static dbt_park_cell *cells; /* the parked, newest first */
static int ep = -1;          /* the epoll set; -1: not made yet */
static int kick = -1;        /* eventfd: a nearer deadline, the set changed under the sleeper */
static bool started;
static uint64_t serials;
static int64_t sleeping_until = -1; /* the deadline the thread sleeps until; -1: none (or awake) */
static bool asleep;
static void (*_Atomic fire_fn)(void *arg);

#define KICK_SERIAL 0 /* cells' serials start at 1 */
#define BATCH       64

void dbt_park_set_fire(void (*fire)(void *arg))
{
    atomic_store(&fire_fn, fire);
}

/* mu held: c leaves the set and the list. */
static void take(dbt_park_cell *c)
{
    (void)epoll_ctl(ep, EPOLL_CTL_DEL, c->fd, NULL);
    if (c->prev)
        c->prev->next = c->next;
    else
        cells = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = c->next = NULL;
    c->parked = false;
}

/* mu held: the cell with this serial, if still parked. */
static dbt_park_cell *find(uint64_t serial)
{
    for (dbt_park_cell *c = cells; c; c = c->next)
        if (c->serial == serial)
            return c;
    return NULL;
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

static void *watch(void *arg)
{
    (void)arg;
    struct epoll_event ev[BATCH];
    void *due[BATCH];
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
        int epfd = ep;
        pthread_mutex_unlock(&mu);
        int n = epoll_wait(epfd, ev, BATCH, ms);
        pthread_mutex_lock(&mu);
        asleep = false;
        if (n < 0 && errno != EINTR)
            n = 0;
        int ndue = 0;
        for (int i = 0; i < n; i++) {
            if (ev[i].data.u64 == KICK_SERIAL) {
                uint64_t v;
                ssize_t r = read(kick, &v, sizeof v);
                (void)r;
                continue;
            }
            dbt_park_cell *c = find(ev[i].data.u64);
            if (c) { /* else claimed meanwhile */
                take(c);
                due[ndue++] = c->arg;
            }
        }
        int64_t now = dbt_now_us();
        for (dbt_park_cell *c = cells, *next; c && ndue < BATCH; c = next) {
            next = c->next;
            if (c->deadline_us >= 0 && c->deadline_us <= now) {
                take(c);
                due[ndue++] = c->arg;
            }
        }
        pthread_mutex_unlock(&mu);
        void (*fire)(void *) = atomic_load(&fire_fn);
        for (int i = 0; i < ndue; i++)
            fire(due[i]);
        pthread_mutex_lock(&mu);
    }
    return NULL;
}

/* In a child after fork(): the parent's thread is not here, and its epoll set is the parent's
 * (a set is shared across fork(): the child's changes would be the parent's). The parked
 * commands are forgotten with the rest of the parent's held state (held.c). */
static void after_fork(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    mu = fresh;
    if (ep >= 0)
        close(ep);
    if (kick >= 0)
        close(kick);
    ep = kick = -1;
    cells = NULL;
    started = asleep = false;
    sleeping_until = -1;
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void fork_init(void)
{
    pthread_atfork(NULL, NULL, after_fork);
}

/* mu held: the set, its kick and its thread (detached, every signal blocked). */
static bool ready(void)
{
    if (started)
        return true;
    if (ep < 0 && (ep = epoll_create1(EPOLL_CLOEXEC)) < 0)
        return false;
    if (kick < 0) {
        if ((kick = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) < 0)
            return false;
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = KICK_SERIAL};
        if (epoll_ctl(ep, EPOLL_CTL_ADD, kick, &e) != 0) {
            close(kick);
            kick = -1;
            return false;
        }
    }
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

bool dbt_park(dbt_park_cell *c, int fd, int64_t deadline_us, void *arg)
{
    if (fd < 0 || !atomic_load(&fire_fn))
        return false;
    pthread_once(&fork_once, fork_init);
    pthread_mutex_lock(&mu);
    bool ok = ready();
    if (ok) {
        c->serial = ++serials;
        c->fd = fd;
        c->deadline_us = deadline_us;
        c->arg = arg;
        struct epoll_event e = {.events = EPOLLIN, .data.u64 = c->serial};
        ok = epoll_ctl(ep, EPOLL_CTL_ADD, fd, &e) == 0;
    }
    if (ok) {
        c->parked = true;
        c->prev = NULL;
        c->next = cells;
        if (cells)
            cells->prev = c;
        cells = c;
        /* The thread sleeps past this deadline (or without one): it must look again. */
        if (asleep && deadline_us >= 0 && (sleeping_until < 0 || deadline_us < sleeping_until)) {
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
