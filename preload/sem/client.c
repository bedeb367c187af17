/* client.c - a client's life: the client and its pools, created on first use; giving back what
 * the process holds at exit; freeing it all. */
#include "clock.h"
#include "fork.h"
#include "handover.h"
#include "listener.h"
#include "log.h"
#include "pool.h"
#include "release.h"
#include "renewer.h"
#include "sentinel.h"
#include "sharing.h"
#include "summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- client and pools ---------------------------------------------------------------- */

dbt_client *dbt_client_new(const dbt_config *cfg)
{
    dbt_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->cfg = cfg;
    dbt_new_client_id(c->cid);
    /* No lookup: the kernel's name for this host. A name with a blank would break the one-line
     * record status reads, so blanks become '_'. */
    if (gethostname(c->host, sizeof c->host - 1) != 0 || !c->host[0])
        snprintf(c->host, sizeof c->host, "?");
    for (char *h = c->host; *h; h++)
        if (*h == ' ' || (unsigned char)*h < 0x20)
            *h = '_';
    atomic_init(&c->serial, 0);
    pthread_mutex_init(&c->mu, NULL);
    dbt_fork_register(c);
    /* Sentinel's +switch-master: every pool renews at once, so its holders re-assert their
     * permits on the new master before the quarantine there ends. */
    dbt_sentinel_on_switch(dbt_client_renew_all_now, c);
    return c;
}

void dbt_client_renew_all_now(void *client)
{
    dbt_client *c = client;
    pthread_mutex_lock(&c->mu);
    for (dbt_pool *p = c->pools; p; p = p->next)
        dbt_pool_renew_now(p);
    pthread_mutex_unlock(&c->mu);
}

const char *dbt_client_id(const dbt_client *c)
{
    return c->cid;
}

dbt_pool *dbt_client_pool(dbt_client *c, const char *name)
{
    pthread_mutex_lock(&c->mu);
    dbt_pool *p;
    for (p = c->pools; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            break;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (p && (p->name = strdup(name)) != NULL &&
            dbt_keys_init(&p->keys, c->cfg->key_prefix, name)) {
            p->client = c;
            p->nbounds = dbt_hist_bounds(p->hist_bounds, DBT_HIST_MAX);
            dbt_pool_mutex_init(&p->mu);
            pthread_cond_init(&p->conn_cv, NULL);
            dbt_cond_init_mono(&p->bg_cv);
            p->next = c->pools;
            c->pools = p;
        } else if (p) {
            free(p->name);
            free(p);
            p = NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    return p;
}

const dbt_keys *dbt_pool_keys(const dbt_pool *p)
{
    return &p->keys;
}

const char *dbt_pool_name(const dbt_pool *p)
{
    return p->name;
}

bool dbt_pool_misconfig(dbt_pool *p, char *out, size_t cap)
{
    pthread_mutex_lock(&p->mu);
    snprintf(out, cap, "%s", p->misconfig);
    pthread_mutex_unlock(&p->mu);
    return out[0] != '\0';
}

void dbt_pool_get_stats(dbt_pool *p, dbt_pool_stats *out)
{
    pthread_mutex_lock(&p->mu);
    *out = p->st;
    pthread_mutex_unlock(&p->mu);
}

/* ---- shutdown ---------------------------------------------------------------------------- */

static void free_pool(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    p->exiting = true; /* nothing owed starts the renewer again once it is stopped */
    pthread_mutex_unlock(&p->mu);
    dbt_renewer_stop(p);
    dbt_listener_close(p);
    if (p->bg_slot) {
        close(p->bg_slot->efd);
        free(p->bg_slot);
    }
    dbt_free_spares(p);
    dbt_report_local(p);
    pthread_mutex_lock(&p->mu);
    dbt_sharing_quit(p);
    pthread_mutex_unlock(&p->mu);
    /* Give back what is still held: a process that exits cleanly should not make others wait
     * out its leases. Sent without waiting, then the replies are read (bounded by the
     * Redis timeout) so the commands surely left before the sockets close. */
    struct dbt_slot *s = p->slots;
    p->slots = NULL;
    bool down = p->down_until_us > dbt_now_us();
    while (s) {
        struct dbt_slot *next = s->next;
        if (s->state == SLOT_HELD && s->gen == p->gen && !down)
            dbt_send_release(p, s->kind, s->id);
        else if (s->orphan && s->gen == p->gen && !down) /* a place kept for a next waiter */
            dbt_cancel_in_redis(p, s);
        dbt_free_slot(s);
        s = next;
    }
    dbt_summary_at_exit(p->name, &p->st);
    char err[DBT_ERRLEN];
    for (int i = 0; i < p->nfree; i++) {
        (void)dbt_redis_drain(p->free_conns[i], err);
        dbt_redis_free(p->free_conns[i]);
    }
    dbt_sharing_free(p);
    dbt_keys_free(&p->keys);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->conn_cv);
    pthread_cond_destroy(&p->bg_cv);
    free(p->name);
    free(p);
}

void dbt_client_exit(dbt_client *c)
{
    pthread_mutex_lock(&c->mu);
    dbt_pool *pools = c->pools;
    pthread_mutex_unlock(&c->mu);
    /* One DBTHROTTLE_REDIS_TIMEOUT for the whole exit, every pool and call together: a hung Redis
     * must not hold the process' end by one timeout per permit or place. Every release and
     * withdrawal is written without waiting for its reply (pipelined on the connections), so a
     * Redis that was only slow still gets them all. */
    int64_t budget = dbt_redis_budget_begin(c->cfg->redis_timeout_ms);
    for (dbt_pool *p = pools; p; p = p->next) {
        /* Copy the ids first: the network calls happen without the lock. */
        enum { MAX_EXIT = 256 };
        char ids[MAX_EXIT][DBT_ID_MAX];
        dbt_kind kinds[MAX_EXIT];
        bool place[MAX_EXIT];
        int n = 0;
        pthread_mutex_lock(&p->mu);
        /* Threads may still run: none may pass on a permit this gives back. */
        p->exiting = true;
        /* Permits other processes passed to our waiters meanwhile are given back with ours. */
        dbt_sharing_quit(p);
        /* Then no more are passed to us; the host's last process removes the segment's file. */
        dbt_sharing_leave(p);
        bool down = p->down_until_us > dbt_now_us();
        /* Places still queued too: a waiter's (an event loop's held commands wait in threads of
         * ours, and a program may exit with some), or one kept for a next waiter. Left queued,
         * each would reach the head and be granted to nobody for a whole lease. */
        for (struct dbt_slot *s = p->slots; s && n < MAX_EXIT; s = s->next)
            if ((s->state == SLOT_HELD || s->state == SLOT_QUEUED || s->orphan) &&
                s->gen == p->gen) {
                memcpy(ids[n], s->id, sizeof ids[n]);
                place[n] = s->state != SLOT_HELD; /* withdrawn, or given back if granted */
                kinds[n++] = s->kind;
            }
        /* What the renewer was giving back as the process exits: it may not get to send it. */
        for (int i = 0; i < p->ninflight && n < MAX_EXIT; i++) {
            memcpy(ids[n], p->inflight[i].id, sizeof ids[n]);
            place[n] = p->inflight[i].cancel;
            kinds[n++] = p->inflight[i].kind;
        }
        /* And what it owes Redis from an outage: the lease would give it back only much later. */
        for (int i = 0; i < p->ndeferred && n < MAX_EXIT; i++) {
            memcpy(ids[n], p->deferred[i].id, sizeof ids[n]);
            place[n] = p->deferred[i].cancel;
            kinds[n++] = p->deferred[i].kind;
        }
        dbt_pool_stats st = p->st;
        pthread_mutex_unlock(&p->mu);
        dbt_report_local(p);
        for (int i = 0; i < n && !down; i++)
            down = !dbt_send_at_exit(p, place[i], kinds[i], ids[i]);
        dbt_summary_at_exit(p->name, &st);
    }
    dbt_redis_budget_end(budget);
}

void dbt_client_free(dbt_client *c)
{
    if (!c)
        return;
    dbt_fork_unregister(c);
    dbt_sentinel_off_switch(dbt_client_renew_all_now, c);
    dbt_pool *p = c->pools;
    while (p) {
        dbt_pool *next = p->next;
        free_pool(p);
        p = next;
    }
    pthread_mutex_destroy(&c->mu);
    free(c);
}
