/* hist_cost.c - the histograms' cost in Redis script CPU, measured in one run.
 *
 * The "without" scripts are the compiled-in acquire.lua and release.lua with the recording
 * functions of lua/_common.lua (observe, observe_hold) returning at once, and release.lua's read
 * of the permit's info that only feeds observe_hold dropped: the scripts as they would be
 * without histograms, everything else the same text. Both variants are sent by EVALSHA with the
 * keys and arguments the library builds (dbt_build_acquire, dbt_build_release) on one
 * connection, in rounds that take turns, so that the machine's noise falls on both alike; Redis'
 * own per-command time (INFO commandstats) is immune to the client's scheduling. */
#include "hist_cost.h"

#include "route.h"
#include "script_protocol.h"
#include "sem_client.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Many short rounds rather than a few long ones: a burst of another process' load then spoils a
 * few rounds of either variant, which the medians leave out, rather than a large part of one. */
enum { ROUNDS = 40, CYCLES = 200 };

/* The texts that make the recording a no-op. Each must be found in the script it applies to,
 * or the bench says it cannot measure rather than measure something else. */
typedef struct {
    const char *from, *to;
} edit;

static const edit common_edits[] = {
    {"local function observe(s, series, klass, ms)\n",
     "local function observe(s, series, klass, ms)\n    do return end\n"},
    {"local function observe_hold(s, info, now)\n",
     "local function observe_hold(s, info, now)\n    do return end\n"},
};
static const edit release_edits[] = {
    {"observe_hold(S, redis.call('HGET', S.INFO, ARG.id), now)", "observe_hold(S, nil, now)"},
};

/* text with its first `from` replaced by `to` (malloc'd), or NULL when from is absent. */
static char *replaced(const char *text, const edit *e)
{
    const char *at = strstr(text, e->from);
    if (!at)
        return NULL;
    size_t head = (size_t)(at - text), from = strlen(e->from), to = strlen(e->to);
    char *out = malloc(strlen(text) - from + to + 1);
    memcpy(out, text, head);
    memcpy(out + head, e->to, to);
    strcpy(out + head + to, at + from);
    return out;
}

/* A variant of s: its body edited, loaded by SCRIPT LOAD (its SHA1 is the server's answer). */
typedef struct {
    dbt_script script;
    char *body;
    char sha[41];
} variant;

static bool make_variant(dbt_redis *rc, const dbt_script *s, const edit *own, int nown, variant *v)
{
    char *body = strdup(s->body), err[DBT_ERRLEN];
    for (int i = 0; body && i < 2 + nown; i++) {
        char *next = replaced(body, i < 2 ? &common_edits[i] : &own[i - 2]);
        free(body);
        body = next;
    }
    if (!body)
        return false;
    const char *argv[] = {"SCRIPT", "LOAD", body};
    size_t lens[] = {6, 4, strlen(body)};
    redisReply *rep = dbt_redis_command(rc, 3, argv, lens, err);
    if (!rep || rep->type != REDIS_REPLY_STRING || rep->len != 40) {
        freeReplyObject(rep);
        free(body);
        return false;
    }
    memcpy(v->sha, rep->str, 41);
    freeReplyObject(rep);
    v->body = body;
    v->script = (dbt_script){s->name, body, strlen(body), v->sha};
    return true;
}

/* Sends call c as script s on rc; false unless Redis answered as parse expects. */
static bool run(dbt_redis *rc, const dbt_script *s, dbt_script_call *c, dbt_reply_parser parse,
                void *out)
{
    char err[DBT_ERRLEN];
    dbt_script_bind_era(c, rc->run_id, rc->started_ms);
    redisReply *rep = dbt_redis_eval(rc, s, c->nkeys, c->keys, c->nargs, c->args, err);
    bool ok = rep && parse(rep, out, err);
    freeReplyObject(rep);
    return ok;
}

/* One round: CYCLES uncontended acquire+release with the given scripts; Redis' script CPU per
 * cycle (us), or -1 when a call failed. */
static double round_us(const test_redis *r, dbt_redis *rc, const dbt_keys *k, const dbt_config *cfg,
                       const dbt_script *acquire, const dbt_script *release, const char *session)
{
    static long serial;
    long long usec0 = test_redis_script_usec(r);
    for (int i = 0; i < CYCLES; i++) {
        char id[48];
        snprintf(id, sizeof id, "bench-hist:%ld", ++serial);
        dbt_acquire_call a = {.id = id, .limit = 4, .who = "bench 1 -", .session = session};
        dbt_script_call c;
        dbt_acquire_reply granted;
        dbt_build_acquire(&c, k, DBT_KIND_QUERY, cfg, &a);
        if (!run(rc, acquire, &c, dbt_parse_acquire, &granted) ||
            granted.status != DBT_ACQUIRE_GRANTED)
            return -1;
        bool held;
        dbt_build_release(&c, k, DBT_KIND_QUERY, cfg, id);
        if (!run(rc, release, &c, dbt_parse_release, &held) || !held)
            return -1;
    }
    return (double)(test_redis_script_usec(r) - usec0) / CYCLES;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void hist_cost_report(const test_redis *r)
{
    const char *what = "Redis script CPU, histograms' cost";
    dbt_config cfg;
    test_config(&cfg, r, NULL);
    char err[DBT_ERRLEN], session[DBT_SESSION_LEN];
    dbt_format_session(123456, "report_worker", "reports", "reports_db", session, sizeof session);
    dbt_keys k = {0};
    dbt_redis *rc = dbt_redis_connect(&cfg, err);
    variant acq = {0}, rel = {0};
    bool have_keys = rc && dbt_keys_init(&k, cfg.key_prefix, "bench-hist"), ready = have_keys;
    if (ready && (!make_variant(rc, &dbt_script_acquire, NULL, 0, &acq) ||
                  !make_variant(rc, &dbt_script_release, release_edits, 1, &rel))) {
        printf("%-52s %10s\n", what, "(scripts changed: cannot build the variant)");
        ready = false;
    }
    double with[ROUNDS], without[ROUNDS], ratio[ROUNDS];
    /* a warm-up round of each, then rounds in turns: with, without, without, with, ... */
    ready = ready &&
            round_us(r, rc, &k, &cfg, &dbt_script_acquire, &dbt_script_release, session) >= 0 &&
            round_us(r, rc, &k, &cfg, &acq.script, &rel.script, session) >= 0;
    for (int i = 0; ready && i < ROUNDS; i++) {
        bool with_first = i % 2 == 0;
        for (int turn = 0; ready && turn < 2; turn++) {
            bool hist = (turn == 0) == with_first;
            double us =
                hist ? round_us(r, rc, &k, &cfg, &dbt_script_acquire, &dbt_script_release, session)
                     : round_us(r, rc, &k, &cfg, &acq.script, &rel.script, session);
            ready = us >= 0;
            *(hist ? &with[i] : &without[i]) = us;
        }
        if (ready)
            ratio[i] = with[i] / without[i];
    }
    if (ready) {
        double w = median(with, ROUNDS), wo = median(without, ROUNDS);
        double mid = median(ratio, ROUNDS); /* sorts ratio: its quartiles are then at hand */
        printf("%-52s %10.2f us (median of %d rounds of %d)\n",
               "Redis script CPU per acq+rel, with histograms", w, ROUNDS, CYCLES);
        printf("%-52s %10.2f us\n", "Redis script CPU per acq+rel, without histograms", wo);
        printf("%-52s %10.3f (target <= 1.10)\n", "histograms' cost: with / without (medians)",
               w / wo);
        printf("%-52s %10.3f (quartiles %.3f-%.3f)\n", "  same, median of the rounds' ratios", mid,
               ratio[ROUNDS / 4], ratio[ROUNDS - 1 - ROUNDS / 4]);
    } else if (rc && acq.body) {
        printf("%-52s %10s\n", what, "(a script call failed)");
    }
    if (!rc)
        printf("%-52s %10s (%s)\n", what, "(no connection)", err);
    free(acq.body);
    free(rel.body);
    if (have_keys)
        dbt_keys_free(&k);
    dbt_redis_free(rc);
    dbt_config_free(&cfg);
}
