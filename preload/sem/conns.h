/* conns.h - the connections the program has on a pool (conns.c), for dbthrottle clients. */
#ifndef DBT_CONNS_H
#define DBT_CONNS_H

#include "pool_types.h"

#include <stdbool.h>
#include <stddef.h>

/* The text of this process' connections (dbt_format_clients) into out (DBT_CLIENTS_MAX bytes),
 * "" when it knows none; false when it could not be made (then out says nothing). Clears
 * known_changed. p->mu held. */
bool dbt_conns_format(dbt_pool *p, char *out, size_t cap);
/* Notes a change (known_changed) when the connections' states differ from what the last report
 * said; *busy: whether any is not idle now or was in that report (the renewer looks again within
 * DBT_DOING_REPORT_US while so: a wait, a command or a transaction that ends is reported, not
 * left as it was until the next heartbeat). p->mu held. */
void dbt_conns_look(dbt_pool *p, int64_t now, bool *busy);
/* Frees what the pool knows of them (the pool is freed, or a fork()ed child starts anew). */
void dbt_conns_free(dbt_pool *p);

#endif
