/* client.c - a client's life: the client and its pools, created on first use; giving back what
 * the process holds at exit; freeing it all. */
#include "clock.h"
#include "conns.h"
#include "fork.h"
#include "handover.h"
#include "kept.h"
#include "lease.h"
#include "listener.h"
#include "live.h"
#include "log.h"
#include "pool.h"
#include "relay.h"
#include "release.h"
#include "renewer.h"
#include "sample.h"
#include "sentinel_switch.h"
#include "sharing.h"
#include "summary.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
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
    bool made = false;
    dbt_pool *p;
    for (p = c->pools; p; p = p->next)
        if (strcmp(p->name, name) == 0)
            break;
    if (!p) {
        p = calloc(1, sizeof *p);
        if (p && (p->name = strdup(name)) != NULL &&
            dbt_keys_init(&p->keys, c->cfg->key_prefix, name)) {
            p->client = c;
            atomic_init(&p->on_redis_error, (int)c->cfg->on_redis_error);
            for (int k = 0; k < DBT_NKINDS; k++)
                atomic_init(&p->mode[k], (int)c->cfg->mode[k]);
            atomic_init(&p->sample_when, (int)c->cfg->sample);
            atomic_init(&p->log_level, -1);
            dbt_lease_init(p);
            p->nbounds = dbt_hist_bounds(p->hist_bounds, DBT_HIST_MAX);
            dbt_pool_mutex_init(&p->mu);
            pthread_cond_init(&p->conn_cv, NULL);
            dbt_cond_init_mono(&p->live_cv);
            dbt_cond_init_mono(&p->bg_cv);
            /* The renewer is the pool's background thread: the modules below it start it
             * through this, without naming it (pool.h, dbt_pool_start_bg). */
            p->bg_start = dbt_renewer_ensure;
            p->next = c->pools;
            c->pools = p;
            made = true;
        } else if (p) {
            free(p->name);
            free(p);
            p = NULL;
        }
    }
    pthread_mutex_unlock(&c->mu);
    if (made && (c->cfg->mode[DBT_KIND_QUERY] == DBT_MODE_SHADOW ||
                 c->cfg->mode[DBT_KIND_CONN] == DBT_MODE_SHADOW)) {
        /* Once per pool, loudly: a pool that does not enforce its limit is never a quiet
         * setting (live changes say so too: live.c). */
        char mode[64];
        dbt_mode_show(c->cfg->mode, (1u << DBT_NKINDS) - 1, mode, sizeof mode);
        dbt_field f[] = {DBT_S("pool", name), DBT_S("mode", mode), DBT_S("was", "-"),
                         DBT_S("by", "own"),
                         DBT_S("effect", "nothing waits or is refused: counted only")};
        dbt_log(DBT_LOG_WARN, "mode", f, 5);
    }
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
    /* Cleared by another thread's success since this caller was refused (a cause only some
     * calls meet): the cause last logged, which is what refused it. */
    snprintf(out, cap, "%s", p->misconfig[0] ? p->misconfig : p->misconfig_logged);
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

/* What fits in one exit's list per pool: beyond it, the leases give the rest back. */
enum { MAX_EXIT = 256 };

/* Into ops (cap at most), what the process owes Redis for pool p as it ends: its permits and its
 * places in the queue, what the renewer is giving back right now, and what an outage left owed,
 * which the exit now sends in its stead. p->mu held. */
static int owed_at_exit(dbt_pool *p, dbt_owed_op *ops, int cap)
{
    int n = 0;
    /* Places still queued too: a waiter's (an event loop's held commands wait in threads of
     * ours, and a program may exit with some), or one kept for a next waiter. Left queued, each
     * would reach the head and be granted to nobody for a whole lease. */
    for (struct dbt_slot *s = p->slots; s && n < cap; s = s->next)
        if ((s->state == SLOT_HELD || s->state == SLOT_QUEUED || s->orphan) && s->gen == p->gen) {
            /* given back; or withdrawn (given back if granted): a waiter's gives up, an orphan
             * place was not needed any more */
            ops[n].what = s->state == SLOT_HELD ? DBT_OWED_RELEASE
                          : s->orphan           ? DBT_OWED_WITHDRAW
                                                : DBT_OWED_CANCEL;
            ops[n].kind = s->kind;
            ops[n].held_ms =
                s->state == SLOT_HELD && !s->orphan ? (dbt_now_us() - s->t_grant_us) / 1000 : -1;
            memcpy(ops[n++].id, s->id, sizeof ops[0].id);
        }
    /* What the renewer was giving back as the process exits: it may not get to send it. */
    for (int i = 0; i < p->ninflight && n < cap; i++)
        ops[n++] = p->inflight[i];
    /* And what it owes Redis from an outage, though the outage backoff may still run: Redis
     * may be back since the call that set it (a release just after a stall), and the lease
     * would give it back only much later. */
    for (int i = 0; i < p->ndeferred && n < cap; i++)
        ops[n++] = p->deferred[i];
    p->ndeferred = 0;
    return n;
}

/* Waits, with p->mu held (let go meanwhile), until no acquire of this process is in flight, or
 * until `until_us`. A place is withdrawn only once its acquire's reply was read: a withdrawal
 * that overtook the acquire (each on its own connection) would find nothing in Redis, and the
 * acquire would then queue a place that nobody withdraws, granted to nobody for a lease. No new
 * acquire starts once p->exiting is set (acquire.c, begin_slot). */
static void await_acquires_in_flight(dbt_pool *p, int64_t until_us)
{
    for (;;) {
        bool in_flight = false;
        for (struct dbt_slot *s = p->slots; s && !in_flight; s = s->next)
            in_flight = s->state == SLOT_PENDING && s->gen == p->gen;
        if (!in_flight || dbt_now_us() >= until_us)
            return;
        pthread_mutex_unlock(&p->mu);
        struct timespec ms = {.tv_sec = 0, .tv_nsec = 1000000};
        nanosleep(&ms, NULL);
        pthread_mutex_lock(&p->mu);
    }
}

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
    dbt_conns_free(p);
    dbt_live_drop(p);
    dbt_report_local(p);
    /* Give back what is still held or queued, and what is owed: a process that exits cleanly
     * should not make others wait out its leases. Written without waiting, then every reply is
     * read (all within one Redis timeout), so the commands surely landed before the sockets
     * close. */
    dbt_owed_op ops[MAX_EXIT];
    pthread_mutex_lock(&p->mu);
    dbt_handover_quit(p);
    dbt_shelf_settle_at_exit(p);
    int n = owed_at_exit(p, ops, MAX_EXIT);
    pthread_mutex_unlock(&p->mu);
    int64_t budget = dbt_redis_budget_begin(p->client->cfg->redis_timeout_ms);
    dbt_settle_at_exit(p, ops, n, MAX_EXIT);
    dbt_redis_budget_end(budget);
    struct dbt_slot *s = p->slots;
    p->slots = NULL;
    while (s) {
        struct dbt_slot *next = s->next;
        dbt_free_slot(s);
        s = next;
    }
    dbt_summary_at_exit(p->name, &p->st);
    for (int i = 0; i < p->nfree; i++)
        dbt_redis_free(p->free_conns[i]); /* their replies were read: dbt_settle_at_exit */
    dbt_sharing_free(p);
    dbt_sample_free(p);
    dbt_keys_free(&p->keys);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->conn_cv);
    pthread_cond_destroy(&p->live_cv);
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
     * withdrawal is written without waiting for its reply (pipelined on the connections), then
     * the replies are read: a Redis that was only slow still gets them all, and one that failed
     * is sent again. */
    int64_t budget = dbt_redis_budget_begin(c->cfg->redis_timeout_ms);
    int64_t until_us = dbt_now_us() + c->cfg->redis_timeout_ms * 1000;
    for (dbt_pool *p = pools; p; p = p->next) {
        /* Copied first: the network calls happen without the lock. */
        dbt_owed_op ops[MAX_EXIT];
        pthread_mutex_lock(&p->mu);
        /* Threads may still run: none may pass on a permit this gives back, nor queue again. */
        p->exiting = true;
        await_acquires_in_flight(p, until_us);
        /* Permits other processes passed to our waiters meanwhile are given back with ours. */
        dbt_handover_quit(p);
        /* Our kept permits off the host's shelf first: those another process took are its own. */
        dbt_shelf_settle_at_exit(p);
        /* What the exit gives back of the group's permits, counted before it leaves the segment
         * (docs/design.md, "Shares"); then no more are passed to us; the host's last process
         * removes the segment's file. */
        dbt_sharing_gave_back_at_exit(p);
        dbt_sharing_leave(p);
        int n = owed_at_exit(p, ops, MAX_EXIT);
        dbt_pool_stats st = p->st;
        pthread_mutex_unlock(&p->mu);
        dbt_report_local(p);
        dbt_settle_at_exit(p, ops, n, MAX_EXIT);
        /* Then, in what is left of the exit's time, the holds not sent yet (shadow mode's
         * sample): after what others wait for. */
        dbt_sample_send_all(p);
        dbt_summary_at_exit(p->name, &st);
    }
    dbt_redis_budget_end(budget);
    /* Last: the exit's own calls above went through this process' relay, if it speaks. */
    dbt_relay_stop();
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
    /* Last, after the pools' own last calls (which may go through it): a relay this process
     * started with the client's configuration reads it, and the caller frees it next. */
    dbt_relay_forget_config(c->cfg);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
