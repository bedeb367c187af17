/* dbthrottle report's replay (cli/replay.c): holds made by hand, run at a limit, and what each
 * command would have waited, worked out here by hand from the rule (first come first served, no
 * barging, weights as units, the wait timeout, each connection's pauses kept). */
#include "replay.h"

#include <criterion/criterion.h>

#define MS INT64_C(1000)

static dbt_replay_result run(const dbt_replay_hold *h, size_t n, int limit, int64_t timeout_us)
{
    dbt_replay_result r;
    cr_assert(dbt_replay(h, n, limit, timeout_us, NULL, &r));
    return r;
}

Test(replay, the_second_of_two_waits_for_the_first_at_a_limit_of_1)
{
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1},
                           {.arrival_us = 10 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 2}};
    dbt_replay_result r = run(h, 2, 1, -1);
    cr_expect_eq(r.commands, 2);
    cr_expect_eq(r.waited, 1);
    cr_expect_eq(r.wait_max_us, 90 * MS);
    cr_expect_eq(r.wait_p99_us, 90 * MS);
    cr_expect_eq(r.wait_p50_us, 0);
    cr_expect_eq(r.server.peak, 1);
    cr_expect_eq(r.span_us, 200 * MS);
    r = run(h, 2, 2, -1);
    cr_expect_eq(r.waited, 0, "at a limit of 2 nobody waits");
    cr_expect_eq(r.server.peak, 2);
}

/* A connection that waited asks its next command later, as a program does: B holds 100 ms from
 * 0; A's three commands of 10 ms asked at 1, 16 and 31 ms (5 ms pauses). At a limit of 1, A's
 * first waits 99 ms, then its next two ask 5 ms after each end and find the unit free. Replayed
 * as arrivals at their sampled times (an open loop) they would have waited too. */
Test(replay, each_connection_keeps_its_pauses)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 7},
        {.arrival_us = 1 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 3},
        {.arrival_us = 16 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 3},
        {.arrival_us = 31 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 3},
    };
    dbt_replay_result r = run(h, 4, 1, -1);
    cr_expect_eq(r.waited, 1, "only A's first waits (%lld waited)", r.waited);
    cr_expect_eq(r.wait_max_us, 99 * MS);
    cr_expect_eq(r.span_us, 140 * MS, "A ends at 140 ms (%lld us)", (long long)r.span_us);
}

/* The sampled wait (the acquire's round trip) is part of the unit's time in Redis' view. */
Test(replay, a_sampled_wait_holds_the_unit_too)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .wait_us = 2 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 1},
        {.arrival_us = 1 * MS, .wait_us = 2 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 2}};
    dbt_replay_result r = run(h, 2, 1, -1);
    cr_expect_eq(r.wait_max_us, 11 * MS);
}

/* A sample taken enforced (DBTHROTTLE_SAMPLE=always): B queued 90 ms behind A's 100 ms hold at
 * the limit of 1 then, and then asked its next command (100 ms) 10 ms after its end. Its queueing
 * is neither held nor paused: the sample shows one unit in use at most, and the replay at 1 puts
 * its own wait (90 ms) where the queueing was, at 2 none, B's next command still 10 ms after
 * B's end. Counted as held time or as a pause (before queued_us), the sample showed a peak of 2
 * and the replay at 2 ran B's next 90 ms late. */
Test(replay, an_enforced_holds_queueing_is_replaced_by_the_replays_own)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1},
        {.arrival_us = 10 * MS, .queued_us = 90 * MS, .hold_us = 50 * MS, .weight = 1, .conn = 2},
        {.arrival_us = 160 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 2}};
    dbt_replay_concurrency seen;
    int64_t span = 0;
    cr_assert(dbt_replay_observed(h, 3, &seen, &span));
    cr_expect_eq(seen.peak, 1, "the sample's concurrency (peak %d)", seen.peak);
    cr_expect_eq(span, 260 * MS);
    dbt_replay_result r = run(h, 3, 1, -1);
    cr_expect_eq(r.waited, 1);
    cr_expect_eq(r.wait_max_us, 90 * MS, "as it queued (%lld us)", (long long)r.wait_max_us);
    cr_expect_eq(r.span_us, 260 * MS);
    r = run(h, 3, 2, -1);
    cr_expect_eq(r.waited, 0);
    cr_expect_eq(r.server.peak, 2);
    cr_expect_eq(r.span_us, 170 * MS, "B's next 10 ms after its end at 60 ms (%lld us)",
                 (long long)r.span_us);
}

/* At its timeout a waiter is refused, and its connection goes on after its pause: B holds 100 ms
 * from 0; A asks at 1 ms (refused at 51 ms), then after a 5 ms pause asks again at 56 ms and
 * waits until 100 ms. */
Test(replay, a_waiter_is_refused_at_the_timeout_and_its_connection_goes_on)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1},
        {.arrival_us = 1 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 2},
        {.arrival_us = 16 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 2},
    };
    dbt_replay_result r = run(h, 3, 1, 50 * MS);
    cr_expect_eq(r.refused, 1);
    cr_expect_eq(r.waited, 2, "the refused one waited its 50 ms, the next 44 ms");
    cr_expect_eq(r.wait_max_us, 50 * MS);
    cr_expect_eq(r.span_us, 110 * MS, "A's second ran from 100 to 110 ms");
    r = run(h, 3, 1, -1);
    cr_expect_eq(r.refused, 0, "no timeout: nobody is refused");
}

/* Weights are units, and nobody barges: at a limit of 4, a weight of 3 runs; a weight of 2
 * waits; a weight of 1 that would fit waits behind it. A weight above the limit is cut to it (as
 * the library cuts it at the grant): it waits for all the units, and runs alone. */
Test(replay, weights_are_units_and_nobody_barges)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 3, .conn = 1},
        {.arrival_us = 10 * MS, .hold_us = 10 * MS, .weight = 2, .conn = 2},
        {.arrival_us = 20 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 3},
        {.arrival_us = 30 * MS, .hold_us = 10 * MS, .weight = 5, .conn = 4},
    };
    dbt_replay_result r = run(h, 4, 4, -1);
    cr_expect_eq(r.waited, 3);
    cr_expect_eq(r.wait_max_us, 90 * MS, "the weight of 2 waits from 10 to 100 ms");
    cr_expect_eq(r.refused, 0, "the weight of 5 is cut to 4, not refused");
    cr_expect_eq(r.server.peak, 4, "the weight of 5 runs alone, as 4 units");
    cr_expect_eq(r.span_us, 120 * MS, "it waits for the 2 and the 1 (100-110 ms), runs 110-120");
}

/* What the sample shows, and what the server would see at a limit. */
Test(replay, concurrency_time_weighted)
{
    /* in units from the arrival, for wait + hold: 0-99 ms 1; 99-100 2; 100-200 3; 200-300 1 */
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 300 * MS, .weight = 1, .conn = 1},
        {.arrival_us = 99 * MS, .wait_us = 1 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 2},
        {.arrival_us = 100 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 3},
    };
    dbt_replay_concurrency c;
    int64_t span;
    cr_assert(dbt_replay_observed(h, 3, &c, &span));
    cr_expect_eq(span, 300 * MS);
    cr_expect_eq(c.peak, 3);
    cr_expect_float_eq(c.mean, 501.0 / 300, 1e-9, "mean %f", c.mean);
    cr_expect_eq(c.p50, 1);
    cr_expect_eq(c.p99, 3);
    dbt_replay_result r = run(h, 3, 2, -1);
    cr_expect_eq(r.server.peak, 2, "never above the limit");
    cr_expect_gt(r.server.at_limit_share, 0.3);
}

/* A waiter granted before its timeout leaves its timeout behind: not the span's end. */
Test(replay, a_timeout_after_the_grant_ends_nothing)
{
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1},
                           {.arrival_us = 0, .hold_us = 10 * MS, .weight = 1, .conn = 2}};
    dbt_replay_result r = run(h, 2, 1, 1000 * MS);
    cr_expect_eq(r.span_us, 110 * MS, "span %lld us", (long long)r.span_us);
    cr_expect_float_eq(r.server.at_limit_share, 1.0, 1e-9);
}

/* Weights count as units in the concurrency seen, and the sample at its own peak waits nothing. */
Test(replay, concurrency_is_in_units)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .wait_us = 1 * MS, .hold_us = 50 * MS, .weight = 4, .conn = 1},
        {.arrival_us = 10 * MS, .wait_us = 1 * MS, .hold_us = 50 * MS, .weight = 2, .conn = 2}};
    dbt_replay_concurrency c;
    int64_t span;
    cr_assert(dbt_replay_observed(h, 2, &c, &span));
    cr_expect_eq(c.peak, 6);
    dbt_replay_result r = run(h, 2, c.peak, -1);
    cr_expect_eq(r.waited, 0, "at the sample's own peak, nobody waits");
    cr_expect_eq(r.server.peak, 6);
}

/* A release measured a little after its connection's next command asked (seen with pgbench): the
 * sample's concurrency does not count the connection twice. */
Test(replay, a_connection_never_overlaps_itself)
{
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 10 * MS, .weight = 1, .conn = 1},
        {.arrival_us = 9 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 1},
        {.arrival_us = 0, .hold_us = 30 * MS, .weight = 1, .conn = 2},
    };
    dbt_replay_concurrency c;
    int64_t span;
    cr_assert(dbt_replay_observed(h, 3, &c, &span));
    cr_expect_eq(c.peak, 2, "2 connections, peak %d", c.peak);
}

Test(replay, nothing_to_replay)
{
    dbt_replay_result r = run(NULL, 0, 4, -1);
    cr_expect_eq(r.commands, 0);
    dbt_replay_concurrency c;
    int64_t span;
    cr_assert(dbt_replay_observed(NULL, 0, &c, &span));
    cr_expect_eq(c.peak, 0);
}

/* The concurrency over time, in buckets of 100 ms: A holds 0-150 ms (weight 2), B 50-250 ms, C
 * a moment at 260 ms. Bucket 0: 2 units for 50 ms, 3 for 50: mean 2.5, peak 3. Bucket 1: 3 for
 * 50 ms, 1 for 50: mean 2, peak 3. Bucket 2 (200-300 ms, the last, as long as what is left:
 * 200-270): 1 for 50 ms, 0 for 10, 1 for 10: mean 60/70, peak 1. */
Test(replay, the_timeline_has_each_buckets_mean_and_peak)
{
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = 150 * MS, .weight = 2, .conn = 1},
                           {.arrival_us = 50 * MS, .hold_us = 200 * MS, .weight = 1, .conn = 2},
                           {.arrival_us = 260 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 3}};
    dbt_replay_bucket *b;
    size_t nb;
    cr_assert(dbt_replay_timeline(h, 3, 100 * MS, &b, &nb));
    cr_assert_eq(nb, 3, "%zu buckets", nb);
    cr_expect_eq(b[0].start_us, 0);
    cr_expect_eq(b[2].start_us, 200 * MS);
    cr_expect_float_eq(b[0].mean, 2.5, 1e-9, "bucket 0's mean %f", b[0].mean);
    cr_expect_eq(b[0].peak, 3);
    cr_expect_float_eq(b[1].mean, 2.0, 1e-9, "bucket 1's mean %f", b[1].mean);
    cr_expect_eq(b[1].peak, 3, "a level carried into a bucket is its peak too (%d)", b[1].peak);
    cr_expect_float_eq(b[2].mean, 60.0 / 70.0, 1e-9, "bucket 2's mean %f", b[2].mean);
    cr_expect_eq(b[2].peak, 1);
    free(b);
    cr_assert(dbt_replay_timeline(h, 0, 100 * MS, &b, &nb));
    cr_expect_eq(nb, 0);
    cr_expect_null(b);
}

/* A span of whole periods has no empty period after it: 0-200 ms in periods of 100 ms is two,
 * each at 1 unit the whole time. */
Test(replay, a_span_of_whole_periods_has_no_empty_one_after)
{
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = 200 * MS, .weight = 1, .conn = 1}};
    dbt_replay_bucket *b;
    size_t nb;
    cr_assert(dbt_replay_timeline(h, 1, 100 * MS, &b, &nb));
    cr_assert_eq(nb, 2, "%zu periods", nb);
    cr_expect_float_eq(b[1].mean, 1.0, 1e-9, "the last period's mean %f", b[1].mean);
    cr_expect_eq(b[1].peak, 1);
    free(b);
}

/* ---- classes (docs/design.md, "Classes and weights"; _common.lua's K.choose) ---------------- */

static dbt_replay_result run_classes(const dbt_replay_hold *h, size_t n, int limit,
                                     int64_t timeout_us, const dbt_replay_class *v, int nv,
                                     int64_t aging_us)
{
    dbt_replay_classes cl = {.v = v, .n = nv, .aging_us = aging_us};
    dbt_replay_result r;
    cr_assert(dbt_replay(h, n, limit, timeout_us, &cl, &r));
    return r;
}

/* A class under its guarantee goes first: at a limit of 2 (a guarantee of 1 each), class 1 holds
 * both units (it borrowed one) until 100 and 150 ms; class 1's third asks at 10 ms, class 0's
 * one at 20 ms, each to hold 100 ms. The unit back at 100 ms goes to class 0, under its
 * guarantee; class 1's waiter gets the one back at 150 ms. As one queue, the other way round. */
Test(replay, a_class_under_its_guarantee_goes_first)
{
    dbt_replay_class v[] = {{.share = 50, .priority = 1, .wait_us = -1, .cap = -1},
                            {.share = 50, .priority = 1, .wait_us = -1, .cap = -1}};
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1, .klass = 1},
        {.arrival_us = 0, .hold_us = 150 * MS, .weight = 1, .conn = 2, .klass = 1},
        {.arrival_us = 10 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 3, .klass = 1},
        {.arrival_us = 20 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 4, .klass = 0},
    };
    dbt_replay_result r = run_classes(h, 4, 2, -1, v, 2, 0);
    cr_assert_eq(r.nclasses, 2);
    cr_expect_eq(r.klass[0].commands, 1);
    cr_expect_eq(r.klass[0].wait_max_us, 80 * MS, "class 0 waited %lld us",
                 (long long)r.klass[0].wait_max_us);
    cr_expect_eq(r.klass[1].commands, 3);
    cr_expect_eq(r.klass[1].waited, 1);
    cr_expect_eq(r.klass[1].wait_max_us, 140 * MS);
    cr_expect_eq(r.wait_max_us, 140 * MS);
    r = run(h, 4, 2, -1);
    cr_expect_eq(r.nclasses, 0);
    cr_expect_eq(r.wait_max_us, 130 * MS, "as one queue, class 0's waits for the second unit");
}

/* Classes at or over their guarantee (share 0) borrow by priority, then in arrival order; and
 * once the oldest waiter has waited the aging bound, it is served first whatever its class. Two
 * units held until 100 and 200 ms; class 0's waiter asks at 10 ms, class 1's at 20 ms. */
Test(replay, borrowers_by_priority_until_the_aging_bound)
{
    dbt_replay_class v[] = {{.share = 0, .priority = 1, .wait_us = -1, .cap = -1},
                            {.share = 0, .priority = 5, .wait_us = -1, .cap = -1}};
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1, .klass = 0},
        {.arrival_us = 0, .hold_us = 200 * MS, .weight = 1, .conn = 2, .klass = 0},
        {.arrival_us = 10 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 3, .klass = 0},
        {.arrival_us = 20 * MS, .hold_us = 100 * MS, .weight = 1, .conn = 4, .klass = 1},
    };
    dbt_replay_result r = run_classes(h, 4, 2, -1, v, 2, 0);
    cr_expect_eq(r.klass[1].wait_max_us, 80 * MS, "priority 5 first: %lld us",
                 (long long)r.klass[1].wait_max_us);
    cr_expect_eq(r.klass[0].wait_max_us, 190 * MS);
    r = run_classes(h, 4, 2, -1, v, 2, 50 * MS);
    cr_expect_eq(r.klass[0].wait_max_us, 90 * MS, "aged at 60 ms: served at 100 ms (%lld us)",
                 (long long)r.klass[0].wait_max_us);
    cr_expect_eq(r.klass[1].wait_max_us, 180 * MS);
}

/* A class's queue cap refuses a newcomer at once (a cap of 0: it never queues); a class's wait
 * timeout replaces the run's. One unit held 0-100 ms. */
Test(replay, a_class_cap_refuses_at_once_and_its_timeout_is_its_own)
{
    dbt_replay_class v[] = {{.share = 0, .priority = 0, .wait_us = -1, .cap = 1},
                            {.share = 0, .priority = 0, .wait_us = 30 * MS, .cap = 0},
                            {.share = 0, .priority = 0, .wait_us = 30 * MS, .cap = -1}};
    dbt_replay_hold h[] = {
        {.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1, .klass = 2},
        {.arrival_us = 10 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 2, .klass = 0},
        {.arrival_us = 20 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 3, .klass = 0},
        {.arrival_us = 30 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 4, .klass = 1},
        {.arrival_us = 40 * MS, .hold_us = 10 * MS, .weight = 1, .conn = 5, .klass = 2},
    };
    dbt_replay_result r = run_classes(h, 5, 1, -1, v, 3, 0);
    cr_expect_eq(r.klass[0].refused, 1, "the second of class 0 is past its cap of 1");
    cr_expect_eq(r.klass[0].capped, 1);
    cr_expect_eq(r.klass[0].wait_max_us, 90 * MS, "the first queued until 100 ms");
    cr_expect_eq(r.klass[1].capped, 1, "a cap of 0 never queues");
    cr_expect_eq(r.klass[1].wait_max_us, 0);
    cr_expect_eq(r.klass[2].refused, 1, "class 2's 30 ms timeout, with no run's timeout");
    cr_expect_eq(r.klass[2].capped, 0);
    cr_expect_eq(r.klass[2].wait_max_us, 30 * MS);
    cr_expect_eq(r.refused, 3);
}

/* A hold naming a class the run does not have is an error, not a guess. */
Test(replay, a_class_out_of_range_is_refused)
{
    dbt_replay_class v[] = {{.share = 100, .priority = 0, .wait_us = -1, .cap = -1}};
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = MS, .weight = 1, .conn = 1, .klass = 1}};
    dbt_replay_classes cl = {.v = v, .n = 1};
    dbt_replay_result r;
    cr_expect_not(dbt_replay(h, 1, 1, -1, &cl, &r));
    h[0].klass = 0;
    cr_expect(dbt_replay(h, 1, 1, -1, &cl, &r));
}

/* A limit over time (an adaptive controller's): 1, then 2 at 40 ms, then 1 again at 70 ms. A
 * holds 0-100 ms; B asks at 10 and C at 20, each for 50 ms. The rise grants B at once (waited
 * 30 ms); the fall lets B run on; at B's end (90) one unit is in use, the limit's, so C waits for
 * A's end (100): 80 ms. */
Test(replay, a_limit_over_time_grants_on_a_rise_and_lets_a_fall_drain)
{
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = 100 * MS, .weight = 1, .conn = 1},
                           {.arrival_us = 10 * MS, .hold_us = 50 * MS, .weight = 1, .conn = 2},
                           {.arrival_us = 20 * MS, .hold_us = 50 * MS, .weight = 1, .conn = 3}};
    dbt_replay_limit s[] = {{.from_us = 0, .limit = 1},
                            {.from_us = 40 * MS, .limit = 2},
                            {.from_us = 70 * MS, .limit = 1}};
    dbt_replay_result r;
    cr_assert(dbt_replay_scheduled(h, 3, s, 3, -1, NULL, &r));
    cr_expect_eq(r.limit, 1);
    cr_expect_eq(r.waited, 2);
    cr_expect_eq(r.wait_max_us, 80 * MS, "C waits for A (%lld us)", (long long)r.wait_max_us);
    cr_expect_eq(r.wait_p50_us, 30 * MS, "B granted at the rise (%lld us)",
                 (long long)r.wait_p50_us);
    cr_expect_eq(r.server.peak, 2);
    cr_expect_eq(r.span_us, 150 * MS);
    /* out of order, or empty: refused */
    dbt_replay_limit bad[] = {{.from_us = 50, .limit = 1}, {.from_us = 40, .limit = 2}};
    cr_expect_not(dbt_replay_scheduled(h, 3, bad, 2, -1, NULL, &r));
    cr_expect_not(dbt_replay_scheduled(h, 3, s, 0, -1, NULL, &r));
}

/* A command holds the units it was granted, whatever the limit becomes: A of weight 3 granted at
 * a limit of 2 holds 2; at 10 ms the limit is 4. After A's end (100) C of weight 3 runs from
 * 110; D of weight 2 asks at 111 and must wait for C's end (160): 49 ms. Counted at its end by
 * the limit then (3 units), A would have left the count at -1 and D would have run at once. */
Test(replay, a_command_gives_back_the_units_it_was_granted)
{
    dbt_replay_hold h[] = {{.arrival_us = 0, .hold_us = 100 * MS, .weight = 3, .conn = 1},
                           {.arrival_us = 110 * MS, .hold_us = 50 * MS, .weight = 3, .conn = 3},
                           {.arrival_us = 111 * MS, .hold_us = 10 * MS, .weight = 2, .conn = 4}};
    dbt_replay_limit s[] = {{.from_us = 0, .limit = 2}, {.from_us = 10 * MS, .limit = 4}};
    dbt_replay_result r;
    cr_assert(dbt_replay_scheduled(h, 3, s, 2, -1, NULL, &r));
    cr_expect_eq(r.waited, 1);
    cr_expect_eq(r.wait_max_us, 49 * MS, "D waits for C (%lld us)", (long long)r.wait_max_us);
}
