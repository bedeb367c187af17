/* summary.h - a pool's counters in the log: the line at exit and the periodic one. */
#ifndef DBT_SUMMARY_H
#define DBT_SUMMARY_H

#include "pool_types.h"

/* The exit line of one pool (none when it did nothing): at warn level when commands were
 * refused, timed out or ran unthrottled, else info. Names the library's version. */
void dbt_summary_at_exit(const char *pool, const dbt_pool_stats *st);

/* DBTHROTTLE_LOG_STATS: when the pool's next periodic line is due (monotonic us), or `t` if that
 * is sooner or the setting is off: for the renewer's sleeps. p->mu held. */
int64_t dbt_summary_sooner(dbt_pool *p, int64_t t);

/* Writes the periodic line if it is due: the counters of the interval and in total. Called by the
 * renewer with p->mu held; lets it go while it writes. True when it wrote one. */
bool dbt_summary_periodic(dbt_pool *p);

#endif
