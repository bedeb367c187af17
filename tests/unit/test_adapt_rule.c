/* The adaptive limit's rule (cli/adapt_rule.c), fed closed-loop simulations of a database with a
 * knee (a small model: throughput = min(L, knee) x rate, holds grow past the knee) and
 * hand-written sample sequences (tests/unit/adapt_samples/ *.csv). Every run checks that no two
 * changes come within a window. */
#include "adapt_rule.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SIM_MAX_S 1200

/* The model of a database and its clients. */
typedef struct {
    double cores;
    double cpu_frac; /* share of a statement's time on a CPU: the knee is cores / cpu_frac */
    double cost_ms;  /* a statement's hold when it runs alone */
    int clients;     /* callers that want a permit at every moment */
    int hot_row;     /* every statement updates one row: one at a time, the rest wait on it */
    int hot_rows;    /* > 1: transactions update one of this many rows (the bench's "hot") */
    double sleep_ms; /* > 0: a statement sleeps this long off the CPU, then works cpu_ms on one */
    double cpu_ms;
    double noise;   /* relative noise of holds and throughput (0: exact) */
    int random_cpu; /* cpu_active drawn per sample (each active statement on a CPU or not) */
    long long timeouts_per_s;
    unsigned rng;
    double cpu_carry;
} model;

static double uniform(model *m) /* in [0, 1), xorshift32: the same sequence on every machine */
{
    m->rng ^= m->rng << 13;
    m->rng ^= m->rng >> 17;
    m->rng ^= m->rng << 5;
    return (m->rng >> 8) / 16777216.0;
}

static double jitter(model *m)
{
    return 1 + m->noise * (2 * uniform(m) - 1);
}

/* One second's sample of the model: n permits held (of limit), thr transactions a second, a
 * hold of hold_ms, and what the held are doing; throughput and hold get the model's noise (in
 * that order: the random sequence is the model's). */
static dbt_adapt_sample sample_of(model *m, int limit, double t_s, int n, double thr, double hold,
                                  int active, int cpu, int locks, int io)
{
    double xacts = thr * jitter(m), hold_ms = hold * jitter(m);
    return (dbt_adapt_sample){.t_s = t_s,
                              .dt_s = 1,
                              .limit = limit,
                              .held = n,
                              .waiters = m->clients - n,
                              .xacts_per_s = xacts,
                              .grants_per_s = thr,
                              .hold_ms = hold_ms,
                              .wait_ms = 0,
                              .active = active,
                              .cpu_active = cpu,
                              .lock_waiting = locks,
                              .io_waiting = io,
                              .repl_lag_s = -1,
                              .timeouts = m->timeouts_per_s};
}

static dbt_adapt_sample model_sample(model *m, int limit, double t_s)
{
    int n = limit < m->clients ? limit : m->clients;
    double knee = m->cores / m->cpu_frac;
    double thr, hold;
    int cpu, locks;
    if (m->hot_rows > 1) {
        /* Measured on the bench (4 rows, each update holds its lock 3 ms): throughput rises
         * with the concurrency like n / (n + 1.8), ever more slowly, up to about 12, and falls
         * slowly past it (the waiters' own cost); 885/s x 0.87 = 769/s at 12, 0.85 of that at 5,
         * 0.72 at 3. A transaction's time n / thr is 3 ms holding the lock, 2 ms outside any
         * statement (BEGIN, COMMIT, the round trips) and the rest waiting on the lock. */
        double peak = 885.0 * m->hot_rows / 4;
        thr = n > 0 ? peak * n / (n + 1.8) * (n > 12 ? 1 - 0.02 * (n - 12) : 1) : 0;
        hold = n > 0 ? n * 1000 / thr : 0;
        double outside = thr * 0.002, holding = thr * 0.003;
        locks = (int)(n - outside - holding + 0.5);
        if (locks < 0)
            locks = 0;
        m->cpu_carry += thr * 0.0003; /* the UPDATE itself; pg_sleep waits on a timeout */
        cpu = (int)m->cpu_carry;
        m->cpu_carry -= cpu;
        int active = (int)(n - outside + 0.5);
        return sample_of(m, limit, t_s, n, thr, hold, active, cpu, locks, 0);
    }
    if (m->sleep_ms > 0) {
        /* The bench's "mixed": a sleep off the CPU, then cpu_ms on one. Throughput is what the
         * sleeps let through, or what the cores do, whichever is less (a closed system's two
         * bounds); the rest of each statement's time is a queue for the CPUs. cpu_active is
         * drawn per sample: each statement is in its CPU part (running or queued) or not. */
        double alone = n * 1000 / (m->sleep_ms + m->cpu_ms), cores = m->cores * 1000 / m->cpu_ms;
        thr = n > 0 ? (alone < cores ? alone : cores) : 0;
        hold = n > 0 ? n * 1000 / thr : 0;
        double on_cpu = n > 0 ? (hold - m->sleep_ms) / hold : 0;
        cpu = 0;
        for (int i = 0; i < n; i++)
            cpu += uniform(m) < on_cpu;
        locks = 0;
        return sample_of(m, limit, t_s, n, thr, hold, n, cpu, 0, 0);
    }
    if (m->hot_row) {
        thr = 1000 / m->cost_ms; /* one update at a time, whatever the concurrency */
        hold = n * m->cost_ms;
        cpu = n > 0;
        locks = n > 0 ? n - 1 : 0;
    } else {
        thr = (n < knee ? n : knee) * 1000 / m->cost_ms;
        hold = m->cost_ms * (n > knee ? n / knee : 1);
        cpu = 0;
        if (m->random_cpu)
            for (int i = 0; i < n; i++)
                cpu += uniform(m) < m->cpu_frac;
        else { /* the mean n x cpu_frac, spread over the samples (error diffusion) */
            m->cpu_carry += n * m->cpu_frac;
            cpu = (int)m->cpu_carry;
            m->cpu_carry -= cpu;
        }
        locks = 0;
    }
    return sample_of(m, limit, t_s, n, thr, hold, n, cpu, locks, n - cpu - locks);
}

/* The limit over time, one entry a second. */
typedef struct {
    int limit[SIM_MAX_S + 1];
    double thr[SIM_MAX_S + 1];
    int t;
    int changes;
    double last_change_s;
} trace;

static void check_change(trace *tr, const dbt_adapt_params *p, const dbt_adapt_decision *d,
                         double t_s)
{
    if (d->change == 0)
        return;
    cr_assert(tr->changes == 0 || t_s - tr->last_change_s >= p->window_s - 1e-9,
              "two changes within a window: at %.1f s and %.1f s (%s)", tr->last_change_s, t_s,
              d->reason);
    cr_assert(d->limit >= p->min && d->limit <= p->max, "out of [%d, %d]: %d", p->min, p->max,
              d->limit);
    cr_assert(strchr(d->reason, '\n') == NULL, "reason not one line: %s", d->reason);
    tr->changes++;
    tr->last_change_s = t_s;
}

/* Runs the closed loop up to second `until`: each second the model answers the limit in force. */
static void simulate(model *m, dbt_adapt_state *s, const dbt_adapt_params *p, trace *tr, int until)
{
    for (; tr->t < until; tr->t++) {
        dbt_adapt_sample x = model_sample(m, s->limit, tr->t + 1);
        tr->limit[tr->t] = s->limit;
        tr->thr[tr->t] = x.grants_per_s;
        dbt_adapt_decision d = dbt_adapt_step(s, p, &x);
        check_change(tr, p, &d, x.t_s);
        cr_assert_eq(d.limit, s->limit);
    }
}

static void show(const trace *tr, int from, int to)
{
    char line[4096];
    size_t len = 0;
    for (int t = from; t < to && len + 8 < sizeof line; t += 5)
        len += (size_t)snprintf(line + len, sizeof line - len, " %d", tr->limit[t]);
    cr_log_info("limit every 5 s from %d s:%s", from, line);
}

/* Whether the limit stays within [lo, hi] from second `from` to `to`. */
static int within(const trace *tr, int from, int to, int lo, int hi)
{
    for (int t = from; t < to; t++)
        if (tr->limit[t] < lo || tr->limit[t] > hi) {
            cr_log_error("limit %d at %d s, outside [%d, %d]", tr->limit[t], t, lo, hi);
            show(tr, from > 60 ? from - 60 : 0, to);
            return 0;
        }
    return 1;
}

static int first_within(const trace *tr, int lo, int hi)
{
    for (int t = 0; t < tr->t; t++)
        if (tr->limit[t] >= lo && tr->limit[t] <= hi)
            return t;
    return -1;
}

static double mean_thr(const trace *tr, int from, int to)
{
    double sum = 0;
    for (int t = from; t < to; t++)
        sum += tr->thr[t];
    return sum / (to - from);
}

static dbt_adapt_params params(int min, int max, double cores)
{
    dbt_adapt_params p;
    dbt_adapt_params_default(&p);
    p.min = min;
    p.max = max;
    p.cores = cores;
    return p;
}

/* A knee at L = 4 on 2 cores: statements half on a CPU, 10 ms alone, 32 clients. */
static model knee4(double noise, unsigned seed)
{
    return (model){.cores = 2,
                   .cpu_frac = 0.5,
                   .cost_ms = 10,
                   .clients = 32,
                   .noise = noise,
                   .random_cpu = noise > 0,
                   .rng = seed};
}

static double mean_limit(const trace *tr, int from, int to)
{
    double sum = 0;
    for (int t = from; t < to; t++)
        sum += tr->limit[t];
    return sum / (to - from);
}

/* From `start`, the limit reaches [lo, hi] within a minute and stays there for 15 minutes, with
 * the knee's throughput. */
static void converges_to_knee(int start, double noise, unsigned seed, int lo, int hi)
{
    model m = knee4(noise, seed);
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, start);
    static trace tr;
    memset(&tr, 0, sizeof tr);
    simulate(&m, &s, &p, &tr, 900);
    int reached = first_within(&tr, lo, hi);
    cr_assert(reached >= 0 && reached <= 60, "from %d: the band [%d, %d] reached at %d s", start,
              lo, hi, reached);
    cr_assert(within(&tr, reached, 900, lo, hi), "from %d (noise %.2f, seed %u)", start, noise,
              seed);
    double mean = mean_limit(&tr, 60, 900);
    cr_expect(mean >= 3.5 && mean <= 5.5, "from %d (seed %u): mean limit %.2f", start, seed, mean);
    /* The knee's throughput is 400/s; below it the database idles, above it the holds grow. */
    double thr = mean_thr(&tr, 60, 900);
    cr_expect(thr >= 0.9 * 400, "from %d (seed %u): %.0f/s after settling, below 0.9 x the knee's",
              start, seed, thr);
}

Test(adapt_rule, knee_from_min_converges_and_stays_at_it)
{
    converges_to_knee(1, 0, 1, 4, 4);
}

Test(adapt_rule, knee_from_max_converges_and_stays_at_it)
{
    converges_to_knee(64, 0, 1, 4, 4);
}

/* Holds and throughput within 5%, cpu_active drawn per sample (each active statement on a CPU
 * with probability 0.5): the band widens by one below and three above. */
Test(adapt_rule, knee_with_noisy_signals_from_min_and_max)
{
    for (unsigned seed = 1; seed <= 12; seed++) {
        converges_to_knee(1, 0.05, seed * 7919, 3, 7);
        converges_to_knee(64, 0.05, seed * 104729, 3, 7);
    }
}

/* A step of the workload at `step_s`; the limit is within [lo, hi] 30 s later and stays. */
static void follows_step(model before, model after, int lo, int hi)
{
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 1);
    static trace tr;
    memset(&tr, 0, sizeof tr);
    model m = before;
    simulate(&m, &s, &p, &tr, 300);
    after.cpu_carry = m.cpu_carry;
    after.rng = m.rng;
    m = after;
    simulate(&m, &s, &p, &tr, 900);
    show(&tr, 270, 360);
    cr_assert(within(&tr, 300 + 30, 900, lo, hi), "30 s after the step");
}

Test(adapt_rule, a_step_to_statements_4x_as_costly_keeps_the_knee)
{
    model before = knee4(0, 1);
    model after = before;
    after.cost_ms *= 4;
    follows_step(before, after, 4, 4);
}

Test(adapt_rule, a_step_to_4x_the_clients_keeps_the_knee)
{
    model before = knee4(0, 1);
    before.clients = 8;
    model after = before;
    after.clients = 32;
    follows_step(before, after, 4, 4);
}

/* The statement's CPU work x4 (and its cost): the knee moves from 8 to 2 / 0.5 = 4, and back. */
Test(adapt_rule, a_step_of_the_knee_down_and_up_is_followed_within_30_s)
{
    model wide = knee4(0, 1);
    wide.cpu_frac = 0.25; /* knee 8 */
    model narrow = knee4(0, 1);
    narrow.cost_ms = wide.cost_ms * 4;
    follows_step(wide, narrow, 4, 5);
    follows_step(narrow, wide, 7, 9);
}

Test(adapt_rule, steps_with_noisy_signals_are_followed_within_30_s)
{
    for (unsigned seed = 1; seed <= 8; seed++) {
        model before = knee4(0.05, seed * 7919);
        model after = before;
        after.cost_ms *= 4;
        follows_step(before, after, 3, 7);
        before.cpu_frac = 0.25;
        after.cpu_frac = 0.5;
        follows_step(before, after, 3, 7);
    }
}

/* Every statement updates one row: one runs, the others wait on its lock; throughput is flat
 * and the holds grow with the concurrency. */
Test(adapt_rule, a_hot_row_brings_the_limit_down)
{
    model m = {.cores = 2, .cpu_frac = 0.5, .cost_ms = 5, .clients = 32, .hot_row = 1};
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 32);
    static trace tr;
    memset(&tr, 0, sizeof tr);
    simulate(&m, &s, &p, &tr, 300);
    show(&tr, 0, 120);
    int reached = first_within(&tr, 1, 2);
    cr_assert(reached >= 0 && reached <= 60, "[1, 2] reached at %d s", reached);
    cr_assert(within(&tr, reached, 300, 1, 3));
}

/* Hand-written sequences: tests/unit/adapt_samples/NAME.csv, one row a second (repeated `repeat`
 * times), columns named as dbt_adapt_sample's fields; '#' lines are comments; a column left out
 * is unknown (-1). */
#define MAX_SAMPLES 2000

static int load_samples(const char *name, dbt_adapt_sample *out, int max)
{
    static const char *const names[] = {"repeat",     "dt_s",        "limit",        "held",
                                        "waiters",    "xacts_per_s", "grants_per_s", "hold_ms",
                                        "wait_ms",    "active",      "cpu_active",   "lock_waiting",
                                        "io_waiting", "repl_lag_s",  "timeouts"};
    enum { NCOL = sizeof names / sizeof *names };
    char path[512];
    snprintf(path, sizeof path, "%s/tests/unit/adapt_samples/%s", DBT_SOURCE_DIR, name);
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    int col_of[NCOL]; /* the field of each column in the file */
    int ncols = 0, n = 0;
    char line[1024];
    double t = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        line[strcspn(line, "\r\n")] = 0;
        if (ncols == 0) {
            for (char *tok = strtok(line, ","); tok; tok = strtok(NULL, ",")) {
                int found = -1;
                for (int i = 0; i < NCOL; i++)
                    if (strcmp(tok, names[i]) == 0)
                        found = i;
                cr_assert(found >= 0 && ncols < NCOL, "%s: unknown column %s", name, tok);
                col_of[ncols++] = found;
            }
            continue;
        }
        double v[NCOL];
        for (int i = 0; i < NCOL; i++)
            v[i] = -1;
        v[0] = 1; /* repeat */
        v[1] = 1; /* dt_s */
        int c = 0;
        for (char *tok = strtok(line, ","); tok && c < ncols; tok = strtok(NULL, ","))
            v[col_of[c++]] = strtod(tok, NULL);
        cr_assert_eq(c, ncols, "%s: a row with %d of %d columns", name, c, ncols);
        for (int r = 0; r < (int)v[0]; r++) {
            cr_assert(n < max, "%s: more than %d samples", name, max);
            t += v[1];
            out[n++] = (dbt_adapt_sample){.t_s = t,
                                          .dt_s = v[1],
                                          .limit = (int)v[2],
                                          .held = v[3],
                                          .waiters = (int)v[4],
                                          .xacts_per_s = v[5],
                                          .grants_per_s = v[6],
                                          .hold_ms = v[7],
                                          .wait_ms = v[8],
                                          .active = (int)v[9],
                                          .cpu_active = (int)v[10],
                                          .lock_waiting = (int)v[11],
                                          .io_waiting = (int)v[12],
                                          .repl_lag_s = v[13],
                                          .timeouts = (long long)v[14]};
        }
    }
    fclose(f);
    cr_assert_gt(n, 0, "%s: no samples", name);
    return n;
}

/* Feeds n samples; the decisions go to out (when not NULL). Checks the window between changes. */
static void feed(dbt_adapt_state *s, const dbt_adapt_params *p, const dbt_adapt_sample *x, int n,
                 dbt_adapt_decision *out)
{
    trace *tr = calloc(1, sizeof *tr);
    cr_assert_not_null(tr);
    for (int i = 0; i < n; i++) {
        dbt_adapt_decision d = dbt_adapt_step(s, p, &x[i]);
        check_change(tr, p, &d, x[i].t_s);
        if (out)
            out[i] = d;
    }
    free(tr);
}

static dbt_adapt_sample samples[MAX_SAMPLES], again[MAX_SAMPLES];
static dbt_adapt_decision decisions[MAX_SAMPLES], decisions_again[MAX_SAMPLES];

Test(adapt_rule, steady_timeouts_never_raise_the_limit)
{
    int n = load_samples("timeouts.csv", samples, MAX_SAMPLES);
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 8);
    feed(&s, &p, samples, n, decisions);
    for (int i = 0; i < n; i++)
        cr_assert(decisions[i].change <= 0 && decisions[i].limit <= 8, "at %.0f s: %s",
                  samples[i].t_s, decisions[i].reason);
    cr_expect_eq(s.limit, 8, "%d", s.limit);
    /* And they decide nothing: without them, the same decisions. */
    memcpy(again, samples, sizeof again);
    for (int i = 0; i < n; i++)
        again[i].timeouts = 0;
    dbt_adapt_init(&s, &p, 8);
    feed(&s, &p, again, n, decisions_again);
    for (int i = 0; i < n; i++)
        cr_assert_eq(decisions[i].limit, decisions_again[i].limit, "at %.0f s", samples[i].t_s);
    /* A timed-out wait gives no hold: the baseline is the completed holds' (10 ms), not 0. */
    cr_expect(s.base_hold_ms > 9.999 && s.base_hold_ms < 10.001, "baseline %.3f ms",
              s.base_hold_ms);
}

Test(adapt_rule, lock_contention_lowers_the_limit)
{
    int n = load_samples("locks.csv", samples, MAX_SAMPLES);
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 8);
    feed(&s, &p, samples, n, decisions);
    int first = -1;
    for (int i = 0; i < n && first < 0; i++)
        if (decisions[i].change)
            first = i;
    cr_assert_eq(first, 4, "the first change at sample %d", first); /* the first window's end */
    cr_expect_eq(decisions[first].change, -1);
    cr_expect(strstr(decisions[first].reason, "locks 0.75 > 0.50") != NULL, "%s",
              decisions[first].reason);
    for (int i = 0; i < n; i++)
        cr_assert(decisions[i].change <= 0, "at %.0f s: %s", samples[i].t_s, decisions[i].reason);
    cr_expect_eq(s.limit, 1);
}

/* A sample with every value unknown but its time. */
static dbt_adapt_sample unknown_sample(double t_s)
{
    return (dbt_adapt_sample){.t_s = t_s,
                              .dt_s = 1,
                              .limit = -1,
                              .held = -1,
                              .waiters = -1,
                              .xacts_per_s = -1,
                              .grants_per_s = -1,
                              .hold_ms = -1,
                              .wait_ms = -1,
                              .active = -1,
                              .cpu_active = -1,
                              .lock_waiting = -1,
                              .io_waiting = -1,
                              .repl_lag_s = -1,
                              .timeouts = -1};
}

/* Feeds one window (5 samples a second apart from *t) of `x`; returns the last decision. */
static dbt_adapt_decision one_window(dbt_adapt_state *s, const dbt_adapt_params *p,
                                     dbt_adapt_sample x, double *t)
{
    dbt_adapt_decision d = {0};
    for (int i = 0; i < 5; i++) {
        x.t_s = ++*t;
        d = dbt_adapt_step(s, p, &x);
        if (i < 4)
            cr_assert_eq(d.change, 0, "a change before the window's end: %s", d.reason);
    }
    return d;
}

/* The pool's signals of a busy, healthy pool at limit `held`: holders use it, waiters wait. */
static dbt_adapt_sample busy(int held)
{
    dbt_adapt_sample x = unknown_sample(0);
    x.held = held;
    x.waiters = 10;
    x.grants_per_s = held * 100.0;
    x.hold_ms = 10;
    return x;
}

Test(adapt_rule, never_two_changes_within_a_window)
{
    /* Erratic signals three times a second, overloaded and healthy by turns of 11.3 s (out of
     * step with the windows): the rule may change at most once per window. */
    model noise = {.rng = 12345};
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 10);
    int changes = 0;
    double last = -1, first = -1;
    for (int i = 1; i <= 3000; i++) {
        dbt_adapt_sample x = unknown_sample(i * 0.3);
        int overloaded = (int)(x.t_s / 11.3) % 2;
        x.dt_s = 0.3;
        x.held = s.limit * (0.5 + uniform(&noise));
        x.waiters = (int)(20 * uniform(&noise));
        x.grants_per_s = 1000 * uniform(&noise);
        x.xacts_per_s = 1000 * uniform(&noise);
        x.hold_ms = 1 + 50 * uniform(&noise);
        x.active = (int)(20 * uniform(&noise));
        x.cpu_active = overloaded ? 10 : (int)(2 * uniform(&noise));
        x.lock_waiting = overloaded ? (int)((x.active - x.cpu_active) * uniform(&noise)) : 0;
        dbt_adapt_decision d = dbt_adapt_step(&s, &p, &x);
        if (d.change) {
            cr_assert(last < 0 || x.t_s - last >= p.window_s - 1e-9, "changes at %.1f and %.1f s",
                      last, x.t_s);
            if (first < 0)
                first = x.t_s;
            last = x.t_s;
            changes++;
        }
    }
    cr_expect_gt(changes, 20, "only %d changes: the test says little", changes);
    cr_expect_geq(first, p.window_s, "the first change at %.1f s, before a whole window", first);

    /* The clock goes back 100 s right after a change: a whole window passes before the next. */
    double elapsed = 0, changed_at = -1;
    dbt_adapt_init(&s, &p, 10);
    double t = 1000;
    for (int i = 0; i < 200; i++) {
        dbt_adapt_sample x = busy(s.limit);
        x.cpu_active = 9; /* always over 2 cores */
        x.t_s = t;
        dbt_adapt_decision d = dbt_adapt_step(&s, &p, &x);
        elapsed += 1;
        if (d.change) {
            cr_assert(changed_at < 0 || elapsed - changed_at >= p.window_s, "after %.0f s",
                      elapsed - changed_at);
            changed_at = elapsed;
            if (i < 20)
                t -= 100;
        }
        t += 1;
    }
    cr_expect_gt(changed_at, 0);
}

Test(adapt_rule, clamps_at_min_and_max)
{
    dbt_adapt_params p = params(3, 6, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 0);
    cr_expect_eq(s.limit, 3);
    dbt_adapt_init(&s, &p, 100);
    cr_expect_eq(s.limit, 6);

    /* A database with room for 100: the limit rises to max and no further. */
    model roomy = knee4(0, 1);
    roomy.cpu_frac = 0.02;
    dbt_adapt_init(&s, &p, 3);
    static trace tr;
    memset(&tr, 0, sizeof tr);
    simulate(&roomy, &s, &p, &tr, 300);
    cr_expect(within(&tr, 0, 300, 3, 6));
    cr_expect_eq(s.limit, 6);
    double t = 1000;
    cr_expect(strncmp(one_window(&s, &p, model_sample(&roomy, 6, 0), &t).reason, "keep 6: at max",
                      14) == 0);

    /* A database that fits one statement: the limit falls to min and no further. */
    model narrow = knee4(0, 1);
    narrow.cpu_frac = 2;
    dbt_adapt_init(&s, &p, 6);
    memset(&tr, 0, sizeof tr);
    simulate(&narrow, &s, &p, &tr, 300);
    cr_expect(within(&tr, 0, 300, 3, 6));
    cr_expect_eq(s.limit, 3);
}

Test(adapt_rule, the_pool_alone_finds_the_knee_when_the_database_says_nothing)
{
    /* No PostgreSQL signal at all: the holds and the grants find the knee. */
    model m = knee4(0, 1);
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 1);
    double t = 0;
    int lo = 64, hi = 0;
    for (int w = 0; w < 100; w++) {
        dbt_adapt_sample x = model_sample(&m, s.limit, 0);
        x.xacts_per_s = -1;
        x.active = x.cpu_active = x.lock_waiting = x.io_waiting = -1;
        dbt_adapt_decision d = one_window(&s, &p, x, &t);
        if (w >= 10) {
            lo = d.limit < lo ? d.limit : lo;
            hi = d.limit > hi ? d.limit : hi;
        }
        if (d.change < 0)
            cr_expect(strstr(d.reason, "grants") != NULL, "%s", d.reason);
    }
    cr_expect(lo >= 4 && hi <= 6, "between %d and %d", lo, hi);
}

Test(adapt_rule, unknown_values_are_left_out_not_taken_as_zero)
{
    dbt_adapt_params p = params(1, 64, 2);
    p.lag_max_s = 5;
    dbt_adapt_state s;
    double t = 0;

    /* cpu_active known in 2 samples of 5, both 4 on 2 cores: overload (taken as 0, the mean
     * would be 1.6). */
    dbt_adapt_init(&s, &p, 8);
    dbt_adapt_decision d = {0};
    for (int i = 0; i < 5; i++) {
        dbt_adapt_sample x = busy(8);
        x.cpu_active = i % 2 ? 4 : -1;
        x.t_s = ++t;
        d = dbt_adapt_step(&s, &p, &x);
    }
    cr_expect_eq(d.change, -1, "%s", d.reason);
    cr_expect(strstr(d.reason, "cpu 4.00") != NULL, "%s", d.reason);

    /* Units held unknown, and no grants to tell them by Little's law: no raise. */
    dbt_adapt_init(&s, &p, 4);
    dbt_adapt_sample x = busy(4);
    x.held = -1;
    x.grants_per_s = -1;
    d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, 0, "%s", d.reason);
    cr_expect(strstr(d.reason, "units held unknown") != NULL, "%s", d.reason);
    /* ... but with grants: 400/s x 10 ms = 4 units in use. */
    x.grants_per_s = 400;
    d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, +1, "%s", d.reason);

    /* Waiters unknown: no raise. */
    dbt_adapt_init(&s, &p, 4);
    x = busy(4);
    x.waiters = -1;
    d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, 0, "%s", d.reason);
    cr_expect(strstr(d.reason, "waiters unknown") != NULL, "%s", d.reason);

    /* Replica lag unknown: ignored (raise); above lag_max_s: lower, and the reason says so. */
    dbt_adapt_init(&s, &p, 4);
    x = busy(4);
    d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, +1, "%s", d.reason);
    x = busy(s.limit);
    x.repl_lag_s = 10;
    d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, -1, "%s", d.reason);
    cr_expect(strstr(d.reason, "lag 10.0s > 5.0s") != NULL, "%s", d.reason);

    /* Windows with no completed hold (unknown, or 0) leave the baseline as it was. */
    dbt_adapt_init(&s, &p, 4);
    d = one_window(&s, &p, busy(4), &t);
    double base = s.base_hold_ms;
    cr_expect(base > 9.999 && base < 10.001, "%.3f", base);
    x = busy(s.limit);
    x.hold_ms = -1;
    one_window(&s, &p, x, &t);
    x.hold_ms = 0;
    one_window(&s, &p, x, &t);
    cr_expect(s.base_hold_ms == base, "%.3f", s.base_hold_ms);
}

Test(adapt_rule, a_reason_is_one_line_that_names_what_decided)
{
    dbt_adapt_params p = params(1, 64, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 4);
    double t = 0;
    dbt_adapt_sample x = busy(4);
    x.xacts_per_s = 400;
    x.cpu_active = 1;
    x.active = 4;
    x.lock_waiting = 0;
    dbt_adapt_decision d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, +1);
    cr_expect(strncmp(d.reason, "raise 4->6: held 4.0/4, waiters 10.0", 36) == 0, "%s", d.reason);
    /* At 6: holds 1.5x, throughput flat, 3.5 statements on 2 cores for two windows. */
    x = busy(6);
    x.hold_ms = 15;
    x.xacts_per_s = 400;
    x.grants_per_s = 400;
    x.cpu_active = 3;
    x.active = 6;
    x.lock_waiting = 0;
    x.timeouts = 7;
    d = one_window(&s, &p, x, &t);
    cr_expect_eq(d.change, -1);
    cr_expect_eq(d.limit, 4); /* 6 x 10 / 15: the knee by Little's law */
    cr_expect(strchr(d.reason, '\n') == NULL);
    cr_expect(strstr(d.reason, "lower 6->4: hold 15.0ms 1.50x base 10.0ms@4.0, xacts 1x") != NULL,
              "%s", d.reason);
    cr_expect(strstr(d.reason, "timeouts 35") != NULL, "%s", d.reason);
}

/* Closed loop: 50 waits a second time out (callers give up at the knee); the limit goes exactly as
 * without them, from min and from max, noisy or not. */
Test(adapt_rule, timeouts_change_nothing_in_a_closed_loop)
{
    static trace with, without;
    dbt_adapt_params p = params(1, 64, 2);
    for (int start = 1; start <= 64; start += 63)
        for (int noisy = 0; noisy <= 1; noisy++) {
            dbt_adapt_state s;
            model m = knee4(noisy * 0.05, 4242);
            memset(&without, 0, sizeof without);
            dbt_adapt_init(&s, &p, start);
            simulate(&m, &s, &p, &without, 600);
            m = knee4(noisy * 0.05, 4242);
            m.timeouts_per_s = 50;
            memset(&with, 0, sizeof with);
            dbt_adapt_init(&s, &p, start);
            simulate(&m, &s, &p, &with, 600);
            cr_assert(memcmp(with.limit, without.limit, sizeof with.limit) == 0,
                      "from %d (noise %d): the timeouts changed the limit", start, noisy);
            cr_assert_gt(with.changes, 2);
        }
}

/* The bench's "hot" (4 rows, 3 ms of lock each): throughput rises with the concurrency up to
 * about 12 while most statements wait on a row lock (a share above 0.5 from 6 on). The waits cost
 * nothing: more concurrency still pays, so the limit must reach where the throughput stops rising
 * (0.9 x the best, 769/s at 12), from min and from max. */
static void hot_rows_reach_the_best(int start, double noise, unsigned seed)
{
    model m = {.cores = 2, .clients = 32, .hot_rows = 4, .noise = noise, .rng = seed};
    dbt_adapt_params p = params(1, 32, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, start);
    static trace tr;
    memset(&tr, 0, sizeof tr);
    simulate(&m, &s, &p, &tr, 600);
    show(&tr, 0, 200);
    double thr = mean_thr(&tr, 120, 600);
    int lo = 32, hi = 0;
    for (int t = 120; t < 600; t++) {
        lo = tr.limit[t] < lo ? tr.limit[t] : lo;
        hi = tr.limit[t] > hi ? tr.limit[t] : hi;
    }
    cr_log_info("hot rows from %d (noise %.2f): limit %d..%d, mean %.1f, %.0f/s (%.2f x 769/s)",
                start, noise, lo, hi, mean_limit(&tr, 120, 600), thr, thr / 769);
    cr_assert(thr >= 0.9 * 769, "from %d (noise %.2f, seed %u): %.0f/s, below 0.9 x 769/s", start,
              noise, seed, thr);
    cr_assert(within(&tr, 120, 600, 5, 20), "from %d (noise %.2f, seed %u)", start, noise, seed);
}

Test(adapt_rule, hot_rows_whose_waits_cost_nothing_keep_the_concurrency_that_pays)
{
    hot_rows_reach_the_best(1, 0, 1);
    hot_rows_reach_the_best(32, 0, 1);
    for (unsigned seed = 1; seed <= 6; seed++) {
        hot_rows_reach_the_best(1, 0.05, seed * 7919);
        hot_rows_reach_the_best(32, 0.05, seed * 104729);
    }
}

/* The bench's step: 32 clients of "10 ms sleep + CPU work" on 2 cores, from max (32); the CPU
 * part x 4 at 300 s makes the server CPU-bound (a knee of 2 / 2.56 ms x 12.56 ms = 10 instead of
 * 33). The limit must come down within 30 s, near the new knee, and stay. */
static void mixed_step_lowers(double noise, unsigned seed)
{
    model m = {
        .cores = 2, .clients = 32, .sleep_ms = 10, .cpu_ms = 0.64, .noise = noise, .rng = seed};
    dbt_adapt_params p = params(1, 32, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 32);
    static trace tr;
    memset(&tr, 0, sizeof tr);
    simulate(&m, &s, &p, &tr, 300);
    int before = tr.limit[299];
    m.cpu_ms *= 4;
    simulate(&m, &s, &p, &tr, 600);
    show(&tr, 270, 400);
    int lo = 32, hi = 0;
    for (int t = 330; t < 600; t++) {
        lo = tr.limit[t] < lo ? tr.limit[t] : lo;
        hi = tr.limit[t] > hi ? tr.limit[t] : hi;
    }
    cr_log_info("step (noise %.2f, seed %u): %d before, %d..%d from 30 s after", noise, seed,
                before, lo, hi);
    cr_assert(before >= 24, "before the step: %d (seed %u)", before, seed);
    cr_assert(within(&tr, 330, 600, 6, 16), "30 s after the step (noise %.2f, seed %u)", noise,
              seed);
}

Test(adapt_rule, a_step_to_cpu_bound_statements_lowers_within_30_s)
{
    mixed_step_lowers(0, 1);
    for (unsigned seed = 1; seed <= 6; seed++)
        mixed_step_lowers(0.05, seed * 7919);
}

/* The step as the bench saw it: at max (32) the statements' holds x4 at the same concurrency
 * (re-baselined: the workload's doing) and throughput / 3, with cpu_active only modestly above
 * 2 cores and noisy per sample (1, 5, 2, 6, 3: mean 3.4, one window's mean less two standard
 * errors 1.55). One window's samples cannot tell the excess from noise; those of three windows
 * at this limit can. The limit must come down within 30 s of the step and not go back to 32. */
Test(adapt_rule, a_modest_noisy_cpu_excess_at_max_lowers_within_30_s)
{
    dbt_adapt_params p = params(1, 32, 2);
    dbt_adapt_state s;
    dbt_adapt_init(&s, &p, 32);
    static const int before[] = {2, 1, 3, 2, 1}, after[] = {1, 5, 2, 6, 3};
    double t = 0;
    for (int w = 0; w < 12; w++)
        for (int i = 0; i < 5; i++) {
            dbt_adapt_sample x = busy(32);
            x.xacts_per_s = x.grants_per_s = 3000;
            x.hold_ms = 10.6;
            x.active = 32;
            x.cpu_active = before[i];
            x.lock_waiting = 0;
            x.t_s = ++t;
            dbt_adapt_decision d = dbt_adapt_step(&s, &p, &x);
            cr_assert_eq(d.change, 0, "before the step at %.0f s: %s", t, d.reason);
        }
    double step = t, lowered = -1;
    for (int w = 0; w < 12; w++)
        for (int i = 0; i < 5; i++) {
            dbt_adapt_sample x = busy(s.limit);
            x.xacts_per_s = x.grants_per_s = 1000;
            x.hold_ms = 41;
            x.active = s.limit;
            x.cpu_active = after[i] * s.limit / 32;
            x.lock_waiting = 0;
            x.t_s = ++t;
            dbt_adapt_decision d = dbt_adapt_step(&s, &p, &x);
            if (d.change < 0 && lowered < 0) {
                lowered = t;
                cr_log_info("%s", d.reason);
            }
        }
    cr_assert(lowered > 0 && lowered - step <= 30, "lowered %.0f s after the step (limit %d)",
              lowered > 0 ? lowered - step : -1, s.limit);
    cr_assert_lt(s.limit, 32);
}
