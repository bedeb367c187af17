/* trace.h - a slot's events in the log (trace.c). */
#ifndef DBT_TRACE_H
#define DBT_TRACE_H

#include "log.h"
#include "pool_types.h"

/* What the trace says of a slot, copied (not its links, nor its atomics, which another thread may
 * be changing): for a trace made once the slot is no longer ours to read. p->mu held. */
void dbt_trace_copy(struct dbt_slot *to, const struct dbt_slot *s);
/* True when a line of pool p's trace at lvl is written: by the pool's live log_level when one is
 * set (dbthrottle set POOL log_level), else by the process'. Call before building costly fields. */
bool dbt_trace_enabled(const dbt_pool *p, dbt_log_level lvl);
/* Logs event for s at lvl, if enabled (dbt_trace_enabled); a negative number is left out, as is
 * extra_key when NULL. */
void dbt_trace(dbt_log_level lvl, const char *event, const struct dbt_slot *s, int64_t waited_us,
               int64_t held_us, long long holders, long long queue, const char *extra_key,
               const char *extra);

#endif
