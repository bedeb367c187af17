/* live.h - a pool's live settings (live.c). */
#ifndef DBT_LIVE_H
#define DBT_LIVE_H

#include "pool_types.h"

/* Applies the text a renewal brought ("" none), replacing the pool's live settings. Without
 * p->mu. */
void dbt_live_apply(dbt_pool *p, const char *text);
/* The version applied (0: none), for the next renewal. p->mu held. */
long long dbt_live_version(const dbt_pool *p);
/* The process' report of the pool came back, or failed: a connection's first command that
 * waits for the live settings goes on (dbt_pool_await_live). p->mu held. */
void dbt_live_heard(dbt_pool *p);
/* Frees them (the pool is freed). */
void dbt_live_drop(dbt_pool *p);

#endif
