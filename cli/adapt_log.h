/* adapt_log.h - the limit changes dbthrottle adapt logged (its logfmt lines on stderr, a dry
 * run's included), read back for dbthrottle report --adapt-log: the controller's decisions drawn
 * on the report's chart and replayed as a limit over time. Pure: a line in, a change out
 * (tests/unit/test_adapt_log.c). */
#ifndef DBT_ADAPT_LOG_H
#define DBT_ADAPT_LOG_H

#include <stdbool.h>
#include <stdint.h>

/* One change: event=adapt_change from=N to=N reason="..." dry_run=true|false, at its ts. */
typedef struct {
    int64_t at_us; /* its ts (UTC, us since the epoch: the scale of Redis' clock) */
    int from, to;  /* from 0: the controller did not know the limit in force */
    bool dry_run;
    char reason[160]; /* as logged, cut to fit */
} dbt_adapt_change;

/* Whether line (one logfmt line, as log.c writes it) is an adapt_change of the pool named `pool`
 * (as dbthrottle adapt logs it: cli_escape_name's form) and kind ("query" or "connection");
 * *out filled when it is. A line that is not logfmt, another event, pool or kind, or a change
 * whose ts, from or to cannot be read is not one. */
bool dbt_adapt_log_change(const char *line, const char *pool, const char *kind,
                          dbt_adapt_change *out);

#endif
