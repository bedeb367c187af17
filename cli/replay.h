/* replay.h - dbthrottle report's replay (docs/design.md, "The command sample"): a pool's sampled
 * holds run again through the admission rule at a candidate limit. Pure: no I/O, no clock, so
 * that tests/unit/test_replay.c drives it with holds made by hand. */
#ifndef DBT_REPLAY_H
#define DBT_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* One sampled hold: when it asked (us, Redis' clock), how long it waited in a queue when it was
 * sampled enforced (queued_us: neither holding nor pausing; the replay puts its own wait in its
 * place), how long its acquire's round trips took (wait_us: a unit is held meanwhile, as the
 * grant is Redis' before its reply arrives) and how long it held (us), its weight, and its
 * connection (an index the caller gives each distinct "<cid> <conn>": the replay runs each
 * connection's holds in order). */
typedef struct {
    int64_t arrival_us, queued_us, wait_us, hold_us;
    int weight;
    int conn;
    int klass; /* its class: an index into the run's classes (ignored without classes) */
} dbt_replay_hold;

/* The most classes a run serves: a pool's DBT_MAX_CLASSES (16) and the implicit default one. */
#define DBT_REPLAY_MAX_CLASSES 17

/* One class of the pool's definitions (docs/design.md, "Classes and weights"). */
typedef struct {
    int share;       /* percent of the limit guaranteed: floor(limit * share / 100), at least 1
                      * when not 0 */
    int priority;    /* larger borrows first */
    int64_t wait_us; /* its wait timeout, replacing the run's; < 0: the run's */
    long long cap;   /* the most waiters it queues, a newcomer past them refused at once; < 0:
                      * none (0: it never queues) */
} dbt_replay_class;

/* The classes a run serves its holds by (each hold's klass an index into v), and the aging bound
 * (us; <= 0: none): the oldest waiter is served first once it has waited that long. */
typedef struct {
    const dbt_replay_class *v;
    int n;
    int64_t aging_us;
} dbt_replay_classes;

/* What a limit would have done to one class's commands. */
typedef struct {
    long long commands, waited, refused, capped; /* capped: refused at once, its queue full */
    int64_t wait_p50_us, wait_p99_us, wait_max_us;
    double wait_mean_us;
} dbt_replay_class_result;

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
    int nclasses;    /* with classes: each one's share of the above, as the run's classes */
    dbt_replay_class_result klass[DBT_REPLAY_MAX_CLASSES];
} dbt_replay_result;

/* Runs holds[0..n) at limit (>= 1) with the wait timeout (us; < 0: none), as acquire.lua admits
 * them. Without classes (NULL, or none), first come first served with no barging: a command is
 * granted when it is at the head of the queue and its weight fits (a weight above the limit is
 * cut to it, as the library does: it runs alone). With classes, the one chosen is the oldest
 * waiter once it has waited the aging bound, else the one that minimises (tier, -priority,
 * arrival), tier 0 when its class holds fewer units than its guarantee; it is granted when its
 * weight fits, and while it does not, nobody is (the head blocks). A newcomer queues unless chosen
 * and fitting, or is refused at once when its class has cap waiters. A waiter is refused when it
 * has waited its class's timeout, else the run's. Each connection asks its next command after its
 * previous one ended (or was refused) plus the pause it had between them as sampled. holds need
 * not be sorted. False when out of memory, or a hold names a class classes lacks. */
bool dbt_replay(const dbt_replay_hold *holds, size_t n, int limit, int64_t wait_timeout_us,
                const dbt_replay_classes *classes, dbt_replay_result *out);

/* A limit over time: from from_us (the replay's clock: the holds' arrivals) on, limit (>= 1). The
 * first one's applies from the start, whatever its from_us. */
typedef struct {
    int64_t from_us;
    int limit;
} dbt_replay_limit;

/* dbt_replay with the limit changing over time, as an adaptive controller changes it
 * (schedule[0..n), from_us not decreasing): a higher limit grants the waiters that now fit at
 * once, a lower one lets the commands running end (nobody is granted until the units in use are
 * below it); a command holds the units it was granted. out->limit is the first limit. False when
 * out of memory, or as dbt_replay, or the schedule is empty or out of order. */
bool dbt_replay_scheduled(const dbt_replay_hold *holds, size_t n, const dbt_replay_limit *schedule,
                          size_t nschedule, int64_t wait_timeout_us,
                          const dbt_replay_classes *classes, dbt_replay_result *out);

/* The concurrency the sample itself shows, as the replay counts it. False when out of memory. */
bool dbt_replay_observed(const dbt_replay_hold *holds, size_t n, dbt_replay_concurrency *out,
                         int64_t *span_us);

/* The observed concurrency over time, as dbt_replay_observed counts it, in buckets of bucket_us
 * from the sample's first arrival to its last end (the last bucket as long as what is left of
 * it): each one's time-weighted mean and its peak. *out is malloc()ed (free it); none when n is
 * 0. False when out of memory. */
typedef struct {
    int64_t start_us;
    double units_us; /* units in use times their time within the bucket */
    double mean;
    int peak;
} dbt_replay_bucket;
bool dbt_replay_timeline(const dbt_replay_hold *holds, size_t n, int64_t bucket_us,
                         dbt_replay_bucket **out, size_t *nbuckets);

#endif
