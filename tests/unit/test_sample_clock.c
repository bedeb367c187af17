/* Where dbthrottle report places a sample's members on Redis' clock (cli/sample_clock.c):
 * members made by hand, their delays known, and how late each was found to be, worked out here
 * from the rule (the least offset of its clock within the window around it). */
#include "sample_clock.h"

#include <criterion/criterion.h>

#define MS INT64_C(1000)
#define S  INT64_C(1000000)

/* A member of proc on clock, built at `built` on its clock (whose offset to Redis' is `offset`)
 * and run by Redis `delay` later. */
static dbt_sample_chunk member(uint64_t proc, uint64_t clock, int64_t offset, int64_t built,
                               int64_t delay)
{
    return (dbt_sample_chunk){
        .proc = proc, .clock = clock, .called_us = built + offset + delay, .built_us = built};
}

/* Two processes of one kernel: each member is as late as its delay beyond the least delay of
 * either process, so a permit one passed to the other stands in the order it went. */
Test(sample_clock, processes_of_one_kernel_share_the_least_delay)
{
    int64_t off = 1700000000 * S;
    dbt_sample_chunk c[] = {member(1, 77, off, 10 * S, 100), member(1, 77, off, 11 * S, 900),
                            member(2, 77, off, 10 * S + 5 * MS, 150),
                            member(2, 77, off, 11 * S + 5 * MS, 120)};
    int64_t late[4];
    cr_assert(dbt_sample_clock_place(c, 4, late));
    cr_expect_eq(late[0], 0);
    cr_expect_eq(late[1], 800);
    cr_expect_eq(late[2], 50);
    cr_expect_eq(late[3], 20);
}

/* Another kernel's clock, a process that does not say its kernel, and one whose member does not
 * say its clock at all: each is placed by its own least delay only (or not at all). */
Test(sample_clock, other_clocks_are_placed_by_their_own)
{
    int64_t a = 1700000000 * S, b = 1700000123 * S + 456;
    dbt_sample_chunk c[] = {member(1, 77, a, 10 * S, 100), member(2, 88, b, 50 * S, 700),
                            member(2, 88, b, 51 * S, 400), member(3, 0, a, 10 * S, 300),
                            member(3, 0, a, 11 * S, 350),  member(4, 77, a, 10 * S, 200)};
    c[5].built_us = -1;
    int64_t late[6];
    cr_assert(dbt_sample_clock_place(c, 6, late));
    cr_expect_eq(late[0], 0);
    cr_expect_eq(late[1], 300, "kernel 88's least is its own 400 (%lld)", (long long)late[1]);
    cr_expect_eq(late[2], 0);
    cr_expect_eq(late[3], 0, "no kernel said: its own least (%lld)", (long long)late[3]);
    cr_expect_eq(late[4], 50);
    cr_expect_eq(late[5], 0, "a member that does not say is left as it is");
}

/* One kernel, but two clocks (a time namespace offsets CLOCK_MONOTONIC by a minute): the two
 * processes' least offsets part by more than DBT_CLOCK_SPLIT_US, so each keeps its own. */
Test(sample_clock, a_time_namespace_is_another_clock)
{
    int64_t off = 1700000000 * S;
    dbt_sample_chunk c[] = {member(1, 77, off, 10 * S, 100), member(1, 77, off, 11 * S, 600),
                            member(2, 77, off - 60 * S, 70 * S, 300),
                            member(2, 77, off - 60 * S, 71 * S, 500)};
    int64_t late[4];
    cr_assert(dbt_sample_clock_place(c, 4, late));
    cr_expect_eq(late[1], 500);
    cr_expect_eq(late[2], 0, "its own least, not the other clock's (%lld)", (long long)late[2]);
    cr_expect_eq(late[3], 200);
}

/* The least delay is looked for within DBT_CLOCK_WINDOW_US around each member (clocks drift):
 * a quick member 20 s before counts for the members near it only. */
Test(sample_clock, the_least_delay_is_that_of_the_window)
{
    int64_t off = 1700000000 * S;
    dbt_sample_chunk c[] = {member(1, 77, off, 10 * S, 50), member(1, 77, off, 12 * S, 400),
                            member(1, 77, off, 30 * S, 300), member(1, 77, off, 31 * S, 350)};
    int64_t late[4];
    cr_assert(dbt_sample_clock_place(c, 4, late));
    cr_expect_eq(late[1], 350);
    cr_expect_eq(late[2], 0, "the quick one 20 s before is out of the window (%lld)",
                 (long long)late[2]);
    cr_expect_eq(late[3], 50);
}

Test(sample_clock, nothing_to_place)
{
    int64_t late[1] = {7};
    cr_assert(dbt_sample_clock_place(NULL, 0, late));
    cr_expect_eq(late[0], 7, "nothing written");
}
