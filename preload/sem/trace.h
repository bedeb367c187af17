/* trace.h - a slot's events in the log (trace.c). */
#ifndef DBT_TRACE_H
#define DBT_TRACE_H

#include "log.h"
#include "pool_types.h"

/* What the trace says of a slot, copied (not its links, nor its atomics, which another thread may
 * be changing): for a trace made once the slot is no longer ours to read. p->mu held. */
void dbt_trace_copy(struct dbt_slot *to, const struct dbt_slot *s);
/* Logs event for s at lvl, if enabled; a negative number is left out, as is extra_key when NULL. */
void dbt_trace(dbt_log_level lvl, const char *event, const struct dbt_slot *s, int64_t waited_us,
               int64_t held_us, long long holders, long long queue, const char *extra_key,
               const char *extra);

#endif
