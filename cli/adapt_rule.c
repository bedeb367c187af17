/* adapt_rule.c - the adaptive limit's decision (see adapt_rule.h; the rule and why it is so:
 * docs/design.md, "An adaptive limit"). Samples are gathered into windows; at the end of each
 * window (and never sooner than a window after the last change) one decision: lower, raise or
 * keep. Pure: no I/O, no clock, no allocation, no libm. */
#include "adapt_rule.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

/* The multiplicative decrease of the rule: L = floor(0.9 L). */
#define DECREASE 0.9
/* The deepest one decrease may go, whatever a signal estimates: half (TCP's AIMD factor). */
#define DECREASE_FLOOR 0.5
/* How far the baseline of holds rises, per window, towards a slightly longer hold (no sign of
 * overload) measured at a higher concurrency: a bounded decay, so that an old minimum does not
 * stand forever, and never past a sign of overload (that would make the overload normal). */
#define BASE_RISE 0.125
/* A concurrency within half a unit of the baseline's counts as the same. */
#define SAME_CONCURRENCY 0.5
/* A window's CPUs are over the cores when its mean of cpu_active is above them by more than
 * this many standard errors of that mean (a few busy samples are not enough); the overload is
 * sustained when two windows running say so, or one says it by this factor. */
#define CPU_SUSTAINED_SE 2.0
#define CPU_GROSS        1.5
/* More concurrency "paid" when, from the lower concurrency of two windows to the higher, throughput
 * gained more than this share of what proportional scaling would give (a tenth: past the first
 * few units, a hot row's or a saturating disk's gains are small but real, and above the noise of
 * a window's mean). */
#define PAY_SHARE 0.1
/* Raising needs waiters in at least this share of the window's samples. */
#define WAITING_SUSTAINED 0.5
/* Slack for comparing times made of sums of floating seconds. */
#define TIME_EPS 1e-6

void dbt_adapt_params_default(dbt_adapt_params *p)
{
    *p = (dbt_adapt_params){.min = 1,
                            .max = 64,
                            .cores = 1,
                            .window_s = 5,
                            .hold_rise = 0.2,
                            .lock_share = 0.5,
                            .lag_max_s = -1};
}

static int lowest(const dbt_adapt_params *p)
{
    return p->min < 1 ? 1 : p->min;
}

static int highest(const dbt_adapt_params *p)
{
    return p->max < lowest(p) ? lowest(p) : p->max;
}

static int clamp_limit(const dbt_adapt_params *p, int v)
{
    return v < lowest(p) ? lowest(p) : v > highest(p) ? highest(p) : v;
}

static void window_start(dbt_adapt_window *w, double start_s)
{
    memset(w, 0, sizeof *w);
    w->start_s = start_s;
}

void dbt_adapt_init(dbt_adapt_state *s, const dbt_adapt_params *p, int start_limit)
{
    memset(s, 0, sizeof *s);
    s->limit = clamp_limit(p, start_limit);
    s->last_change_s = -1;
    s->base_hold_ms = -1;
    s->base_xacts_per_s = -1;
    s->base_grants_per_s = -1;
    s->base_held = -1;
    s->ref_conc = -1;
    s->ref_xacts_per_s = -1;
    s->ref_grants_per_s = -1;
    s->last_t_s = -1;
}

/* Adds one sample to the window; each unknown (negative) value is left out of its own sum. */
static void window_add(dbt_adapt_window *w, const dbt_adapt_sample *x, double dt)
{
    w->nsamples++;
    if (x->held >= 0) {
        w->held_sum += x->held;
        w->held_n++;
    }
    if (x->waiters >= 0) {
        w->waiters_sum += x->waiters;
        w->waiters_n++;
        w->waiting_samples += x->waiters > 0;
    }
    if (dt > 0 && x->xacts_per_s >= 0) {
        w->xacts_sum += x->xacts_per_s * dt;
        w->xacts_s += dt;
    }
    if (dt > 0 && x->grants_per_s >= 0) {
        w->grants_sum += x->grants_per_s * dt;
        w->grants_s += dt;
    }
    /* A mean hold of 0 is an interval in which no permit was given back: nothing completed, so
     * nothing for the baseline. Each interval's mean weighs as many holds as it had. */
    if (x->hold_ms > 0) {
        double weight = dt > 0 && x->grants_per_s > 0 ? x->grants_per_s * dt : dt > 0 ? dt : 1;
        w->hold_sum += x->hold_ms * weight;
        w->hold_w += weight;
    }
    if (x->cpu_active >= 0) {
        w->cpu_sum += x->cpu_active;
        w->cpu_sq_sum += (double)x->cpu_active * x->cpu_active;
        w->cpu_n++;
    }
    if (x->active >= 0 && x->lock_waiting >= 0) {
        w->active_sum += x->active;
        w->lock_sum += x->lock_waiting;
    }
    if (x->repl_lag_s >= 0) {
        w->lag_sum += x->repl_lag_s;
        w->lag_n++;
    }
    if (x->timeouts > 0)
        w->timeouts += x->timeouts;
}

/* A window's means; -1 where no sample knew the value. */
typedef struct {
    double held, waiters, waiting_share;
    double thr, base_thr; /* throughput, and the baseline's from the same source */
    const char *thr_name; /* "xacts" (PostgreSQL's) or "grants" (the pool's) */
    double grants, xacts;
    double hold;
    double conc;        /* the concurrency the holds were measured at */
    double cpu, cpu_se; /* the mean of cpu_active, and its standard error (-1: one sample) */
    double locks;       /* the share of active statements waiting on locks */
    double lag;
    long long timeouts;
} window_summary;

/* A square root by Newton's method (the command does not link libm for this one use). */
static double root(double v)
{
    if (v <= 0)
        return 0;
    double r = v > 1 ? v : 1;
    for (int i = 0; i < 60; i++)
        r = (r + v / r) / 2;
    return r;
}

static double mean_or_unknown(double sum, double n)
{
    return n > 0 ? sum / n : -1;
}

static window_summary summarize(const dbt_adapt_state *s)
{
    const dbt_adapt_window *w = &s->win;
    window_summary m = {.thr = -1, .base_thr = -1, .thr_name = "throughput"};
    m.held = mean_or_unknown(w->held_sum, w->held_n);
    m.waiters = mean_or_unknown(w->waiters_sum, w->waiters_n);
    m.waiting_share = mean_or_unknown(w->waiting_samples, w->waiters_n);
    m.grants = mean_or_unknown(w->grants_sum, w->grants_s);
    double xacts = m.xacts = mean_or_unknown(w->xacts_sum, w->xacts_s);
    /* PostgreSQL's own count when this window and the baseline both have it (it includes what
     * the pool does not see), else the pool's grants. */
    if (xacts >= 0 && (s->base_hold_ms <= 0 || s->base_xacts_per_s >= 0)) {
        m.thr = xacts;
        m.base_thr = s->base_xacts_per_s;
        m.thr_name = "xacts";
    } else if (m.grants >= 0) {
        m.thr = m.grants;
        m.base_thr = s->base_grants_per_s;
        m.thr_name = "grants";
    }
    m.hold = mean_or_unknown(w->hold_sum, w->hold_w);
    /* Units in use: as sampled, else by Little's law (grants per second x mean hold). */
    m.conc = m.held >= 0 ? m.held : m.grants >= 0 && m.hold >= 0 ? m.grants * m.hold / 1000 : -1;
    m.cpu = mean_or_unknown(w->cpu_sum, w->cpu_n);
    m.cpu_se = -1;
    if (w->cpu_n >= 2) {
        double var = (w->cpu_sq_sum - w->cpu_n * m.cpu * m.cpu) / (w->cpu_n - 1);
        m.cpu_se = root(var > 0 ? var / w->cpu_n : 0);
    }
    m.locks = mean_or_unknown(w->lock_sum, w->active_sum);
    m.lag = mean_or_unknown(w->lag_sum, w->lag_n);
    m.timeouts = w->timeouts;
    return m;
}

/* What the window's signals say: each overload and the limit it suggests (< 0: none), and each
 * sign that forbids a raise. */
typedef struct {
    int hold_over, cpu_over, lock_over, lag_over;
    double cpu_mean, cpu_se; /* what the CPU verdict rests on: pooled, or this window's */
    int cpu_samples;
    int paid;         /* the last change's concurrency paid (1), did not (0), unknown (-1) */
    double paid_gain; /* the throughput's gain from the lower concurrency to the higher */
    int hold_sign, cpu_sign, lock_sign, lag_sign;
    double hold_ratio, thr_ratio, thr_expected;
    double hold_estimate, cpu_estimate, lock_estimate;
} verdict;

/* Whether the higher concurrency of this window and the reference (the window before the last
 * change) paid: throughput, from the source both know, gained more than PAY_SHARE of proportional
 * scaling from the lower to the higher. After a raise: the raise paid; after a decrease: the
 * decrease cost throughput. Unknown (-1) without a reference, throughput or a concurrency apart. */
static int concurrency_paid(const dbt_adapt_state *s, const window_summary *m, double *gain)
{
    double thr = m->xacts >= 0 && s->ref_xacts_per_s >= 0 ? m->xacts : m->grants;
    double ref =
        m->xacts >= 0 && s->ref_xacts_per_s >= 0 ? s->ref_xacts_per_s : s->ref_grants_per_s;
    *gain = 0;
    if (thr < 0 || ref < 0 || m->conc <= 0 || s->ref_conc <= 0)
        return -1;
    int raised = m->conc > s->ref_conc + SAME_CONCURRENCY;
    if (!raised && m->conc >= s->ref_conc - SAME_CONCURRENCY)
        return -1;
    double lo_thr = raised ? ref : thr, hi_thr = raised ? thr : ref;
    double lo_n = raised ? s->ref_conc : m->conc, hi_n = raised ? m->conc : s->ref_conc;
    if (lo_thr <= 0)
        return hi_thr > 0;
    *gain = hi_thr / lo_thr - 1;
    return *gain > PAY_SHARE * (hi_n / lo_n - 1);
}

static verdict judge(const dbt_adapt_state *s, const dbt_adapt_params *p, const window_summary *m)
{
    verdict v = {.hold_estimate = -1, .cpu_estimate = -1, .lock_estimate = -1, .thr_ratio = -1};
    v.paid = concurrency_paid(s, m, &v.paid_gain);
    /* Holds: only against a baseline measured at a lower concurrency. A longer hold at the same
     * concurrency is the workload's doing (heavier statements), not ours. */
    if (m->hold > 0 && s->base_hold_ms > 0 && m->conc > s->base_held + SAME_CONCURRENCY) {
        v.hold_ratio = m->hold / s->base_hold_ms;
        /* Throughput "stopped rising": it gained less than half of what the added concurrency
         * would give if the database scaled. Unknown throughput: the holds alone decide. */
        v.thr_expected = s->base_held > 0 ? 1 + 0.5 * (m->conc / s->base_held - 1) : 1;
        int stopped = 1;
        if (m->thr >= 0 && m->base_thr > 0) {
            v.thr_ratio = m->thr / m->base_thr;
            stopped = v.thr_ratio <= v.thr_expected;
        }
        /* Against the baseline, a gain that slows (a hot row's, a disk's) looks stopped; the
         * last change, one step away, tells whether the concurrency still pays. */
        if (v.paid >= 0)
            stopped = !v.paid;
        v.hold_over = v.hold_ratio > 1 + p->hold_rise && stopped;
        v.hold_sign = v.hold_ratio > 1 + p->hold_rise / 2 && v.paid != 1;
        /* Past a knee throughput is flat, so by Little's law the hold grows with the concurrency:
         * the knee is about concurrency x base hold / hold. */
        if (v.hold_over)
            v.hold_estimate = m->conc / v.hold_ratio;
    }
    if (p->cores > 0 && m->cpu >= 0) {
        double least = m->cpu_se >= 0 ? m->cpu - CPU_SUSTAINED_SE * m->cpu_se : -1;
        v.cpu_sign = m->cpu >= p->cores;
        /* Sustained: this window's samples pooled with those of the last windows at this limit
         * (every one of them, not only the busy ones: that would bias the mean up), or a gross
         * excess in this window alone. */
        double n = s->win.cpu_n, sum = s->win.cpu_sum, sq = s->win.cpu_sq_sum;
        for (int i = 0; i < s->cpu_past_len; i++) {
            n += s->cpu_past[i].n;
            sum += s->cpu_past[i].sum;
            sq += s->cpu_past[i].sq_sum;
        }
        double least_pooled = -1, mean = -1, se = -1;
        if (s->cpu_past_len >= 1 && n >= 2) {
            double var = (sq - n * (sum / n) * (sum / n)) / (n - 1);
            mean = sum / n;
            se = root(var > 0 ? var / n : 0);
            least_pooled = mean - CPU_SUSTAINED_SE * se;
        }
        v.cpu_over = least_pooled > p->cores || least > CPU_GROSS * p->cores;
        int pooled = least_pooled > p->cores;
        v.cpu_mean = pooled ? mean : m->cpu;
        v.cpu_se = pooled ? se : m->cpu_se;
        v.cpu_samples = pooled ? (int)n : s->win.cpu_n;
        /* The statements on a CPU grow with the concurrency: the cores fit this many. */
        if (v.cpu_over) {
            double conc = m->conc >= 0 && m->conc < s->limit ? m->conc : s->limit;
            v.cpu_estimate = conc * p->cores / m->cpu;
        }
    }
    if (m->locks >= 0) {
        /* Waits on locks are a cost only when the concurrency that brought them did not pay:
         * on a few hot rows, throughput may still rise with the concurrency while most
         * statements wait. Without a comparison, the share alone decides. */
        v.lock_over = m->locks > p->lock_share && v.paid != 1;
        v.lock_sign = m->locks > p->lock_share / 2 && v.paid != 1;
        /* The statements the locks let run stay as they are; of the rest, no more than the
         * share allowed to wait. */
        if (v.lock_over && p->lock_share < 1) {
            double conc = m->conc >= 0 && m->conc < s->limit ? m->conc : s->limit;
            v.lock_estimate = conc * (1 - m->locks) / (1 - p->lock_share);
        }
    }
    if (p->lag_max_s >= 0 && m->lag >= 0) {
        v.lag_over = m->lag > p->lag_max_s;
        v.lag_sign = m->lag > p->lag_max_s / 2;
    }
    return v;
}

/* The reason, built in pieces: one line, cut at its size. */
typedef struct {
    char *buf;
    size_t size, len;
} line;

static void say(line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(line *l, const char *fmt, ...)
{
    if (l->len + 1 >= l->size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(l->buf + l->len, l->size - l->len, fmt, ap);
    va_end(ap);
    if (n > 0)
        l->len = l->len + (size_t)n < l->size ? l->len + (size_t)n : l->size - 1;
}

static void say_hold(line *l, const dbt_adapt_state *s, const window_summary *m, const verdict *v)
{
    say(l, "hold %.1fms %.2fx base %.1fms@%.1f", m->hold, v->hold_ratio, s->base_hold_ms,
        s->base_held);
    if (v->thr_ratio >= 0)
        say(l, ", %s %.3gx (scaling %.2fx)", m->thr_name, v->thr_ratio, v->thr_expected);
}

/* The measurements behind every decision, after its verdict. */
static void say_signals(line *l, const dbt_adapt_state *s, const window_summary *m)
{
    say(l, " |");
    if (m->held >= 0)
        say(l, " held %.1f/%d", m->held, s->limit);
    if (m->waiters >= 0)
        say(l, " waiters %.1f", m->waiters);
    if (m->hold > 0)
        say(l, " hold %.1fms", m->hold);
    if (m->thr >= 0)
        say(l, " %s %.4g/s", m->thr_name, m->thr);
    if (m->cpu >= 0)
        say(l, " cpu %.1f", m->cpu);
    if (m->locks >= 0)
        say(l, " locks %.2f", m->locks);
    if (m->lag >= 0)
        say(l, " lag %.1fs", m->lag);
    say(l, " timeouts %lld", m->timeouts);
}

static int isqrt(int n)
{
    long long r = 0;
    while ((r + 1) * (r + 1) <= n)
        r++;
    return (int)r;
}

static int lower_to(const dbt_adapt_state *s, const dbt_adapt_params *p, const verdict *v)
{
    int to = (int)(s->limit * DECREASE);
    double estimates[] = {v->hold_estimate, v->cpu_estimate, v->lock_estimate};
    for (size_t i = 0; i < sizeof estimates / sizeof *estimates; i++) {
        /* Rounded up: the least concurrency that keeps the database as busy (a noisy signal's
         * estimate, rounded down, would compound with the decrease's own rounding). */
        if (estimates[i] >= 0 && estimates[i] < to)
            to = (int)estimates[i] + (estimates[i] > (int)estimates[i]);
    }
    int deepest = (int)(s->limit * DECREASE_FLOOR);
    /* Right after a raise that found overload: back to the limit it left, just judged free of
     * one (an estimate from a single window past a knee would undershoot it). */
    if (s->good_limit > deepest && s->good_limit < s->limit)
        deepest = s->good_limit;
    return clamp_limit(p, to < deepest ? deepest : to);
}

static int raise_to(const dbt_adapt_state *s, const dbt_adapt_params *p)
{
    int step = isqrt(s->limit);
    int to = s->limit + (step < 1 ? 1 : step);
    /* Towards a limit found overloaded before, by one at a time: never jump past it. */
    if (s->over_limit > s->limit) {
        if (to > s->over_limit - 1)
            to = s->over_limit - 1;
        if (to < s->limit + 1)
            to = s->limit + 1;
    }
    return clamp_limit(p, to);
}

/* The baseline of holds, after a window with completed holds: a new minimum, or a window whose
 * concurrency is not above the baseline's (its longer holds are the workload's: re-baseline at
 * once), replaces it; else, when its holds show no sign of overload, it rises by a bounded part
 * of the way. */
static void update_baseline(dbt_adapt_state *s, const window_summary *m, const verdict *v,
                            double xacts)
{
    if (m->hold <= 0)
        return;
    if (s->base_hold_ms <= 0 || m->hold <= s->base_hold_ms ||
        m->conc <= s->base_held + SAME_CONCURRENCY) {
        s->base_hold_ms = m->hold;
        s->base_xacts_per_s = xacts;
        s->base_grants_per_s = m->grants;
        s->base_held = m->conc >= 0 ? m->conc : s->limit;
    } else if (!v->hold_sign) {
        s->base_hold_ms += (m->hold - s->base_hold_ms) * BASE_RISE;
    }
}

static dbt_adapt_decision decide(dbt_adapt_state *s, const dbt_adapt_params *p,
                                 const window_summary *m, const verdict *v)
{
    dbt_adapt_decision d = {.limit = s->limit};
    line l = {d.reason, sizeof d.reason, 0};
    int L = s->limit;
    if (v->hold_over || v->cpu_over || v->lock_over || v->lag_over) {
        int to = lower_to(s, p, v);
        if (to < L)
            say(&l, "lower %d->%d:", L, to);
        else
            say(&l, "keep %d (at min):", L);
        const char *sep = " ";
        if (v->hold_over) {
            say(&l, "%s", sep);
            say_hold(&l, s, m, v);
            sep = "; ";
        }
        if (v->cpu_over) {
            say(&l, "%scpu %.2f (se %.2f, %d samples) > %g cores", sep, v->cpu_mean, v->cpu_se,
                v->cpu_samples, p->cores);
            sep = "; ";
        }
        if (v->lock_over) {
            say(&l, "%slocks %.2f > %.2f of active", sep, m->locks, p->lock_share);
            if (v->paid == 0)
                say(&l, " (%+.0f%% %s from %.1f to %.1f)", v->paid_gain * 100, m->thr_name,
                    m->conc < s->ref_conc ? m->conc : s->ref_conc,
                    m->conc < s->ref_conc ? s->ref_conc : m->conc);
            sep = "; ";
        }
        if (v->lag_over)
            say(&l, "%slag %.1fs > %.1fs", sep, m->lag, p->lag_max_s);
        if (to < L) {
            d.limit = to;
            d.change = -1;
            s->over_limit = L;
        }
    } else if (L >= highest(p)) {
        say(&l, "keep %d: at max", L);
    } else if (v->hold_sign || v->cpu_sign || v->lock_sign || v->lag_sign) {
        /* Between a sign and an overload: hold still (the hysteresis band). */
        say(&l, "keep %d: near overload:", L);
        if (v->hold_sign)
            say(&l, " hold %.2fx base", v->hold_ratio);
        if (v->cpu_sign)
            say(&l, " cpu %.1f at %g cores", m->cpu, p->cores);
        if (v->lock_sign)
            say(&l, " locks %.2f", m->locks);
        if (v->lag_sign)
            say(&l, " lag %.1fs", m->lag);
    } else {
        double used = m->conc;
        if (used < 0 || used < L / 2.0) {
            if (used < 0)
                say(&l, "keep %d: units held unknown", L);
            else
                say(&l, "keep %d: held %.1f < half of %d", L, used, L);
        } else if (m->thr == 0) {
            /* Holders and waiters, and nothing completes: more would only wait longer. */
            say(&l, "keep %d: no %s completed", L, m->thr_name);
        } else if (m->waiting_share < WAITING_SUSTAINED) {
            if (m->waiting_share < 0)
                say(&l, "keep %d: waiters unknown", L);
            else
                say(&l, "keep %d: waiters in %.0f%% of samples", L, m->waiting_share * 100);
        } else {
            int to = raise_to(s, p);
            say(&l, "raise %d->%d: held %.1f/%d, waiters %.1f, no overload", L, to, used, L,
                m->waiters);
            d.limit = to;
            d.change = +1;
            if (s->over_limit > 0 && to >= s->over_limit)
                s->over_limit = 0;
        }
    }
    say_signals(&l, s, m);
    return d;
}

dbt_adapt_decision dbt_adapt_step(dbt_adapt_state *s, const dbt_adapt_params *p,
                                  const dbt_adapt_sample *x)
{
    double dt = x->dt_s > 0                                ? x->dt_s
                : s->last_t_s >= 0 && x->t_s > s->last_t_s ? x->t_s - s->last_t_s
                                                           : 0;
    if (s->last_t_s >= 0 && x->t_s < s->last_t_s) {
        /* The clock went back: start the window again, and wait a whole one before a change. */
        s->win.nsamples = 0;
        if (s->last_change_s > x->t_s)
            s->last_change_s = x->t_s;
    }
    if (s->win.nsamples == 0)
        window_start(&s->win, x->t_s - dt);
    window_add(&s->win, x, dt);
    s->last_t_s = x->t_s;
    s->nsamples++;

    /* A window is complete a whole window after its start and after the last change. */
    double since = x->t_s - s->win.start_s;
    if (s->last_change_s >= 0 && x->t_s - s->last_change_s < since)
        since = x->t_s - s->last_change_s;
    if (since < p->window_s - TIME_EPS) {
        dbt_adapt_decision d = {.limit = s->limit};
        snprintf(d.reason, sizeof d.reason, "keep %d: gathering (%.1f of %.1f s)", s->limit, since,
                 p->window_s);
        return d;
    }
    window_summary m = summarize(s);
    verdict v = judge(s, p, &m);
    dbt_adapt_decision d = decide(s, p, &m, &v);
    if (d.change == 0) {
        int slots = (int)(sizeof s->cpu_past / sizeof *s->cpu_past);
        s->cpu_past[s->cpu_past_next].n = s->win.cpu_n;
        s->cpu_past[s->cpu_past_next].sum = s->win.cpu_sum;
        s->cpu_past[s->cpu_past_next].sq_sum = s->win.cpu_sq_sum;
        s->cpu_past_next = (s->cpu_past_next + 1) % slots;
        if (s->cpu_past_len < slots)
            s->cpu_past_len++;
    } else {
        s->cpu_past_len = s->cpu_past_next = 0;
    }
    if (d.change != 0) {
        s->good_limit = d.change > 0 ? s->limit : 0;
        s->ref_conc = m.conc;
        s->ref_xacts_per_s = m.xacts;
        s->ref_grants_per_s = m.grants;
    }
    update_baseline(s, &m, &v, mean_or_unknown(s->win.xacts_sum, s->win.xacts_s));
    window_start(&s->win, x->t_s);
    if (d.change != 0) {
        s->limit = d.limit;
        s->last_change_s = x->t_s;
    }
    return d;
}
