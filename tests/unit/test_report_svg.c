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

/* --adapt-log: the controller's limits over time, one more bar ("adapt", in proportion as the
 * others) and a solid step line across the concurrency: the limit in force at the timeline's
 * start (2: set before it), then each change within it (to 5 a third of the way in), none after
 * its end. */
Test(report_svg, the_adaptive_controllers_limit_is_a_bar_and_a_step_line)
{
    dbt_replay_result r[1] = {{.limit = 2, .commands = 10, .waited = 5, .wait_p99_us = 40 * MS}};
    dbt_replay_result adapt = {.limit = 1, .commands = 10, .waited = 2, .wait_p99_us = 20 * MS};
    dbt_replay_bucket b[3] = {{.start_us = 1700000000000000, .mean = 1, .peak = 2},
                              {.start_us = 1700000060000000, .mean = 1, .peak = 2},
                              {.start_us = 1700000120000000, .mean = 1, .peak = 2}};
    dbt_replay_limit s[] = {{.from_us = INT64_MIN, .limit = 1},
                            {.from_us = 1699999990000000, .limit = 2},
                            {.from_us = 1700000060000000, .limit = 5},
                            {.from_us = 1700000500000000, .limit = 9}};
    dbt_report_chart c = {.pool = "p",
                          .kind = "query",
                          .results = r,
                          .nresults = 1,
                          .timeline = b,
                          .nbuckets = 3,
                          .bucket_us = 60000000,
                          .adapt = s,
                          .nadapt = 4,
                          .adapt_result = &adapt};
    char *svg = draw(&c);
    double h[4];
    cr_assert_eq(bar_heights(svg, h, 4), 2, "a bar per limit and the controller's");
    cr_expect(h[1] > 0 && h[1] * 2 > h[0] * 0.99 && h[1] * 2 < h[0] * 1.01, "%.1f is half %.1f",
              h[1], h[0]);
    cr_expect_eq(count(svg, ">adapt</text>"), 1);
    /* the step line: from 2 at the start, up to 5 at a third of the width, nothing of 9 */
    const char *line = strstr(svg, "<path fill=\"none\" stroke=\"#006d2c\"");
    cr_assert_not_null(line, "the controller's line");
    cr_expect_eq(count(line, " V"), 1, "one change within the timeline");
    cr_expect_eq(count(svg, ">adapt 5</text>"), 1, "labelled with its last limit");
    cr_expect_eq(count(svg, "adapt 9"), 0);
    double x1 = 0;
    const char *hx = strstr(line, " H");
    cr_assert_not_null(hx);
    x1 = strtod(hx + 2, NULL);
    cr_expect(x1 > 80 + 800.0 / 3 - 1 && x1 < 80 + 800.0 / 3 + 1, "the change at %.1f", x1);
    free(svg);
}
