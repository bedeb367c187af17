/* kept.c - permits kept between commands (DBTHROTTLE_CACHE_PERMITS): keeping, taking back, and
 * the renewer giving back those due. */
#include "kept.h"
#include "clock.h"
#include "fork.h"
#include "handover.h"
#include "pool.h"
#include "release.h"
#include "sharing.h"
#include "trace.h"

#include <string.h>

/* ---- kept permits (DBTHROTTLE_CACHE_PERMITS) ------------------------------------------------ */

bool dbt_permit_park(dbt_permit *s)
{
    if (!s || !s->pool->client->cfg->cache_permits)
        return false; /* caching off: the common query path pays no lock for asking */
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us();
    /* A permit another process of the host made and passed here (sharing.c) is not kept: Redis
     * pushes the revoke that would give it back to its maker, not to us. */
    dbt_keep_facts f = {.cache_on = true,
                        .held = s->state == SLOT_HELD,
                        .already_kept = s->parked,
                        .current_gen = s->gen == p->gen,
                        .contended = p->queue[s->kind].keep.contended,
                        .redis_down = p->down_until_us > now,
                        .made_here = dbt_sharing_id_ours(p, s->id),
                        .lease = dbt_slot_lease(p, s, now)};
    dbt_permit_route r = dbt_core_keep(&f);
    if (r.mark_unrenewed)
        (void)dbt_slot_expire_unrenewed(p, s, now); /* marks it lost, says why */
    bool keep = r.to == DBT_ROUTE_WAITER;
    if (keep) {
        s->parked = true;
        s->parked_us = now;
        p->nparked++;
        /* The renewer gives it back after DBTHROTTLE_CACHE_IDLE (it listens for a waiter's
         * arrival already: it does while the process holds permits). Woken only when it would
         * sleep past that: once per idle period at most, not once per command. */
        int64_t back = now + p->client->cfg->cache_idle_ms * 1000;
        if (!p->thread_started)
            dbt_pool_start_bg(p);
        else if (p->bg_until_us > back)
            dbt_pool_wake_bg(p);
    }
    pthread_mutex_unlock(&p->mu);
    if (keep)
        dbt_trace(DBT_LOG_DEBUG, "keep", s, -1, -1, -1, -1, NULL, NULL);
    return keep;
}

bool dbt_permit_unpark(dbt_permit **slot)
{
    dbt_permit *s = *slot;
    if (!s)
        return false;
    dbt_pool *p = s->pool;
    pthread_mutex_lock(&p->mu);
    bool ours = s->state == SLOT_HELD && s->parked && s->gen == p->gen;
    if (s->parked) {
        s->parked = false;
        if (s->gen == p->gen)
            p->nparked--;
    }
    pthread_mutex_unlock(&p->mu);
    if (ours) {
        dbt_trace(DBT_LOG_DEBUG, "reuse", s, -1, -1, -1, -1, NULL, NULL);
        return true;
    }
    /* Given back meanwhile (a waiter came, or it sat idle too long), or the parent's. */
    dbt_release(s);
    *slot = NULL;
    return false;
}

int64_t dbt_parked_due_us(dbt_pool *p)
{
    if (p->nparked == 0)
        return -1;
    int64_t idle = p->client->cfg->cache_idle_ms * 1000, due = -1;
    for (struct dbt_slot *s = p->slots; s; s = s->next)
        if (s->parked) {
            int64_t at = dbt_core_kept_due_us(p->queue[s->kind].keep.contended, s->parked_us, idle);
            if (due < 0 || at < due)
                due = at;
        }
    return due;
}

void dbt_return_parked(dbt_pool *p)
{
    enum { BATCH = 64 };
    struct dbt_slot copies[BATCH];
    const char *why[BATCH];
    int n = 0;
    pthread_mutex_lock(&p->mu);
    int64_t now = dbt_now_us(), idle = p->client->cfg->cache_idle_ms * 1000;
    for (struct dbt_slot *s = p->slots, *next; s && n < BATCH; s = next) {
        next = s->next;
        if (!s->parked ||
            dbt_core_kept_due_us(p->queue[s->kind].keep.contended, s->parked_us, idle) > now)
            continue;
        if (p->ninflight >= (int)(sizeof p->inflight / sizeof p->inflight[0]))
            break;
        /* To another process of the host, if one of its threads waited longest: no Redis. */
        if (dbt_handover_offer_host(p, s)) {
            s->parked = false;
            p->nparked--;
            dbt_unlink_slot(p, s);
            s->state = SLOT_RETURNED; /* its owner frees it */
            continue;
        }
        p->inflight[p->ninflight].cancel = false;
        p->inflight[p->ninflight].kind = s->kind;
        memcpy(p->inflight[p->ninflight].id, s->id, sizeof s->id);
        p->ninflight++;
        why[n] = p->queue[s->kind].keep.contended ? "a waiter queued"
                                                  : "kept idle for DBTHROTTLE_CACHE_IDLE";
        /* What the trace and the release need, copied: once RETURNED, the owner may free s. */
        dbt_trace_copy(&copies[n], s);
        copies[n].query = NULL;
        n++;
        s->parked = false;
        p->nparked--;
        dbt_unlink_slot(p, s); /* no longer renewed, nor counted as held */
        s->state = SLOT_RETURNED;
    }
    bool down = p->down_until_us > now;
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < n; i++) {
        if (!down)
            dbt_send_release(p, copies[i].kind, copies[i].id);
        else
            dbt_defer_op(p, false, copies[i].kind, copies[i].id);
        dbt_trace(DBT_LOG_INFO, "release", &copies[i], -1, dbt_now_us() - copies[i].t_grant_us, -1,
                  -1, "reason", why[i]);
    }
    pthread_mutex_lock(&p->mu);
    p->ninflight = 0; /* only the renewer adds to it */
    pthread_mutex_unlock(&p->mu);
}

/* In a fork()ed child: no permit kept, nothing being given back (the parent's). */
static void after_fork(dbt_pool *p)
{
    p->ninflight = 0;
    p->nparked = 0;
    dbt_queue_event fork = {.type = DBT_QEV_FORK};
    for (int k = 0; k < DBT_NKINDS; k++)
        (void)dbt_queue_step(&p->queue[k], &fork); /* what it knew of the queues too */
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
