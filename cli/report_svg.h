/* report_svg.h - dbthrottle report --svg: the report drawn (report_svg.c). Pure but for the
 * stream it writes to: tests/unit/test_report_svg.c reads what it draws from made-up results. */
#ifndef DBT_REPORT_SVG_H
#define DBT_REPORT_SVG_H

#include "replay.h"

#include <stdio.h>

/* What the chart shows: per candidate limit, the wait p99 it adds, the share of commands that
 * would wait and the refusals; and the concurrency the fleet had over time (each bucket's peak
 * and time-weighted mean) with the candidate limits drawn across it. */
typedef struct {
    const char *pool; /* UTF-8 (the caller escapes other bytes); XML-escaped here */
    const char *kind; /* "query" or "connection" */
    const dbt_replay_result *results;
    int nresults;
    const dbt_replay_bucket *timeline;
    size_t nbuckets;
    int64_t bucket_us; /* the buckets' start_us: Redis' clock (us since the epoch) */
    /* An adaptive controller's limit over time (dbthrottle report --adapt-log), NULL none: drawn
     * across the concurrency as a solid step line, and what it would have cost as one more bar
     * ("adapt"). The schedule's from_us are on the timeline's clock. */
    const dbt_replay_limit *adapt;
    size_t nadapt;
    const dbt_replay_result *adapt_result;
} dbt_report_chart;

/* Writes the chart as one SVG document. False when the stream failed. */
bool dbt_report_svg(FILE *out, const dbt_report_chart *c);

#endif
