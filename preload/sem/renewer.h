/* renewer.h - the pool's background thread (renewer.c). */
#ifndef DBT_RENEWER_H
#define DBT_RENEWER_H

#include "pool_types.h"

/* Call with p->mu held: starts or wakes the thread. The pool's maker sets it as p->bg_start, by
 * which the modules below start it (dbt_pool_start_bg). */
void dbt_renewer_ensure(dbt_pool *p);
void dbt_renewer_stop(dbt_pool *p); /* call without p->mu: stops and joins it */

/* A release was sent without waiting for its reply: the renewer reads it soon (at most once per
 * DRAIN_DELAY_US), so that one that failed is owed and sent again even if the process goes idle
 * and never uses that connection again. Without p->mu. */
void dbt_renewer_drain_soon(dbt_pool *p);

#endif
