/* registry.h - the process registry (registry.c): each process that uses a pool keeps a record
 * of itself in Redis, sent with the renewals it already makes, which dbthrottle status lists. */
#ifndef DBT_REGISTRY_H
#define DBT_REGISTRY_H

#include "pool_types.h"

/* The most bytes of a record's text (see dbt_proc_record). */
#define DBT_RECORD_MAX 1536

/* This process' record for pool p, as of now, into out (DBT_RECORD_MAX bytes), and how long Redis
 * keeps it (*ttl_ms). Call with p->mu held. */
void dbt_registry_record(dbt_pool *p, char *out, int64_t *ttl_ms);

/* How long the renewer waits between two reports of a process that holds and waits nothing
 * (its heartbeat): the lease. */
int64_t dbt_registry_heartbeat_us(const dbt_pool *p);

#endif
