/* kept.h - kept permits (kept.c): when the next one is due back (-1: none kept), and giving back
 * those that are due (revoked by a waiter's arrival, or idle for DBTHROTTLE_CACHE_IDLE). */
#ifndef DBT_KEPT_H
#define DBT_KEPT_H

#include "pool_types.h"

int64_t dbt_parked_due_us(dbt_pool *p); /* p->mu held */
void dbt_return_parked(dbt_pool *p);    /* without p->mu */
/* p->mu held, at exit or when the pool is freed: this process' permits on the host's shelf come
 * off it, to be given back with the rest of what it holds; those another process took are not
 * this process' to give back any more (unlinked). */
void dbt_shelf_settle_at_exit(dbt_pool *p);
/* p->mu held: whether a recall of the host's shelf is to be carried out (p->shelf_recall). */
bool dbt_shelf_recall_due(const dbt_pool *p);
/* Without p->mu: every entry of the host's shelf of the recalled kinds goes back to Redis,
 * whichever process of the host shelved it (another host waits). */
void dbt_return_shelf(dbt_pool *p);

#endif
