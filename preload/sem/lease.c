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
    atomic_init(&p->lease_prev_min_ms, own);
    atomic_init(&p->lease_prev_max_ms, own);
    atomic_init(&p->lease_prev_until_us, 0);
}

void dbt_lease_set(dbt_pool *p, int64_t lease_ms)
{
    int64_t was = atomic_load(&p->lease_ms);
    if (was == lease_ms)
        return;
    /* Changed again before the last change settled (an operator's typo corrected): those
     * before are still carried too. */
    int64_t now = dbt_now_us(), lo = was, hi = was;
    if (now < atomic_load(&p->lease_prev_until_us)) {
        int64_t pmin = atomic_load(&p->lease_prev_min_ms),
                pmax = atomic_load(&p->lease_prev_max_ms);
        lo = pmin < lo ? pmin : lo;
        hi = pmax > hi ? pmax : hi;
    }
    /* A call built just before carries the old lease: accepted up to a Redis timeout later
     * (its budget), its permit lives a lease from its send; renewed since, it carries the new
     * one. A second of slack for a renewer late on a loaded machine. */
    atomic_store(&p->lease_prev_min_ms, lo);
    atomic_store(&p->lease_prev_max_ms, hi);
    atomic_store(&p->lease_prev_until_us,
                 now + (hi + p->client->cfg->redis_timeout_ms + 1000) * 1000);
    atomic_store(&p->lease_ms, lease_ms);
}

int64_t dbt_lease_us(const dbt_pool *p)
{
    return atomic_load(&p->lease_ms) * 1000;
}

/* Whether a permit may still carry a lease from before the one in force. */
static bool settling(const dbt_pool *p, int64_t now)
{
    return now < atomic_load(&p->lease_prev_until_us);
}

int64_t dbt_lease_shortest_us(const dbt_pool *p, int64_t now)
{
    int64_t cur = dbt_lease_us(p);
    if (!settling(p, now))
        return cur;
    int64_t prev = atomic_load(&p->lease_prev_min_ms) * 1000;
    return prev < cur ? prev : cur;
}

int64_t dbt_lease_longest_us(const dbt_pool *p, int64_t now)
{
    int64_t cur = dbt_lease_us(p);
    if (!settling(p, now))
        return cur;
    int64_t prev = atomic_load(&p->lease_prev_max_ms) * 1000;
    return prev > cur ? prev : cur;
}

void dbt_lease_bind(const dbt_pool *p, dbt_script_call *c, int64_t lease_ms)
{
    dbt_script_set_lease(c, lease_ms, dbt_lease_longest_us(p, dbt_now_us()) / 1000, p->client->cfg);
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
