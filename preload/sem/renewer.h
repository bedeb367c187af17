/* renewer.h - the pool's background thread (renewer.c). */
#ifndef DBT_RENEWER_H
#define DBT_RENEWER_H

#include "pool_types.h"

/* Call with p->mu held: starts or wakes the thread. The pool's maker sets it as p->bg_start, by
 * which the modules below start it (dbt_pool_start_bg). */
void dbt_renewer_ensure(dbt_pool *p);
void dbt_renewer_stop(dbt_pool *p); /* call without p->mu: stops and joins it */

#endif
