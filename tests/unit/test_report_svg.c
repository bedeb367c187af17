/* dbthrottle report --svg (cli/report_svg.c): made-up results drawn, and what the drawing says
 * read back from its text: a bar's height in proportion to its wait p99, the pool's name escaped,
 * every candidate limit a line across the concurrency panel. */
#include "report_svg.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MS INT64_C(1000)

static char *draw(const dbt_report_chart *c)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    cr_assert_not_null(f);
    cr_assert(dbt_report_svg(f, c));
    cr_assert_eq(fclose(f), 0);
    return buf;
}

/* The heights of the costs panel's bars (the <rect>s with a <title>), in order; returns how
 * many. */
static int bar_heights(const char *svg, double *h, int cap)
{
    int n = 0;
    for (const char *p = svg; n < cap && (p = strstr(p, "<rect x=")) != NULL; p++) {
        const char *end = strchr(p, '>');
        const char *at = strstr(p, "height=\"");
        if (!end || !at || at > end || strncmp(end, "><title>", 8) != 0)
            continue;
        h[n++] = strtod(at + 8, NULL);
    }
    return n;
}

static int count(const char *svg, const char *needle)
{
    int n = 0;
    for (const char *p = svg; (p = strstr(p, needle)) != NULL; p += strlen(needle))
        n++;
    return n;
}

Test(report_svg, bars_scale_with_the_wait_and_every_limit_is_drawn)
{
    dbt_replay_result r[3] = {
        {.limit = 2, .commands = 100, .waited = 60, .refused = 3, .wait_p99_us = 40 * MS},
        {.limit = 4, .commands = 100, .waited = 20, .wait_p99_us = 20 * MS},
        {.limit = 8, .commands = 100, .waited = 0, .wait_p99_us = 0}};
    dbt_replay_bucket b[3] = {{.start_us = 1700000000000000, .mean = 3.5, .peak = 6},
                              {.start_us = 1700000060000000, .mean = 2.0, .peak = 9},
                              {.start_us = 1700000120000000, .mean = 0.5, .peak = 1}};
    dbt_report_chart c = {.pool = "orders<&\"'>",
                          .kind = "query",
                          .results = r,
                          .nresults = 3,
                          .timeline = b,
                          .nbuckets = 3,
                          .bucket_us = 60000000};
    char *svg = draw(&c);
    cr_expect(strncmp(svg, "<?xml", 5) == 0);
    cr_expect_not_null(strstr(svg, "</svg>\n"));
    cr_expect_not_null(strstr(svg, "pool orders&lt;&amp;&quot;&apos;&gt;, query permits"),
                       "the pool's name escaped");
    cr_expect_null(strstr(svg, "orders<"), "no raw name");
    double h[8];
    int n = bar_heights(svg, h, 8);
    cr_assert_eq(n, 3, "%d bars", n);
    cr_expect(h[0] > 0 && h[1] > 0, "bars %f %f", h[0], h[1]);
    cr_expect_float_eq(h[0] / h[1], 2.0, 0.01, "a wait twice as long, a bar twice as high (%f, %f)",
                       h[0], h[1]);
    cr_expect_float_eq(h[2], 0.0, 1e-9, "no wait, no bar");
    cr_expect_not_null(strstr(svg, ">3 refused<"));
    cr_expect_not_null(strstr(svg, ">60.0% wait<"));
    /* each limit: its label under its bar, and its line across the concurrency panel */
    cr_expect_eq(count(svg, ">limit 2</text>"), 2);
    cr_expect_eq(count(svg, ">limit 4</text>"), 2);
    cr_expect_eq(count(svg, ">limit 8</text>"), 2);
    cr_expect_eq(count(svg, "stroke-dasharray"), 3);
    cr_expect_not_null(strstr(svg, ">22:13:20<"), "the time axis starts at the first bucket");
    free(svg);
}

Test(report_svg, an_empty_timeline_still_draws)
{
    dbt_replay_result r = {.limit = 1, .commands = 1};
    dbt_report_chart c = {.pool = "p", .kind = "connection", .results = &r, .nresults = 1};
    char *svg = draw(&c);
    cr_expect_not_null(strstr(svg, "</svg>\n"));
    cr_expect_null(strstr(svg, "nan"), "no NaN in the drawing");
    cr_expect_null(strstr(svg, "inf"), "no infinity in the drawing");
    free(svg);
}
