/* adapt_rule.h - the adaptive limit's decision (dbthrottle adapt): a pure function of the samples
 * it is fed, so that recorded samples test it (tests/unit/test_adapt_rule.c). No I/O, no clock. */
#ifndef DBT_ADAPT_RULE_H
#define DBT_ADAPT_RULE_H

/* The controller's settings. */
typedef struct {
    int min, max;    /* the limit stays within [min, max] */
    double cores;    /* the database server's cores */
    double window_s; /* the least time between two changes */
    double
        hold_rise; /* a rise of the mean hold above its baseline that means overload (0.2: 20%) */
    double lock_share; /* the share of active statements waiting on locks that means overload */
    double lag_max_s;  /* a replica's replay lag that means overload (< 0: not used) */
} dbt_adapt_params;

/* One sample, over the dt_s seconds before t_s. Unknown values are negative. */
typedef struct {
    double t_s, dt_s;
    int limit;           /* the limit in force */
    double held;         /* units held */
    int waiters;         /* callers queued */
    double xacts_per_s;  /* PostgreSQL's commits and rollbacks per second */
    double grants_per_s; /* the pool's grants per second */
    double hold_ms;      /* the mean hold of the permits given back in the interval */
    double wait_ms;      /* the mean wait of the grants made in the interval */
    int active;          /* client backends running a statement */
    int cpu_active;      /* of those, waiting on nothing (on a CPU, or ready to run) */
    int lock_waiting;    /* waiting on Lock or LWLock */
    int io_waiting;      /* waiting on IO */
    double repl_lag_s;   /* the greatest replay lag of a replica */
    long long timeouts;  /* waits that timed out or were refused in the interval */
} dbt_adapt_sample;

/* What the rule remembers between samples: a plain struct, no allocation. */
typedef struct {
    int limit;
    double last_change_s;
    double base_hold_ms, base_xacts_per_s;
    int nsamples;
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
