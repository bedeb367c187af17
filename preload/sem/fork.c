/* fork.c - fork safety: a child never uses its parent's Redis connections, threads or permits.
 *
 * pthread_atfork handlers take every client and pool lock before fork() (those locks are only
 * ever held for short, I/O-free sections) so the child inherits them in a known state. In the
 * child each pool forgets its parent's slots (the parent still holds and renews those permits),
 * closes the inherited sockets, and starts over with a new client id, hence its own wake list:
 * each module of the pool resets what it owns, by the reset it registered here. */
#include "fork.h"
#include "clock.h"

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

/* The modules' resets, in the order they run (dbt_fork_on_child). Filled by constructors, before
 * any client exists: read only in the child, which no other thread runs. */
#define MAX_RESETS 16
static struct {
    dbt_fork_phase phase;
    dbt_after_fork_fn reset;
} resets[MAX_RESETS];
static int nresets;

void dbt_fork_on_child(dbt_fork_phase phase, dbt_after_fork_fn reset)
{
    /* One a module (seven): never full. Kept in phase order, each phase in the order registered. */
    if (nresets == MAX_RESETS)
        return;
    int i = nresets++;
    for (; i > 0 && resets[i - 1].phase > phase; i--)
        resets[i] = resets[i - 1];
    resets[i].phase = phase;
    resets[i].reset = reset;
}

static void child(void)
{
    for (dbt_client *c = registry; c; c = c->next) {
        pthread_mutex_init(&c->mu, NULL);
        dbt_new_client_id(c->cid);
        for (dbt_pool *p = c->pools; p; p = p->next)
            for (int i = 0; i < nresets; i++)
                resets[i].reset(p);
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
