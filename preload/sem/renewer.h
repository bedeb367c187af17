/* renewer.h - the pool's background thread (renewer.c). */
#ifndef DBT_RENEWER_H
#define DBT_RENEWER_H

#include "pool_types.h"

void dbt_renewer_ensure(dbt_pool *p); /* call with p->mu held: starts or wakes the thread */
void dbt_renewer_stop(dbt_pool *p);   /* call without p->mu: stops and joins it */

void dbt_wake_renewer(dbt_pool *p); /* p->mu held: out of its park or its listening */

/* A release was sent without waiting for its reply: the renewer reads it soon (at most once per
 * DRAIN_DELAY_US), so that one that failed is owed and sent again even if the process goes idle
 * and never uses that connection again. Without p->mu. */
void dbt_renewer_drain_soon(dbt_pool *p);

/* In a fork()ed child: no renewer thread (threads do not survive fork); it starts anew when
 * needed. */
void dbt_renewer_after_fork(dbt_pool *p);

#endif
