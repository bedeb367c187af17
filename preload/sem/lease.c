/* lease.c - a pool's lease in force. A live lease (docs/design.md, "Live settings per pool")
 * applies to the calls made from then on; each permit and place keeps the lease of the call
 * Redis last accepted for it (struct dbt_slot's lease_us), since Redis expires it by that one.
 * For a while after a change, permits of both leases may be held: the renewer renews at a third
 * of the shorter, and a quarantine lasts for the longer. */
#include "lease.h"
#include "clock.h"

void dbt_lease_init(dbt_pool *p)
{
    int64_t own = p->client->cfg->lease_ms;
    atomic_init(&p->lease_ms, own);
    atomic_init(&p->lease_prev_ms, own);
    atomic_init(&p->lease_prev_until_us, 0);
}

void dbt_lease_set(dbt_pool *p, int64_t lease_ms)
{
    int64_t was = atomic_load(&p->lease_ms);
    if (was == lease_ms)
        return;
    /* A call built just before carries the old lease: accepted up to a Redis timeout later
     * (its budget), its permit lives a lease from its send; renewed since, it carries the new
     * one. A second of slack for a renewer late on a loaded machine. */
    int64_t until = dbt_now_us() + (was + p->client->cfg->redis_timeout_ms + 1000) * 1000;
    atomic_store(&p->lease_prev_ms, was);
    atomic_store(&p->lease_prev_until_us, until);
    atomic_store(&p->lease_ms, lease_ms);
}

int64_t dbt_lease_us(const dbt_pool *p)
{
    return atomic_load(&p->lease_ms) * 1000;
}

/* The lease before the one in force, while a permit may still carry it; else the one in force. */
static int64_t prev_us(const dbt_pool *p, int64_t now)
{
    return now < atomic_load(&p->lease_prev_until_us) ? atomic_load(&p->lease_prev_ms) * 1000
                                                      : dbt_lease_us(p);
}

int64_t dbt_lease_shortest_us(const dbt_pool *p, int64_t now)
{
    int64_t cur = dbt_lease_us(p), prev = prev_us(p, now);
    return prev < cur ? prev : cur;
}

int64_t dbt_lease_longest_us(const dbt_pool *p, int64_t now)
{
    int64_t cur = dbt_lease_us(p), prev = prev_us(p, now);
    return prev > cur ? prev : cur;
}

void dbt_lease_bind(const dbt_pool *p, dbt_script_call *c)
{
    dbt_script_set_lease(c, dbt_lease_us(p) / 1000, dbt_lease_longest_us(p, dbt_now_us()) / 1000,
                         p->client->cfg);
}

void dbt_lease_renewed(struct dbt_slot *s, int64_t sent_us, int64_t lease_ms)
{
    s->t_renewed_us = sent_us;
    s->lease_us = lease_ms * 1000;
}

int64_t dbt_lease_renewed_for(const struct dbt_slot *s, int64_t lease_us)
{
    return s->lease_us < lease_us ? s->t_renewed_us - (lease_us - s->lease_us) : s->t_renewed_us;
}
