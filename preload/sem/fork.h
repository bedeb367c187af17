/* fork.h - fork handling (fork.c): the registry of live clients, and the table of the resets
 * each module of a pool registers for a fork()ed child. */
#ifndef DBT_FORK_H
#define DBT_FORK_H

#include "pool_types.h"

void dbt_fork_register(dbt_client *c);
void dbt_fork_unregister(dbt_client *c);
void dbt_new_client_id(char cid[17]);

/* When a module's reset runs in a fork()ed child, for each pool: the pool's own first (it makes
 * the lock anew and forgets the parent's slots and Redis connections); then each module's, which
 * touch only what that module owns; host sharing's last (it changes the pool's group, which asks
 * the listener and the renewer, reset by then, to start over). */
typedef enum { DBT_FORK_FIRST, DBT_FORK_MODULE, DBT_FORK_LAST } dbt_fork_phase;
typedef void (*dbt_after_fork_fn)(dbt_pool *p);
/* A module registers its reset once, from a constructor of its own file (before any client, so
 * before any fork this library handles): fork.c names none of them. */
void dbt_fork_on_child(dbt_fork_phase phase, dbt_after_fork_fn reset);

#endif
