/* kept.h - kept permits (kept.c): when the next one is due back (-1: none kept), and giving back
 * those that are due (revoked by a waiter's arrival, or idle for DBTHROTTLE_CACHE_IDLE). */
#ifndef DBT_KEPT_H
#define DBT_KEPT_H

#include "pool_types.h"

int64_t dbt_parked_due_us(dbt_pool *p); /* p->mu held */
void dbt_return_parked(dbt_pool *p);    /* without p->mu */

#endif
