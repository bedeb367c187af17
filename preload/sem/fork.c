/* fork.c - fork safety: a child never uses its parent's Redis connections, threads or permits.
 *
 * pthread_atfork handlers take every client and pool lock before fork() (those locks are only
 * ever held for short, I/O-free sections) so the child inherits them in a known state. In the
 * child each pool forgets its parent's slots (the parent still holds and renews those permits),
 * closes the inherited sockets, and starts over with a new client id, hence its own wake list. */
#include "fork.h"
#include "clock.h"
#include "handover.h"
#include "kept.h"
#include "listener.h"
#include "pool.h"
#include "renewer.h"
#include "sharing.h"

#include <stdio.h>
#include <sys/random.h>
#include <unistd.h>

static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static dbt_client *registry;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

void dbt_new_client_id(char cid[17])
{
    unsigned char b[8];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t n = getrandom(b + got, sizeof b - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got < sizeof b) {
        /* No entropy source: pid and time still make ids unique in practice. */
        uint64_t x = (uint64_t)getpid() << 32 ^ (uint64_t)dbt_now_us();
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (unsigned char)(x >> (8 * i));
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(cid + 2 * i, 3, "%02x", b[i]);
}

static void prepare(void)
{
    pthread_mutex_lock(&registry_mu);
    for (dbt_client *c = registry; c; c = c->next) {
        pthread_mutex_lock(&c->mu);
        for (dbt_pool *p = c->pools; p; p = p->next)
            pthread_mutex_lock(&p->mu);
    }
}

static void parent(void)
{
    for (dbt_client *c = registry; c; c = c->next) {
        for (dbt_pool *p = c->pools; p; p = p->next)
            pthread_mutex_unlock(&p->mu);
        pthread_mutex_unlock(&c->mu);
    }
    pthread_mutex_unlock(&registry_mu);
}

static void init_mono_cond(pthread_cond_t *cv)
{
    pthread_condattr_t a;
    pthread_condattr_init(&a);
    pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
    pthread_cond_init(cv, &a);
    pthread_condattr_destroy(&a);
}

void dbt_pool_mutex_init(pthread_mutex_t *mu)
{
    /* Adaptive: a thread that finds it taken spins a little before it sleeps. Every critical
     * section under it is a few list operations, and many threads of one process pass permits
     * through it (handover.c): sleeping on it cost a futex call and a thread switch per command. */
    pthread_mutexattr_t a;
    pthread_mutexattr_init(&a);
    pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
    pthread_mutex_init(mu, &a);
    pthread_mutexattr_destroy(&a);
}

/* Each module resets what it owns (its after-fork function); the pool's first, as it makes the
 * lock anew. */
static void child_pool(dbt_pool *p)
{
    dbt_pool_after_fork(p);
    dbt_listener_after_fork(p);
    dbt_renewer_after_fork(p);
    dbt_kept_after_fork(p);
    dbt_handover_after_fork(p);
    dbt_sharing_after_fork(p);
}

static void child(void)
{
    for (dbt_client *c = registry; c; c = c->next) {
        pthread_mutex_init(&c->mu, NULL);
        dbt_new_client_id(c->cid);
        for (dbt_pool *p = c->pools; p; p = p->next)
            child_pool(p);
    }
    pthread_mutex_init(&registry_mu, NULL);
}

static void install(void)
{
    pthread_atfork(prepare, parent, child);
}

void dbt_fork_register(dbt_client *c)
{
    pthread_once(&atfork_once, install);
    pthread_mutex_lock(&registry_mu);
    c->next = registry;
    registry = c;
    pthread_mutex_unlock(&registry_mu);
}

void dbt_fork_unregister(dbt_client *c)
{
    pthread_mutex_lock(&registry_mu);
    for (dbt_client **pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    pthread_mutex_unlock(&registry_mu);
}

void dbt_cond_init_mono(pthread_cond_t *cv)
{
    init_mono_cond(cv);
}
