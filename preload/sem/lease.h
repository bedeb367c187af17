/* lease.h - a pool's lease in force (lease.c): the process' own DBTHROTTLE_LEASE, or the live
 * value the operator set (dbthrottle set POOL lease ...). */
#ifndef DBT_LEASE_H
#define DBT_LEASE_H

#include "pool_types.h"
#include "script_protocol.h"

/* The process' own lease, in force until a live one is applied (a new pool). */
void dbt_lease_init(dbt_pool *p);
/* The lease in force from now on (live.c, as it applies a version); the one before stays the
 * shortest and the longest in use for as long as a permit may still carry it. */
void dbt_lease_set(dbt_pool *p, int64_t lease_ms);
/* The lease in force, which the pool's calls carry (µs). Any thread, without p->mu. */
int64_t dbt_lease_us(const dbt_pool *p);
/* The shortest and the longest lease a permit or a place of the pool may carry at `now` (µs):
 * the one in force, and lately the one before. The renewal period is the shortest's third; the
 * quarantine is the longest's (a holder renewed with it may still re-assert by it). */
int64_t dbt_lease_shortest_us(const dbt_pool *p, int64_t now);
int64_t dbt_lease_longest_us(const dbt_pool *p, int64_t now);
/* A built call made to carry lease_ms (the lease in force when the caller read it: dbt_lease_us),
 * and the keys' TTL and the Q that go with it. */
void dbt_lease_bind(const dbt_pool *p, dbt_script_call *c, int64_t lease_ms);
/* s was accepted by Redis in a call sent at sent_us that carried lease_ms: its lease runs from
 * there (struct dbt_slot's t_renewed_us, lease_us). p->mu held. */
void dbt_lease_renewed(struct dbt_slot *s, int64_t sent_us, int64_t lease_ms);
/* When a permit renewed at s's last renewal ends in Redis, said as the renewal time a receiver
 * of lease_us would count from (another process of the host, or this one's shelf): no later
 * than its true end, whichever of the two leases is longer. */
int64_t dbt_lease_renewed_for(const struct dbt_slot *s, int64_t lease_us);

#endif
