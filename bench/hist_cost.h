/* hist_cost.h - what the wait and hold histograms add to Redis' script CPU (make bench). */
#ifndef DBT_BENCH_HIST_COST_H
#define DBT_BENCH_HIST_COST_H

#include "redis_server.h"

/* Prints Redis' script CPU per uncontended acquire+release with the histograms and without them
 * (the same scripts with their recording made a no-op), measured in alternating rounds against
 * server r, and their ratio. */
void hist_cost_report(const test_redis *r);

#endif
