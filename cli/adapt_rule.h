/* adapt_rule.h - the adaptive limit's decision (dbthrottle adapt): a pure function of the samples
 * it is fed, so that recorded samples test it (tests/unit/test_adapt_rule.c). No I/O, no clock.
 * The rule and why: docs/design.md, "An adaptive limit". */
#ifndef DBT_ADAPT_RULE_H
#define DBT_ADAPT_RULE_H

/* The controller's settings. */
typedef struct {
    int min, max;    /* the limit stays within [min, max] */
    double cores;    /* the database server's cores (<= 0: unknown, the CPU signal is not used) */
    double window_s; /* the least time between two changes, and the span each decision sees */
    double
        hold_rise; /* a rise of the mean hold above its baseline that means overload (0.2: 20%) */
    double lock_share; /* the share of active statements waiting on locks that means overload */
    double lag_max_s;  /* a replica's replay lag that means overload (< 0: not used) */
} dbt_adapt_params;

/* One sample, over the dt_s seconds before t_s. Unknown values are negative. */
typedef struct {
    double t_s, dt_s;
    int limit;           /* the limit in force (logged; the rule reasons about its own) */
    double held;         /* units held */
    int waiters;         /* callers queued */
    double xacts_per_s;  /* PostgreSQL's commits and rollbacks per second */
    double grants_per_s; /* the pool's grants per second */
    double hold_ms;      /* the mean hold of the permits given back in the interval (0: none) */
    double wait_ms;      /* the mean wait of the grants made in the interval */
    int active;          /* client backends running a statement */
    int cpu_active;      /* of those, waiting on nothing (on a CPU, or ready to run) */
    int lock_waiting;    /* waiting on Lock or LWLock */
    int io_waiting;      /* waiting on IO */
    double repl_lag_s;   /* the greatest replay lag of a replica */
    long long timeouts;  /* waits that timed out or were refused in the interval */
} dbt_adapt_sample;

/* The samples of the window being gathered: sums of the known values and their counts (an
 * unknown value is left out, never counted as zero). */
typedef struct {
    int nsamples;
    double start_s;                 /* when the window began (the first sample's start) */
    double held_sum;                /* over held_n samples */
    int held_n;                     /* samples that knew the units held */
    int waiters_n, waiting_samples; /* samples that knew the waiters; of those, with some */
    double waiters_sum;
    double xacts_sum, xacts_s;   /* xacts_per_s x dt summed, and the seconds that knew it */
    double grants_sum, grants_s; /* the same for grants */
    double hold_sum, hold_w;     /* hold_ms weighted by the permits given back (or dt) */
    double cpu_sum, cpu_sq_sum;  /* cpu_active and its square, over cpu_n samples */
    int cpu_n;
    double active_sum, lock_sum; /* over the samples that knew both */
    double lag_sum;              /* over lag_n samples */
    int lag_n;
    long long timeouts; /* over the samples that knew them */
} dbt_adapt_window;

/* What the rule remembers between samples: a plain struct, no allocation. */
typedef struct {
    int limit;
    double last_change_s; /* < 0: none yet */
    /* The baseline: the reference window the holds are compared with (base_hold_ms <= 0: none
     * yet). Made only of completed holds, never of timed-out waits. */
    double base_hold_ms, base_xacts_per_s;
    double base_grants_per_s; /* the reference window's grants per second (< 0: unknown) */
    double base_held;         /* its concurrency: the units it held */
    int over_limit;           /* the last limit found overloaded, not yet reached again (0: none) */
    int good_limit; /* the limit a raise left, judged free of overload (0: none); a decrease right
                       after that raise goes no deeper than it */
    /* The reference: the window that ended with the last change (at the limit before it): its
     * concurrency, and its throughput by either source (< 0: unknown). Whether the change paid
     * is judged against it. */
    double ref_conc, ref_xacts_per_s, ref_grants_per_s;
    /* The cpu_active samples of the last windows at this limit (a ring, emptied by a change):
     * sums, sums of squares and counts, pooled with the window being judged so that a modest
     * excess over the cores, too noisy for one window's samples, shows in more of them. */
    struct {
        int n;
        double sum, sq_sum;
    } cpu_past[2];
    int cpu_past_len, cpu_past_next;
    double last_t_s; /* the last sample's time (< 0: none yet) */
    int nsamples;    /* samples seen since init */
    dbt_adapt_window win;
} dbt_adapt_state;

typedef struct {
    int limit;
    int change; /* -1 lower, 0 kept, +1 higher */
    char reason[200];
} dbt_adapt_decision;

void dbt_adapt_params_default(dbt_adapt_params *p);
void dbt_adapt_init(dbt_adapt_state *s, const dbt_adapt_params *p, int start_limit);
dbt_adapt_decision dbt_adapt_step(dbt_adapt_state *s, const dbt_adapt_params *p,
                                  const dbt_adapt_sample *x);

#endif
