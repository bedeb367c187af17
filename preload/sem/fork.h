/* fork.h - fork handling and the locks' kinds (fork.c). */
#ifndef DBT_FORK_H
#define DBT_FORK_H

#include "pool_types.h"

void dbt_fork_register(dbt_client *c);
void dbt_fork_unregister(dbt_client *c);
void dbt_new_client_id(char cid[17]);
void dbt_cond_init_mono(pthread_cond_t *cv);   /* a condition variable timed by CLOCK_MONOTONIC */
void dbt_pool_mutex_init(pthread_mutex_t *mu); /* p->mu's kind (see fork.c) */

#endif
