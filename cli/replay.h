/* replay.h - dbthrottle report's replay (docs/design.md, "The command sample"): a pool's sampled
 * holds run again through the admission rule at a candidate limit. Pure: no I/O, no clock, so
 * that tests/unit/test_replay.c drives it with holds made by hand. */
#ifndef DBT_REPLAY_H
#define DBT_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One sampled hold: when it asked (us, Redis' clock), how long it waited for its grant and how
 * long it held (us), its weight, and its connection (an index the caller gives each distinct
 * "<cid> <conn>": the replay runs each connection's holds in order). */
typedef struct {
    int64_t arrival_us, wait_us, hold_us;
    int weight;
    int conn;
} dbt_replay_hold;

/* The concurrency the server saw (or would see), in units (a command of weight w counts w; with
 * no weights, the commands running), time-weighted over the span. A unit is taken from a
 * command's grant (its arrival, in the sample) for its wait (the acquire's round trip) and its
 * hold. */
typedef struct {
    double mean;
    int p50, p99, peak;    /* time-weighted percentiles: the share of time at or below */
    double at_limit_share; /* replay: the share of the span with every unit in use */
} dbt_replay_concurrency;

/* What a limit would have done. Waits are the time added by the limit (us), over every command. */
typedef struct {
    int limit;
    long long commands, waited, refused;
    int64_t wait_p50_us, wait_p99_us, wait_max_us;
    double wait_mean_us;
    dbt_replay_concurrency server;
    int64_t span_us; /* from the first arrival to the last end, as replayed */
} dbt_replay_result;

/* Runs holds[0..n) at limit (>= 1) with the wait timeout (us; < 0: none), first come first
 * served with no barging: a command is granted when it is at the head of the queue and its
 * weight fits (a weight above the limit is cut to it, as the library does: it runs alone); it is
 * refused when it has waited the timeout. Each connection asks its next command after its previous
 * one ended (or was refused) plus the pause it had between them as sampled. holds need not be
 * sorted. False when out of memory. */
bool dbt_replay(const dbt_replay_hold *holds, size_t n, int limit, int64_t wait_timeout_us,
                dbt_replay_result *out);

/* The concurrency the sample itself shows, as the replay counts it. False when out of memory. */
bool dbt_replay_observed(const dbt_replay_hold *holds, size_t n, dbt_replay_concurrency *out,
                         int64_t *span_us);

#endif
