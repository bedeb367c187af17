/* sample_clock.h - where dbthrottle report places a sample's holds on Redis' clock
 * (docs/design.md, "The command sample", "One clock for the holds"). Pure: no I/O, no clock, so
 * that tests/unit/test_sample_clock.c drives it with chunks made by hand.
 *
 * A hold's arrival is its member's call time by Redis' clock less its age when its process built
 * the chunk; so it is late by the delay from building to Redis running the call, which varies
 * from call to call (Redis busy, the network, a thread descheduled) by more than a handover
 * between two processes takes. The members say the clock they were built on (the process'
 * monotonic clock, and which kernel's: processes of one kernel share it), so each member is moved
 * earlier by how much later it was than the least late member on its clock around it: the holds
 * of every process of a host then stand on Redis' clock by one delay, their host's least, and a
 * permit passed from one to the other never seems to be held by both. */
#ifndef DBT_SAMPLE_CLOCK_H
#define DBT_SAMPLE_CLOCK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One member of the sample, as read. */
typedef struct {
    uint64_t proc;     /* its process (any value that tells processes apart) */
    uint64_t clock;    /* its kernel's (a hash of its boot id); 0 when it does not say */
    int64_t called_us; /* its call's time, Redis' clock */
    int64_t built_us;  /* the process' monotonic clock as it built the chunk; < 0 does not say */
} dbt_sample_chunk;

/* How far around a member the least delay is looked for (us): a busy process sends a chunk a
 * second at least, and two clocks disciplined by NTP drift apart by a few microseconds over it
 * (500 at the most the kernel slews). */
#define DBT_CLOCK_WINDOW_US INT64_C(10000000)

/* Processes of one kernel whose least delays differ by more than this (us) are taken to be on
 * different clocks (a time namespace offsets CLOCK_MONOTONIC): each is then placed by its own. */
#define DBT_CLOCK_SPLIT_US INT64_C(1000000)

/* late[i] receives how much later chunk i stands than the least late member on its clock within
 * DBT_CLOCK_WINDOW_US (>= 0; 0 for a member that does not say its clock): its holds' arrivals
 * are that much early. False when out of memory (late then all 0). */
bool dbt_sample_clock_place(const dbt_sample_chunk *chunks, size_t n, int64_t *late);

#endif
