/* cmd_report.c - dbthrottle report: what candidate limits would have cost, replayed from shadow
 * mode's command sample (docs/design.md, "The command sample"; the replay: replay.c). */
#include "adapt_log.h"
#include "cli.h"
#include "replay.h"
#include "report_svg.h"
#include "route.h"
#include "sample_clock.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char usage[] =
    "usage: dbthrottle report POOL [--limits N,N,...] [--since DURATION] [--wait-timeout D]\n"
    "                         [--connections] [--json] [--svg FILE] [--adapt-log FILE]\n"
    "                         [--redis URL] [--key-prefix P]\n"
    "\n"
    "Replays the commands a pool's workers ran in shadow mode (DBTHROTTLE_MODE=shadow, or\n"
    "dbthrottle mode POOL shadow), or enforced with DBTHROTTLE_SAMPLE=always (or dbthrottle\n"
    "set POOL sample always), as Redis sampled them, through the admission rule at\n"
    "each candidate limit: first come first served, weights as units, the wait timeout; each\n"
    "connection asks its next command after the pause it really had. Prints per limit the\n"
    "commands that would have waited, the wait the limit adds (p50, p99, max, over every\n"
    "command), the refusals at the wait timeout and the concurrency the server would have\n"
    "seen; and the concurrency the fleet really had. With classes, by the pool's definitions\n"
    "in force now (guarantees, priority, aging, each class's queue cap and wait), with a row\n"
    "per class. Commands sampled enforced: their measured wait, and how much of it was the\n"
    "limit's own (queued behind it) rather than the acquires' own time.\n"
    "\n"
    "  --limits N,...      the limits to try (default: a quarter, a half, three quarters and\n"
    "                      all of the peak the sample shows; with commands sampled enforced,\n"
    "                      also the limit in force and twice it)\n"
    "  --since D           only the commands of the last D (default: all the sample keeps,\n"
    "                      at most 1h and 100000 commands)\n"
    "  --wait-timeout D    the wait after which a command is refused, or forever (default:\n"
    "                      the wait_timeout in force in most of the pool's processes, else its\n"
    "                      live value, else that of the settings this command reads)\n"
    "  --connections       the connection permits' sample instead of the queries'\n"
    "  --json              one JSON object (with the concurrency per minute)\n"
    "  --svg FILE          also draw it into FILE: each limit's wait p99 and refusals, and the\n"
    "                      concurrency over time with the limits across it\n"
    "  --adapt-log FILE    the adaptive controller's limit changes of this pool, as dbthrottle\n"
    "                      adapt logged them (--dry-run's too: adapt ... 2>FILE): its limit over\n"
    "                      time replayed as one more row (adapt), and drawn on the chart\n"
    "  --redis URL         Redis to read (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P      key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n"
    "\n"
    "Exit 2 on bad input: a limit not a whole number in range, a --since beyond what the\n"
    "sample keeps, a pool with no sample yet.\n";

#define MAX_LIMITS 16

enum {
    OPT_LIMITS = 1,
    OPT_SINCE,
    OPT_WAIT_TIMEOUT,
    OPT_CONNECTIONS,
    OPT_JSON,
    OPT_SVG,
    OPT_ADAPT_LOG
};

/* The sample as read: its holds, and what it says of itself. */
typedef struct {
    dbt_replay_hold *holds;
    size_t n, cap;
    long long unrecorded;   /* holds processes could not keep (their members' "dropped") */
    long long would_wait;   /* holds enforcing at the pool's limit then would have queued */
    long long would_refuse; /* ... or refused */
    int64_t oldest_us;      /* the oldest member's arrival (Redis' clock); 0 none */
    int64_t now_us;         /* Redis' clock as it was read */
    int connections, processes;
    /* The class names the holds' lines give, each once ("" untagged, "-" the default class's
     * tag): a hold's klass is an index into it until map_classes makes it one of the run's. */
    char (*names)[DBT_CLASS_NAME_MAX + 1];
    int nnames;
    /* With classes defined: the holds whose line names a class no definition has (served as
     * the default), and the first of those names, as text shows them */
    long long undefined;
    char undefined_names[128]; /* The holds sampled enforced (DBTHROTTLE_SAMPLE=always): their waits
                                * as measured, split into the queueing and the acquires' own round
                                * trips (sum_enforced). */
    struct {
        long long commands, queued, local; /* local: granted on the host, no Redis */
        int64_t acquire_us; /* an acquire's own time (to a grant or a place in a queue): the
                             * median of those not granted on the host */
        int64_t wait_total_us, queued_total_us;
        int64_t wait_p50_us, wait_p99_us, wait_max_us;
    } enforced;
} sample;

/* The sample is read a page at a time, by score (each member's is its own, above the one before:
 * sample.lua), so that a report never holds Redis for the whole sample at once and a member
 * trimmed meanwhile shifts nothing: a page is at most PAGE chunks of DBT_SAMPLE_CHUNK holds. */
#define PAGE 64

typedef struct {
    const char *key;
    int64_t since_us; /* -1: all */
    int64_t now_us;
    long long card;    /* the sample's members */
    long long carried; /* the holds the sample carries (as sample.lua counts them) */
    char after[32];    /* the last score read ("" none yet) */
    bool started;
} read_op;

static int64_t time_of(const redisReply *t)
{
    if (!t || t->type != REDIS_REPLY_ARRAY || t->elements != 2)
        return 0;
    return strtoll(t->element[0]->str, NULL, 10) * 1000000 + strtoll(t->element[1]->str, NULL, 10);
}

/* A member's head (lua/protocol/sample.def): what it counts toward the cap and the running total
 * up to it, as sample.lua reads them. False when it has none. */
static bool member_head(const redisReply *m, long long *carried, long long *total)
{
    long long holds, dropped;
    if (!m || m->type != REDIS_REPLY_STRING)
        return false;
    const char *sp = strchr(m->str, ' ');
    if (!sp || sscanf(sp + 1, "%lld %lld %lld", &holds, &dropped, total) != 3)
        return false;
    *carried = holds > 1 ? holds : 1;
    return true;
}

/* How many holds the sample carries, from its oldest and newest members (ZRANGE 0 0 and -1 -1),
 * as sample.lua counts them. */
static bool read_extent(dbt_redis *r, read_op *o, char *err)
{
    const char *first_argv[] = {"ZRANGE", o->key, "0", "0"};
    const char *last_argv[] = {"ZRANGE", o->key, "-1", "-1"};
    redisReply *a = dbt_redis_command(r, 4, first_argv, NULL, err);
    if (!a)
        return false;
    redisReply *b = dbt_redis_command(r, 4, last_argv, NULL, err);
    if (!b) {
        freeReplyObject(a);
        return false;
    }
    long long c, from, unused, to;
    if (a->type == REDIS_REPLY_ARRAY && a->elements == 1 && b->type == REDIS_REPLY_ARRAY &&
        b->elements == 1 && member_head(a->element[0], &c, &from) &&
        member_head(b->element[0], &unused, &to))
        o->carried = to - from + c;
    freeReplyObject(a);
    freeReplyObject(b);
    return true;
}

/* The first call: TIME, ZCARD and the sample's extent; each call, one page of members,
 * WITHSCORES: from --since's cut (a member scored before it holds only older holds), then after
 * the last score read. On the pool's server. */
static redisReply *read_page_op(dbt_redis *r, void *arg, char *err)
{
    read_op *o = arg;
    if (!o->started) {
        const char *time_argv[] = {"TIME"};
        redisReply *t = dbt_redis_command(r, 1, time_argv, NULL, err);
        if (!t)
            return NULL;
        o->now_us = time_of(t);
        freeReplyObject(t);
        const char *card_argv[] = {"ZCARD", o->key};
        redisReply *c = dbt_redis_command(r, 2, card_argv, NULL, err);
        if (!c)
            return NULL;
        o->card = c->type == REDIS_REPLY_INTEGER ? c->integer : 0;
        freeReplyObject(c);
        if (o->card > 0 && !read_extent(r, o, err))
            return NULL;
        o->started = true;
    }
    char min[40];
    if (o->after[0])
        snprintf(min, sizeof min, "(%s", o->after);
    else if (o->since_us >= 0)
        snprintf(min, sizeof min, "%" PRId64, o->now_us - o->since_us);
    else
        snprintf(min, sizeof min, "-inf");
    char count[16];
    snprintf(count, sizeof count, "%d", PAGE);
    const char *argv[] = {"ZRANGEBYSCORE", o->key, min, "+inf", "WITHSCORES", "LIMIT", "0", count};
    return dbt_redis_command(r, 8, argv, NULL, err);
}

/* A 64-bit FNV-1a, to tell connections and processes apart. */
static uint64_t fnv(const char *s, size_t n, uint64_t h)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(1099511628211);
    }
    return h;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* The index of v among the sorted distinct values u[0..n). */
static int index_of(const uint64_t *u, size_t n, uint64_t v)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (u[mid] < v)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (int)lo;
}

static size_t distinct(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_u64);
    size_t m = 0;
    for (size_t i = 0; i < n; i++)
        if (m == 0 || v[m - 1] != v[i])
            v[m++] = v[i];
    return m;
}

/* The members read so far, and each hold's connection and process (hashed) until
 * finish_sample numbers them. */
typedef struct {
    uint64_t *conn_of, *proc_of;
    uint8_t *would_of;        /* its line's <would> (dbt_sample_would) */
    size_t *chunk_of;         /* its member: an index into chunks */
    dbt_sample_chunk *chunks; /* each member read, for place_chunks */
    size_t nchunks, chunks_cap;
} keys_of;

/* Room for one more hold in s and ko. False when out of memory. */
static bool grow(sample *s, keys_of *ko)
{
    if (s->n < s->cap)
        return true;
    size_t cap = s->cap ? 2 * s->cap : 4096;
    dbt_replay_hold *h = realloc(s->holds, cap * sizeof *h);
    if (h)
        s->holds = h;
    uint64_t *c = realloc(ko->conn_of, cap * sizeof *c);
    if (c)
        ko->conn_of = c;
    uint64_t *q = realloc(ko->proc_of, cap * sizeof *q);
    if (q)
        ko->proc_of = q;
    uint8_t *w = realloc(ko->would_of, cap * sizeof *w);
    if (w)
        ko->would_of = w;
    size_t *m = realloc(ko->chunk_of, cap * sizeof *m);
    if (m)
        ko->chunk_of = m;
    if (!h || !c || !q || !w || !m)
        return false;
    s->cap = cap;
    return true;
}

/* The index of class name in s->names, added if new; -1 when out of memory. */
static int name_index(sample *s, const char *name)
{
    for (int i = 0; i < s->nnames; i++)
        if (strcmp(s->names[i], name) == 0)
            return i;
    void *grown = realloc(s->names, (size_t)(s->nnames + 1) * sizeof *s->names);
    if (!grown)
        return -1;
    s->names = grown;
    snprintf(s->names[s->nnames], sizeof s->names[0], "%s", name);
    return s->nnames++;
}

/* Appends one member's holds to s: those that arrived at cut_us or after (-1: all). A member is
 * a chunk of one process' holds, "<cid>.<first> <holds> <dropped> <total>\n" then a line per
 * hold (lua/protocol/sample.def), scored by its call's time (us, Redis' clock): a hold arrived
 * its "ago" before. False (err set) on a member this version cannot read, or out of memory. */
static bool parse_member(const char *m, int64_t called_us, int64_t cut_us, sample *s, keys_of *ko,
                         char *err)
{
    const char *sp = strchr(m, ' ');
    const char *dot = sp ? memchr(m, '.', (size_t)(sp - m)) : NULL;
    long long nholds, dropped, total;
    int used = 0;
    if (!sp || !dot || sscanf(sp + 1, "%lld %lld %lld%n", &nholds, &dropped, &total, &used) != 3 ||
        sp[1 + used] != '\n' || nholds < 0 || dropped < 0)
        return snprintf(err, DBT_ERRLEN, "a sample member this version cannot read: \"%.60s\"", m),
               false;
    s->unrecorded += dropped;
    uint64_t proc = fnv(m, (size_t)(dot - m), UINT64_C(14695981039346656037));
    /* "<cid>.<first>.<built>.<clock>": the process' monotonic clock as it built the chunk, and
     * its kernel's boot id hashed, "" unknown (sample.def; before 0.16, "<cid>.<first>") */
    const char *dot2 = memchr(dot + 1, '.', (size_t)(sp - dot - 1));
    const char *dot3 = dot2 ? memchr(dot2 + 1, '.', (size_t)(sp - dot2 - 1)) : NULL;
    char *end = NULL;
    long long built = dot3 ? strtoll(dot2 + 1, &end, 10) : -1;
    if (!dot3 || end != dot3 || built < 0)
        built = -1;
    uint64_t clock = 0;
    if (built >= 0 && dot3 + 1 < sp) {
        clock = strtoull(dot3 + 1, &end, 16);
        if (end != sp) /* not this version's: placed as it stands */
            built = -1, clock = 0;
    }
    if (ko->nchunks == ko->chunks_cap) {
        size_t cap = ko->chunks_cap ? 2 * ko->chunks_cap : 1024;
        dbt_sample_chunk *grown = realloc(ko->chunks, cap * sizeof *grown);
        if (!grown)
            return snprintf(err, DBT_ERRLEN, "out of memory"), false;
        ko->chunks = grown;
        ko->chunks_cap = cap;
    }
    size_t chunk = ko->nchunks++;
    ko->chunks[chunk] =
        (dbt_sample_chunk){.proc = proc, .clock = clock, .called_us = called_us, .built_us = built};
    const char *line = sp + 1 + used + 1;
    for (long long i = 0; i < nholds; i++) {
        /* each line on its own: a conversion must not run on into the next */
        const char *eol = strchr(line, '\n');
        char one[256];
        size_t len = eol ? (size_t)(eol - line) : 0;
        if (eol && len < sizeof one) {
            memcpy(one, line, len);
            one[len] = '\0';
        }
        long long ago, wait = -1, queued = 0, hold;
        char conn[32], wait_text[48], klass_name[DBT_CLASS_NAME_MAX + 1] = "";
        int weight, would;
        int got = eol && len < sizeof one
                      ? sscanf(one, "%lld %31s %47s %lld %d %d %32s", &ago, conn, wait_text, &hold,
                               &weight, &would, klass_name)
                      : 0;
        /* the wait: "<us>", or a queued hold's "<acquire us>:<queued us>", digits only */
        if (got >= 6 && wait_text[0] >= '0' && wait_text[0] <= '9') {
            char *stop = NULL;
            wait = strtoll(wait_text, &stop, 10);
            if (*stop == ':' && would == DBT_SAMPLE_QUEUED && stop[1] >= '0' && stop[1] <= '9')
                queued = strtoll(stop + 1, &stop, 10);
            if (*stop)
                wait = -1;
        }
        if (got < 6 || ago < 0 || wait < 0 || hold < 0 || weight < 1 || would < DBT_SAMPLE_RAN ||
            would > DBT_SAMPLE_LOCAL)
            return snprintf(err, DBT_ERRLEN, "a sample line this version cannot read: \"%.60s\"",
                            line),
                   false;
        line = eol + 1;
        int64_t arrival = called_us - ago;
        if (cut_us >= 0 && arrival < cut_us)
            continue;
        int klass = name_index(s, got == 7 ? klass_name : "");
        if (klass < 0 || !grow(s, ko))
            return snprintf(err, DBT_ERRLEN, "out of memory"), false;
        if (s->oldest_us == 0 || arrival < s->oldest_us)
            s->oldest_us = arrival;
        s->holds[s->n] = (dbt_replay_hold){.arrival_us = arrival,
                                           .queued_us = queued,
                                           .wait_us = wait,
                                           .hold_us = hold,
                                           .weight = weight,
                                           .klass = klass};
        ko->conn_of[s->n] = fnv(conn, strlen(conn), proc);
        ko->proc_of[s->n] = proc;
        ko->would_of[s->n] = (uint8_t)would;
        ko->chunk_of[s->n] = chunk;
        s->n++;
        s->would_wait += would == DBT_SAMPLE_WOULD_WAIT;
        s->would_refuse += would == DBT_SAMPLE_WOULD_REFUSE;
    }
    return true;
}

/* Appends the members of one page (ZRANGE WITHSCORES) to s. False (err set) as parse_member. */
static bool parse_page(const redisReply *rep, int64_t cut_us, sample *s, keys_of *ko, char *err)
{
    if (rep->type != REDIS_REPLY_ARRAY)
        return snprintf(err, DBT_ERRLEN, "unexpected reply to ZRANGE"), false;
    for (size_t i = 0; i + 1 < rep->elements; i += 2) {
        const redisReply *m = rep->element[i], *score = rep->element[i + 1];
        if (m->type != REDIS_REPLY_STRING || score->type != REDIS_REPLY_STRING)
            continue;
        if (!parse_member(m->str, strtoll(score->str, NULL, 10), cut_us, s, ko, err))
            return false;
    }
    return true;
}

/* Each member's holds moved earlier by how much later it stands than the least late member on
 * its clock (sample_clock.h): a process' holds, and its host's, then stand on Redis' clock by
 * one delay. Without memory for it, left as they are (each a delay late, as before). */
static void place_chunks(sample *s, const keys_of *ko)
{
    int64_t *late = malloc((ko->nchunks ? ko->nchunks : 1) * sizeof *late);
    if (late && dbt_sample_clock_place(ko->chunks, ko->nchunks, late))
        for (size_t i = 0; i < s->n; i++) {
            s->holds[i].arrival_us -= late[ko->chunk_of[i]];
            if (s->holds[i].arrival_us < s->oldest_us) /* (the oldest as placed) */
                s->oldest_us = s->holds[i].arrival_us;
        }
    free(late);
}

/* Numbers the holds' connections (the replay's index) and counts them and the processes. False
 * when out of memory. */
static bool finish_sample(sample *s, keys_of *ko)
{
    uint64_t *conns = malloc((s->n ? s->n : 1) * sizeof *conns);
    if (!conns)
        return false;
    memcpy(conns, ko->conn_of, s->n * sizeof *conns);
    size_t nconn = distinct(conns, s->n);
    for (size_t i = 0; i < s->n; i++)
        s->holds[i].conn = index_of(conns, nconn, ko->conn_of[i]);
    s->connections = (int)nconn;
    s->processes = (int)distinct(ko->proc_of, s->n);
    free(conns);
    return true;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* The p-th percentile (0-100) of v[0..n), sorted; 0 when empty (the replay's rule: the value at
 * or below which p percent of them are). */
static int64_t percentile(const int64_t *v, size_t n, int p)
{
    if (n == 0)
        return 0;
    size_t i = (n * (size_t)p + 99) / 100;
    return v[i > 0 ? i - 1 : 0];
}

/* What the holds sampled enforced say (s->enforced): their waits as measured, the part of them
 * that was queueing (each queued hold's line says it: parse_member put it in queued_us), and the
 * acquires' own time (the rest: to a grant, or to a place in Redis' queue or the host's; its
 * median over those not granted on the host). False when out of memory. */
static bool sum_enforced(sample *s, const keys_of *ko)
{
    int64_t *waits = malloc((s->n ? s->n : 1) * sizeof *waits);
    int64_t *trips = malloc((s->n ? s->n : 1) * sizeof *trips);
    if (!waits || !trips) {
        free(waits);
        free(trips);
        return false;
    }
    size_t n = 0, nt = 0;
    for (size_t i = 0; i < s->n; i++) {
        const dbt_replay_hold *h = &s->holds[i];
        uint8_t w = ko->would_of[i];
        if (w < DBT_SAMPLE_AT_ONCE)
            continue;
        waits[n++] = h->queued_us + h->wait_us;
        if (w == DBT_SAMPLE_AT_ONCE || w == DBT_SAMPLE_QUEUED)
            trips[nt++] = h->wait_us;
        s->enforced.queued += w == DBT_SAMPLE_QUEUED;
        s->enforced.local += w == DBT_SAMPLE_LOCAL;
        s->enforced.wait_total_us += h->queued_us + h->wait_us;
        s->enforced.queued_total_us += h->queued_us;
    }
    qsort(waits, n, sizeof *waits, cmp_i64);
    qsort(trips, nt, sizeof *trips, cmp_i64);
    s->enforced.commands = (long long)n;
    s->enforced.acquire_us = percentile(trips, nt, 50);
    s->enforced.wait_p50_us = percentile(waits, n, 50);
    s->enforced.wait_p99_us = percentile(waits, n, 99);
    s->enforced.wait_max_us = n ? waits[n - 1] : 0;
    free(waits);
    free(trips);
    return true;
}

/* "4,8,16" into limits; false (err set) on a bad one. */
static bool parse_limits(const char *text, int *limits, int *n, char *err)
{
    *n = 0;
    const char *p = text;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char one[32];
        if (len == 0 || len >= sizeof one)
            return snprintf(err, DBT_ERRLEN, "--limits: \"%.40s\" is not a list of whole numbers",
                            text),
                   false;
        memcpy(one, p, len);
        one[len] = '\0';
        if (*n == MAX_LIMITS)
            return snprintf(err, DBT_ERRLEN, "--limits: at most %d limits", MAX_LIMITS), false;
        if (!dbt_parse_limit("--limits", one, &limits[*n], err))
            return false;
        for (int i = 0; i < *n; i++)
            if (limits[i] == limits[*n])
                return snprintf(err, DBT_ERRLEN, "--limits: %d is given twice", limits[*n]), false;
        (*n)++;
        if (!comma)
            return true;
        p = comma + 1;
    }
}

/* The classes the pool's scripts serve a kind's commands by now (status.lua's view of the
 * definitions in force: the implicit default class among them when it is the default), as the
 * replay takes them; n 0 without definitions. */
typedef struct {
    dbt_replay_class v[DBT_REPLAY_MAX_CLASSES];
    char names[DBT_REPLAY_MAX_CLASSES][DBT_CLASS_NAME_MAX + 1];
    int n, deflt;
    bool shipped; /* a worker's DBTHROTTLE_CLASSES, not the operator's (dbthrottle class) */
    dbt_replay_classes run;
} report_classes;

_Static_assert(DBT_MAX_CLASSES + 1 <= DBT_REPLAY_MAX_CLASSES, "the replay serves every class");

static void classes_in_force(const dbt_status_kind *k, report_classes *rc)
{
    memset(rc, 0, sizeof *rc);
    rc->deflt = -1;
    for (int i = 0; i < k->nclasses && rc->n < DBT_REPLAY_MAX_CLASSES; i++) {
        const dbt_status_class *c = &k->classes[i];
        rc->v[rc->n] = (dbt_replay_class){.share = c->share,
                                          .priority = c->priority,
                                          .wait_us = c->wait_ms < 0 ? -1 : c->wait_ms * 1000,
                                          .cap = c->cap};
        snprintf(rc->names[rc->n], sizeof rc->names[0], "%s", c->name);
        if (c->is_default)
            rc->deflt = rc->n;
        rc->n++;
    }
    if (rc->n > 0 && rc->deflt < 0 && rc->n < DBT_REPLAY_MAX_CLASSES) {
        /* (status.lua always names the default; as _common.lua's implicit one if not) */
        rc->v[rc->n] = (dbt_replay_class){.share = 0, .priority = 0, .wait_us = -1, .cap = -1};
        snprintf(rc->names[rc->n], sizeof rc->names[0], "default");
        rc->deflt = rc->n++;
    }
    rc->shipped = k->classes_shipped;
    rc->run = (dbt_replay_classes){.v = rc->v, .n = rc->n, .aging_us = k->aging_ms * 1000};
}

/* Each hold's class, from an index into s->names to one into rc's classes, as _common.lua's
 * K.class_of serves its id: the class its tag names, else the default (untagged, "-", or a name
 * no definition has). */
static bool map_classes(sample *s, const report_classes *rc)
{
    int *to = malloc((size_t)(s->nnames > 0 ? s->nnames : 1) * sizeof *to);
    if (!to)
        return false;
    bool *undefined = calloc((size_t)(s->nnames > 0 ? s->nnames : 1), sizeof *undefined);
    if (!undefined) {
        free(to);
        return false;
    }
    size_t len = 0;
    for (int i = 0; i < s->nnames; i++) {
        to[i] = rc->deflt;
        for (int c = 0; c < rc->n; c++)
            if (strcmp(s->names[i], rc->names[c]) == 0)
                to[i] = c;
        /* (untagged, and "-", are the default's by definition) */
        undefined[i] = rc->n > 0 && to[i] == rc->deflt && s->names[i][0] &&
                       strcmp(s->names[i], "-") != 0 && strcmp(s->names[i], rc->names[rc->deflt]);
        if (undefined[i] && len + 1 < sizeof s->undefined_names) {
            char nm[80];
            cli_escape_name(s->names[i], 32, false, nm, sizeof nm);
            len += (size_t)snprintf(s->undefined_names + len, sizeof s->undefined_names - len,
                                    "%s%s", len ? ", " : "", nm);
        }
    }
    for (size_t i = 0; i < s->n; i++) {
        s->undefined += undefined[s->holds[i].klass];
        s->holds[i].klass = to[s->holds[i].klass];
    }
    free(undefined);
    free(to);
    return true;
}

/* Whether some hold's line names a class. */
static bool sample_has_classes(const sample *s)
{
    for (int i = 0; i < s->nnames; i++)
        if (s->names[i][0])
            return true;
    return false;
}

static void fmt_ms(int64_t us, char *out, size_t cap)
{
    if (us < 10000)
        snprintf(out, cap, "%.1fms", (double)us / 1000.0);
    else if (us < 1000000)
        snprintf(out, cap, "%.0fms", (double)us / 1000.0);
    else
        cli_duration(us / 1000, out, cap);
}

/* --adapt-log: the adaptive controller's limit changes of this pool and kind, read from its log,
 * as a limit over time, and what that would have cost. */
typedef struct {
    const char *path;
    dbt_adapt_change *v;
    size_t n;
    dbt_replay_limit *schedule; /* n + 1: the limit before the first change, then each change */
    long long within;           /* changes within the sample's span */
    bool dry_run;               /* all of them a dry run's */
    dbt_replay_result result;
} adapt_read;

/* What the report prints: its sample, what it replayed it with, and the results. */
typedef struct {
    const char *pool, *name, *kind; /* name: the pool's as text shows it (escaped) */
    const sample *s;
    dbt_replay_concurrency seen;
    int64_t span_us;
    const dbt_replay_result *r;
    int nl;
    int64_t timeout_ms;
    const char *timeout_from;
    const report_classes *classes;
    const dbt_replay_bucket *minutes; /* --json's timeline */
    size_t nminutes;
    int64_t period_us;
    long long limit_now;     /* the pool's limit in force now (0: not known) */
    const adapt_read *adapt; /* --adapt-log's, NULL none */
} report_out;

static void text_waits(const char *first, long long commands, long long waited, int64_t p50_us,
                       int64_t p99_us, int64_t max_us, long long refused)
{
    char p50[16], p99[16], max[16], share[32];
    fmt_ms(p50_us, p50, sizeof p50);
    fmt_ms(p99_us, p99, sizeof p99);
    fmt_ms(max_us, max, sizeof max);
    snprintf(share, sizeof share, "%lld (%.1f%%)", waited,
             commands ? 100.0 * (double)waited / (double)commands : 0);
    printf("  %s  %16s  %9s  %9s  %9s  %8lld", first, share, p50, p99, max, refused);
}

/* What the holds sampled enforced (DBTHROTTLE_SAMPLE=always) say: their waits as measured, and
 * how much of them was the limit's own (queued behind it) against the acquires' own time. */
static void text_enforced(const report_out *o)
{
    const sample *s = o->s;
    if (s->enforced.commands == 0)
        return;
    char now[32] = "not known";
    if (o->limit_now > 0)
        snprintf(now, sizeof now, "%lld", o->limit_now);
    printf("  enforced: %lld, %lld of them queued (%.1f%%), %lld granted on their host with no "
           "Redis; the limit in force now: %s\n",
           s->enforced.commands, s->enforced.queued,
           100.0 * (double)s->enforced.queued / (double)s->enforced.commands, s->enforced.local,
           now);
    char p50[16], p99[16], max[16], all[32], queued[32], rt[16], trips[32];
    fmt_ms(s->enforced.wait_p50_us, p50, sizeof p50);
    fmt_ms(s->enforced.wait_p99_us, p99, sizeof p99);
    fmt_ms(s->enforced.wait_max_us, max, sizeof max);
    fmt_ms(s->enforced.wait_total_us, all, sizeof all);
    fmt_ms(s->enforced.queued_total_us, queued, sizeof queued);
    fmt_ms(s->enforced.wait_total_us - s->enforced.queued_total_us, trips, sizeof trips);
    if (s->enforced.acquire_us < 1000) /* (loopback: tens of microseconds) */
        snprintf(rt, sizeof rt, "%.2fms", (double)s->enforced.acquire_us / 1000.0);
    else
        fmt_ms(s->enforced.acquire_us, rt, sizeof rt);
    printf("    their wait as measured: p50 %s, p99 %s, max %s, %s in all\n", p50, p99, max, all);
    printf(
        "    of it the limit's own (queued behind it): %s (%.1f%%); the acquires' own (to a grant "
        "or a place in a queue): %s, a median %s\n",
        queued,
        s->enforced.wait_total_us
            ? 100.0 * (double)s->enforced.queued_total_us / (double)s->enforced.wait_total_us
            : 0.0,
        trips, rt);
    printf("    their holds ran under the limit: at a higher one the server would be busier and "
           "holds longer than replayed\n");
}

/* "HH:MM:SS.mmm" (UTC) of a time on Redis' clock (us since the epoch). */
static void fmt_time_of_day(int64_t us, char *out, size_t cap)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (!gmtime_r(&t, &tm)) {
        snprintf(out, cap, "?");
        return;
    }
    snprintf(out, cap, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
             (int)(us % 1000000 / 1000));
}

/* --adapt-log: the controller's row (its limits over time, replayed) under the table, and its
 * changes within the sample. */
static void text_adapt(const report_out *o)
{
    const adapt_read *a = o->adapt;
    if (!a)
        return;
    const dbt_replay_result *r = &a->result;
    text_waits("adapt", r->commands, r->waited, r->wait_p50_us, r->wait_p99_us, r->wait_max_us,
               r->refused);
    printf("  %11.1f  %7.0f%%\n", r->server.mean, 100.0 * r->server.at_limit_share);
    /* its limit as the sample begins: the last change before it, else the first one's from */
    int at_start = a->schedule[0].limit;
    for (size_t i = 0; i < a->n && a->v[i].at_us < o->s->oldest_us; i++)
        at_start = a->v[i].to;
    printf("\n  adapt: the adaptive controller's limits over time (%s, %s): %zu changes, %lld "
           "within the sample, which began at %d\n",
           a->path, a->dry_run ? "a dry run" : "set", a->n, a->within, at_start);
    int64_t end = o->s->oldest_us + o->span_us;
    int shown = 0;
    for (size_t i = 0; i < a->n; i++) {
        const dbt_adapt_change *c = &a->v[i];
        if (c->at_us < o->s->oldest_us || c->at_us > end)
            continue;
        if (shown++ == 8) {
            printf("    ... and %lld more within the sample\n", a->within - 8);
            break;
        }
        char at[32];
        fmt_time_of_day(c->at_us, at, sizeof at);
        printf("    %s  %d -> %d  %s\n", at, c->from, c->to, c->reason);
    }
    printf("    (the log's times are its host's clock, the sample's Redis': keep both in step, "
           "NTP)\n");
}

/* The classes line: what the replay served the holds by. */
static void text_classes(const report_out *o)
{
    const report_classes *c = o->classes;
    if (c->n == 0) {
        if (sample_has_classes(o->s))
            printf("  classes: the commands name classes, but the pool defines none now: "
                   "replayed as one queue, as its scripts serve them\n");
        return;
    }
    char aging[32] = "none";
    if (c->run.aging_us > 0)
        cli_duration(c->run.aging_us / 1000, aging, sizeof aging);
    printf("  classes in force now (%s; aging %s):",
           c->shipped ? "the workers' DBTHROTTLE_CLASSES" : "the operator's, dbthrottle class",
           aging);
    for (int i = 0; i < c->n; i++) {
        char nm[80];
        cli_escape_name(c->names[i], 32, false, nm, sizeof nm);
        printf("%s %s %d%% priority %d%s", i ? "," : "", nm, c->v[i].share, c->v[i].priority,
               i == c->deflt ? " (default)" : "");
    }
    printf("\n");
    if (o->s->undefined)
        printf("  %lld commands name classes the pool does not define now (%s): replayed as its "
               "default class, as its scripts serve them\n",
               o->s->undefined, o->s->undefined_names);
}

static void print_text(const report_out *o)
{
    const sample *s = o->s;
    char span[32], timeout[32];
    cli_duration(o->span_us / 1000, span, sizeof span);
    /* what a hold is: a command (or transaction), or a connection's life with --connections */
    const char *holds = strcmp(o->kind, "connection") == 0 ? "connections" : "commands";
    printf("pool %s %s: %zu %s sampled over %s, %d connection%s of %d process%s\n", o->name,
           o->kind, s->n, holds, span, s->connections, s->connections == 1 ? "" : "s", s->processes,
           s->processes == 1 ? "" : "es");
    if (s->unrecorded)
        printf("  not sampled: %lld %s (a process' buffer was full, or Redis did not "
               "answer): the waits below are low bounds\n",
               s->unrecorded, holds);
    printf(
        "  concurrency it had (units in use, time-weighted): mean %.1f, p50 %d, p99 %d, peak %d\n",
        o->seen.mean, o->seen.p50, o->seen.p99, o->seen.peak);
    if ((long long)s->n > s->enforced.commands)
        printf("  in shadow mode: %lld; at the pool's limit then, enforcing would have queued %lld "
               "and refused %lld\n",
               (long long)s->n - s->enforced.commands, s->would_wait, s->would_refuse);
    text_enforced(o);
    if (o->timeout_ms == DBT_FOREVER)
        snprintf(timeout, sizeof timeout, "none");
    else
        cli_duration(o->timeout_ms, timeout, sizeof timeout);
    printf("  wait timeout: %s (%s)\n", timeout, o->timeout_from);
    text_classes(o);
    printf("\n  %5s  %16s  %9s  %9s  %9s  %8s  %11s  %8s\n", "limit", "would wait", "wait p50",
           "wait p99", "wait max", "refused", "server mean", "at limit");
    for (int i = 0; i < o->nl; i++) {
        const dbt_replay_result *r = &o->r[i];
        char limit[16];
        snprintf(limit, sizeof limit, "%5d", r->limit);
        text_waits(limit, r->commands, r->waited, r->wait_p50_us, r->wait_p99_us, r->wait_max_us,
                   r->refused);
        printf("  %11.1f  %7.0f%%%s\n", r->server.mean, 100.0 * r->server.at_limit_share,
               s->enforced.commands && r->limit == o->limit_now ? "  (in force now)" : "");
    }
    text_adapt(o);
    if (o->classes->n == 0)
        return;
    printf("\n  %5s  %-16s  %16s  %9s  %9s  %9s  %8s\n", "limit", "class", "would wait", "wait p50",
           "wait p99", "wait max", "refused");
    for (int i = 0; i < o->nl; i++)
        for (int c = 0; c < o->r[i].nclasses; c++) {
            const dbt_replay_class_result *k = &o->r[i].klass[c];
            if (k->commands == 0)
                continue;
            char first[80], nm[64];
            cli_escape_name(o->classes->names[c], 32, false, nm, sizeof nm);
            snprintf(first, sizeof first, "%5d  %-16s", o->r[i].limit, nm);
            text_waits(first, k->commands, k->waited, k->wait_p50_us, k->wait_p99_us,
                       k->wait_max_us, k->refused);
            if (k->capped)
                printf("  (%lld at its queue cap)", k->capped);
            printf("\n");
        }
}

/* The concurrency over time, as --json gives it: the period (a minute, longer for a span over a
 * day), then each period's start (ms, Redis' clock), its time-weighted mean and its peak, in
 * units. */
static void print_timeline(const dbt_replay_bucket *b, size_t nb, int64_t period)
{
    printf(",\"timeline\":{\"period_ms\":%" PRId64 ",\"periods\":[", period / 1000);
    for (size_t i = 0; i < nb; i++)
        printf("%s{\"start_ms\":%" PRId64 ",\"mean\":%.3f,\"peak\":%d}", i ? "," : "",
               b[i].start_us / 1000, b[i].mean, b[i].peak);
    printf("]}");
}

static void json_classes(const report_out *o)
{
    const report_classes *c = o->classes;
    printf(",\"classes\":");
    if (c->n == 0) {
        printf("null");
        return;
    }
    printf("{\"from\":\"%s\",\"aging_ms\":%" PRId64 ",\"undefined_commands\":%lld,"
           "\"defined\":[",
           c->shipped ? "workers" : "operator", c->run.aging_us / 1000, o->s->undefined);
    for (int i = 0; i < c->n; i++) {
        printf("%s{\"class\":", i ? "," : "");
        cli_json_str(stdout, c->names[i]);
        printf(",\"share\":%d,\"priority\":%d,\"wait_ms\":%" PRId64 ",\"cap\":%lld,"
               "\"default\":%s}",
               c->v[i].share, c->v[i].priority, c->v[i].wait_us < 0 ? -1 : c->v[i].wait_us / 1000,
               c->v[i].cap, i == c->deflt ? "true" : "false");
    }
    printf("]}");
}

static void json_limit_classes(const report_out *o, const dbt_replay_result *r)
{
    if (o->classes->n == 0)
        return;
    printf(",\"classes\":[");
    for (int c = 0; c < r->nclasses; c++) {
        const dbt_replay_class_result *k = &r->klass[c];
        printf("%s{\"class\":", c ? "," : "");
        cli_json_str(stdout, o->classes->names[c]);
        printf(",\"commands\":%lld,\"waited\":%lld,\"waited_share\":%.4f,\"wait_mean_ms\":%.3f,"
               "\"wait_p50_ms\":%.3f,\"wait_p99_ms\":%.3f,\"wait_max_ms\":%.3f,\"refused\":%lld,"
               "\"capped\":%lld}",
               k->commands, k->waited, k->commands ? (double)k->waited / (double)k->commands : 0,
               k->wait_mean_us / 1000.0, (double)k->wait_p50_us / 1000.0,
               (double)k->wait_p99_us / 1000.0, (double)k->wait_max_us / 1000.0, k->refused,
               k->capped);
    }
    printf("]");
}

/* --adapt-log's member: null, or the changes read, and what that limit over time would have
 * cost (as a limit's). */
static void json_adapt(const report_out *o)
{
    const adapt_read *a = o->adapt;
    printf(",\"adapt\":");
    if (!a) {
        printf("null");
        return;
    }
    printf("{\"file\":");
    cli_json_str(stdout, a->path);
    printf(",\"first_limit\":%d,\"within\":%lld,\"changes\":[", a->schedule[0].limit, a->within);
    for (size_t i = 0; i < a->n; i++) {
        const dbt_adapt_change *c = &a->v[i];
        printf("%s{\"at_ms\":%" PRId64 ",\"from\":%d,\"to\":%d,\"dry_run\":%s,\"reason\":",
               i ? "," : "", c->at_us / 1000, c->from, c->to, c->dry_run ? "true" : "false");
        cli_json_str(stdout, c->reason);
        printf("}");
    }
    const dbt_replay_result *r = &a->result;
    printf("],\"commands\":%lld,\"waited\":%lld,\"waited_share\":%.4f,\"wait_mean_ms\":%.3f,"
           "\"wait_p50_ms\":%.3f,\"wait_p99_ms\":%.3f,\"wait_max_ms\":%.3f,\"refused\":%lld,"
           "\"server\":{\"mean\":%.3f,\"p50\":%d,\"p99\":%d,\"peak\":%d,\"at_limit_share\":%.4f}",
           r->commands, r->waited, r->commands ? (double)r->waited / (double)r->commands : 0,
           r->wait_mean_us / 1000.0, (double)r->wait_p50_us / 1000.0,
           (double)r->wait_p99_us / 1000.0, (double)r->wait_max_us / 1000.0, r->refused,
           r->server.mean, r->server.p50, r->server.p99, r->server.peak, r->server.at_limit_share);
    json_limit_classes(o, r);
    printf("}");
}

static void print_json(const report_out *o)
{
    const sample *s = o->s;
    printf("{\"pool\":");
    cli_json_str(stdout, o->pool);
    printf(",\"kind\":\"%s\",\"commands\":%zu,\"span_ms\":%.3f,\"connections\":%d,"
           "\"processes\":%d,\"not_sampled\":%lld,\"classes_replayed_as_one_queue\":%s,"
           "\"would_wait\":%lld,\"would_refuse\":%lld,\"wait_timeout_ms\":%" PRId64 ","
           "\"observed\":{\"mean\":%.3f,\"p50\":%d,\"p99\":%d,\"peak\":%d}",
           o->kind, s->n, (double)o->span_us / 1000.0, s->connections, s->processes, s->unrecorded,
           o->classes->n == 0 && sample_has_classes(s) ? "true" : "false", s->would_wait,
           s->would_refuse, o->timeout_ms, o->seen.mean, o->seen.p50, o->seen.p99, o->seen.peak);
    printf(",\"limit_now\":%lld,\"enforced\":", o->limit_now);
    if (s->enforced.commands == 0)
        printf("null");
    else
        printf("{\"commands\":%lld,\"queued\":%lld,\"local\":%lld,\"wait_p50_ms\":%.3f,"
               "\"wait_p99_ms\":%.3f,"
               "\"wait_max_ms\":%.3f,\"wait_total_ms\":%.3f,\"queued_total_ms\":%.3f,"
               "\"acquire_ms\":%.3f}",
               s->enforced.commands, s->enforced.queued, s->enforced.local,
               (double)s->enforced.wait_p50_us / 1000.0, (double)s->enforced.wait_p99_us / 1000.0,
               (double)s->enforced.wait_max_us / 1000.0, (double)s->enforced.wait_total_us / 1000.0,
               (double)s->enforced.queued_total_us / 1000.0,
               (double)s->enforced.acquire_us / 1000.0);
    json_classes(o);
    printf(",\"limits\":[");
    for (int i = 0; i < o->nl; i++) {
        const dbt_replay_result *r = &o->r[i];
        printf(
            "%s{\"limit\":%d,\"commands\":%lld,\"waited\":%lld,\"waited_share\":%.4f,"
            "\"wait_mean_ms\":%.3f,\"wait_p50_ms\":%.3f,\"wait_p99_ms\":%.3f,\"wait_max_ms\":%.3f,"
            "\"refused\":%lld,"
            "\"server\":{\"mean\":%.3f,\"p50\":%d,\"p99\":%d,\"peak\":%d,"
            "\"at_limit_share\":%.4f}",
            i ? "," : "", r->limit, r->commands, r->waited,
            r->commands ? (double)r->waited / (double)r->commands : 0, r->wait_mean_us / 1000.0,
            (double)r->wait_p50_us / 1000.0, (double)r->wait_p99_us / 1000.0,
            (double)r->wait_max_us / 1000.0, r->refused, r->server.mean, r->server.p50,
            r->server.p99, r->server.peak, r->server.at_limit_share);
        json_limit_classes(o, r);
        printf("}");
    }
    printf("]");
    json_adapt(o);
    print_timeline(o->minutes, o->nminutes, o->period_us);
    printf("}\n");
}

static int by_time(const void *a, const void *b)
{
    const dbt_adapt_change *x = a, *y = b;
    return (x->at_us > y->at_us) - (x->at_us < y->at_us);
}

/* Reads a->path's adapt_change lines of pool (named as dbthrottle adapt logs it) and kind into
 * a, with its schedule: before the first change the limit that change was from (or, unknown to
 * the controller, the limit in force now, else the first change's). -1 when read, else the exit
 * status (said). */
static int read_adapt_log(const char *pool, const char *kind, long long limit_now, adapt_read *a)
{
    FILE *f = fopen(a->path, "re");
    if (!f) {
        fprintf(stderr, "dbthrottle report: --adapt-log %s: %s\n", a->path, strerror(errno));
        return EXIT_USAGE;
    }
    char *line = NULL;
    size_t cap = 0, room = 0;
    int rc = -1;
    a->dry_run = true;
    while (rc < 0 && getline(&line, &cap, f) >= 0) {
        dbt_adapt_change c;
        if (!dbt_adapt_log_change(line, pool, kind, &c))
            continue;
        if (a->n == room) {
            room = room ? 2 * room : 64;
            dbt_adapt_change *grown = realloc(a->v, room * sizeof *grown);
            if (!grown) {
                rc = cli_fail("report", "out of memory");
                break;
            }
            a->v = grown;
        }
        a->v[a->n++] = c;
        a->dry_run = a->dry_run && c.dry_run;
    }
    bool failed = ferror(f);
    fclose(f);
    free(line);
    if (rc >= 0)
        return rc;
    if (failed) {
        fprintf(stderr, "dbthrottle report: --adapt-log %s: cannot read it\n", a->path);
        return EXIT_USAGE;
    }
    if (a->n == 0) {
        fprintf(stderr,
                "dbthrottle report: --adapt-log %s: no limit change of pool %s's %s permits in it "
                "(dbthrottle adapt logs them on stderr, event=adapt_change)\n",
                a->path, pool, kind);
        return EXIT_USAGE;
    }
    qsort(a->v, a->n, sizeof *a->v, by_time);
    a->schedule = malloc((a->n + 1) * sizeof *a->schedule);
    if (!a->schedule)
        return cli_fail("report", "out of memory");
    int first = a->v[0].from > 0 ? a->v[0].from : limit_now > 0 ? (int)limit_now : a->v[0].to;
    a->schedule[0] = (dbt_replay_limit){.from_us = INT64_MIN, .limit = first};
    for (size_t i = 0; i < a->n; i++)
        a->schedule[i + 1] = (dbt_replay_limit){.from_us = a->v[i].at_us, .limit = a->v[i].to};
    return -1;
}

/* The wait timeout the pool's workers have (the default of --wait-timeout), from v: the value in
 * force in most of its processes, else its live value, else the one of the settings this command
 * reads. */
static void pool_wait_timeout(const cli_pool_view *v, const dbt_config *cfg, int64_t *ms,
                              char *from, size_t cap)
{
    *ms = cfg->wait_timeout_ms;
    snprintf(from, cap, "the settings this command reads; --wait-timeout to change");
    const dbt_setting *row = dbt_live_find("wait_timeout");
    if (!row)
        return;
    char err[DBT_ERRLEN], refused[256];
    dbt_live live;
    bool have_live = v->settings && dbt_live_parse(v->settings, &live, refused, sizeof refused);
    cli_in_force g[4];
    int n = cli_in_force_of(v, have_live ? &live : NULL, row, g, 4);
    int64_t got;
    if (n > 0 && dbt_parse_duration("wait_timeout", g[0].value, true, true, &got, err)) {
        *ms = got;
        snprintf(from, cap, "%s, in force in %d of the pool's %d processes%s", g[0].from,
                 g[0].processes, v->nprocs, n > 1 ? "; others differ" : "");
    } else if (have_live && live.set[row - dbt_settings]) {
        *ms = live.cfg.wait_timeout_ms;
        snprintf(from, cap, "the pool's live value, dbthrottle set");
    }
    if (have_live)
        dbt_live_free(&live);
}

/* A period for the timeline: the first of a round length (at least a second, then minutes and
 * hours) that cuts the span into at most `most` periods. */
static int64_t period_us(int64_t span_us, int most)
{
    static const int seconds[] = {1,   2,   5,    10,   15,   30,    60,    120,   300,
                                  600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400};
    for (size_t i = 0; i < sizeof seconds / sizeof *seconds; i++)
        if ((int64_t)seconds[i] * 1000000 * most >= span_us)
            return (int64_t)seconds[i] * 1000000;
    /* whole days beyond */
    int64_t day = INT64_C(86400000000);
    return (span_us / most / day + 1) * day;
}

/* Draws the report into path (--svg): -1 when done, else the exit status, said (with the cause
 * of a write that failed, the last flush at fclose included). name: the pool's name as a line
 * of text shows it (escaped: the SVG is UTF-8, a pool's name need not be). */
static int write_svg(const char *path, const sample *s, const char *name, const char *kind,
                     const dbt_replay_result *r, int nl, int64_t span_us, const adapt_read *a)
{
    dbt_report_chart c = {.pool = name,
                          .kind = kind,
                          .results = r,
                          .nresults = nl,
                          .bucket_us = period_us(span_us, 120),
                          .adapt = a->schedule,
                          .nadapt = a->schedule ? a->n + 1 : 0,
                          .adapt_result = a->schedule ? &a->result : NULL};
    dbt_replay_bucket *b = NULL;
    if (!dbt_replay_timeline(s->holds, s->n, c.bucket_us, &b, &c.nbuckets))
        return cli_fail("report", "out of memory");
    c.timeline = b;
    FILE *f = fopen(path, "w");
    if (!f) {
        int e = errno;
        free(b);
        return cli_fail("report", "--svg %s: %s", path, strerror(e));
    }
    errno = 0;
    bool ok = dbt_report_svg(f, &c);
    int e = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) {
        ok = false;
        e = errno;
    }
    free(b);
    return ok ? -1
              : cli_fail("report", "--svg %s: cannot write it: %s", path,
                         e ? strerror(e) : "write error");
}

/* The default limits: a quarter, a half, three quarters and all of the peak; and with a sample
 * taken enforced, the limit in force (`now`, 0: none) and twice it, as the peak cannot show
 * what a higher limit would do. Distinct, >= 1, ascending. */
static int default_limits(int peak, long long now, int *limits)
{
    int n = 0;
    for (int q = 1; q <= 4; q++) {
        int l = (peak * q + 3) / 4;
        if (l < 1)
            l = 1;
        if (n == 0 || limits[n - 1] != l)
            limits[n++] = l;
    }
    for (long long more = now; now > 0 && more <= 2 * now && more <= DBT_LIMIT_MAX; more += now) {
        int l = (int)more, at = n;
        for (int i = 0; i < n; i++)
            if (limits[i] >= l) {
                at = i;
                break;
            }
        if (at < n && limits[at] == l)
            continue;
        memmove(&limits[at + 1], &limits[at], (size_t)(n - at) * sizeof *limits);
        limits[at] = l;
        n++;
    }
    return n;
}

int cmd_report(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"help", no_argument, NULL, 'h'},
        {"limits", required_argument, NULL, OPT_LIMITS},
        {"since", required_argument, NULL, OPT_SINCE},
        {"wait-timeout", required_argument, NULL, OPT_WAIT_TIMEOUT},
        {"connections", no_argument, NULL, OPT_CONNECTIONS},
        {"json", no_argument, NULL, OPT_JSON},
        {"svg", required_argument, NULL, OPT_SVG},
        {"adapt-log", required_argument, NULL, OPT_ADAPT_LOG},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    int limits[MAX_LIMITS], nlimits = 0;
    int64_t since_ms = -1, timeout_ms = 0;
    bool timeout_given = false, json = false;
    const char *svg_path = NULL, *adapt_path = NULL;
    dbt_kind kind = DBT_KIND_QUERY;
    char err[DBT_ERRLEN];
    int opt;
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'h':
            fputs(usage, stdout);
            return 0;
        case OPT_LIMITS:
            if (!parse_limits(optarg, limits, &nlimits, err))
                return cli_usage_error("report", "%s", err);
            break;
        case OPT_SINCE:
            if (!dbt_parse_duration("--since", optarg, false, false, &since_ms, err))
                return cli_usage_error("report", "%s", err);
            if (since_ms > DBT_SAMPLE_AGE_MS)
                return cli_usage_error("report",
                                       "--since %s: the sample keeps the last %d minutes at most",
                                       optarg, DBT_SAMPLE_AGE_MS / 60000);
            break;
        case OPT_WAIT_TIMEOUT:
            if (!dbt_parse_duration("--wait-timeout", optarg, true, true, &timeout_ms, err))
                return cli_usage_error("report", "%s", err);
            timeout_given = true;
            break;
        case OPT_CONNECTIONS:
            kind = DBT_KIND_CONN;
            break;
        case OPT_JSON:
            json = true;
            break;
        case OPT_SVG:
            if (!optarg[0])
                return cli_usage_error("report", "--svg: which file?");
            svg_path = optarg;
            break;
        case OPT_ADAPT_LOG:
            if (!optarg[0])
                return cli_usage_error("report", "--adapt-log: which file?");
            adapt_path = optarg;
            break;
        default:
            if (!cli_redis_opt(&ro, opt, optarg))
                return cli_option_error("report", longopts, argv);
        }
    }
    if (optind == argc)
        return cli_usage_error("report", "which POOL?");
    if (argc - optind > 1)
        return cli_usage_error("report", "one POOL at a time");
    const char *pool = argv[optind];
    dbt_config cfg;
    if (!cli_load_config("report", &ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("report", &cfg);
    if (!r) {
        dbt_config_free(&cfg);
        return 1;
    }
    char name[220];
    cli_escape_name(pool, 200, true, name, sizeof name);
    int rc = cli_refuse_unused_pool("report", r, &cfg, pool);
    char timeout_from[128] = "--wait-timeout";
    cli_pool_view v;
    bool viewed = false;
    report_classes classes = {.n = 0};
    if (rc < 0 && !(viewed = cli_view_pool(r, &cfg, pool, 0, &v, err)))
        rc = cli_fail("report", "pool %s: %s", name, err);
    if (rc < 0 && !timeout_given)
        pool_wait_timeout(&v, &cfg, &timeout_ms, timeout_from, sizeof timeout_from);
    long long limit_now = 0;
    if (rc < 0) {
        classes_in_force(&v.kind[kind], &classes);
        limit_now = cli_effective_limit(&v.kind[kind]);
    }
    if (viewed)
        cli_view_free(&v);
    dbt_keys k;
    bool keys = false;
    if (rc < 0 && !(keys = dbt_keys_init(&k, cfg.key_prefix, pool))) {
        dbt_keys_free(&k);
        rc = cli_fail("report", "out of memory");
    }
    sample s = {0};
    keys_of ko = {0};
    read_op o = {.since_us = since_ms < 0 ? -1 : since_ms * 1000};
    if (rc < 0)
        o.key = k.keys[kind][DBT_K_SAMPLE];
    for (bool more = rc < 0; more;) {
        redisReply *rep = dbt_route_run_for(&cfg, r, k.base, read_page_op, &o, err);
        int64_t cut_us = o.since_us < 0 ? -1 : o.now_us - o.since_us;
        if (!rep || !parse_page(rep, cut_us, &s, &ko, err)) {
            rc = cli_fail("report", "pool %s: %s", name, err);
            more = false;
        } else {
            more = rep->elements == 2 * PAGE;
            const redisReply *last = rep->elements >= 2 ? rep->element[rep->elements - 1] : NULL;
            if (more && (!last || last->type != REDIS_REPLY_STRING ||
                         strlen(last->str) >= sizeof o.after)) {
                rc = cli_fail("report", "pool %s: a sample score this version cannot read", name);
                more = false;
            } else if (more) {
                snprintf(o.after, sizeof o.after, "%s", last->str);
            }
        }
        if (rep)
            freeReplyObject(rep);
    }
    if (rc < 0)
        place_chunks(&s, &ko);
    if (rc < 0 && (!finish_sample(&s, &ko) || !map_classes(&s, &classes) || !sum_enforced(&s, &ko)))
        rc = cli_fail("report", "out of memory");
    free(ko.conn_of);
    free(ko.proc_of);
    free(ko.would_of);
    free(ko.chunk_of);
    free(ko.chunks);
    const char *kind_word = dbt_kind_name(kind);
    if (rc < 0 && o.card <= 0) {
        fprintf(stderr,
                "dbthrottle report: pool %s has no sample of its %s permits: one is kept while "
                "the pool runs in shadow mode (dbthrottle mode %s shadow, or "
                "DBTHROTTLE_MODE=shadow), or enforced too with dbthrottle set %s sample always "
                "(DBTHROTTLE_SAMPLE=always)%s, for an hour after its last command\n",
                name, kind_word, name, name,
                kind == DBT_KIND_CONN
                    ? " and its workers take connection permits (DBTHROTTLE_MAX_CONNECTIONS)"
                    : "");
        rc = EXIT_USAGE;
    }
    if (rc < 0 && s.n == 0) {
        fprintf(stderr,
                "dbthrottle report: pool %s: no %s permit in the sample within --since (all it "
                "holds is older)\n",
                name, kind_word);
        rc = EXIT_USAGE;
    }
    /* (trimmed at its cap: within a chunk of it, as sample.lua trims a member at a time) */
    if (rc < 0 && since_ms >= 0 && o.carried >= DBT_SAMPLE_CAP - DBT_SAMPLE_CHUNK &&
        s.oldest_us > o.now_us - since_ms * 1000 + 1000000) {
        char kept[32];
        cli_duration((o.now_us - s.oldest_us) / 1000, kept, sizeof kept);
        fprintf(stderr,
                "dbthrottle report: pool %s: --since beyond what the sample keeps: it holds its "
                "last %d commands, the last %s\n",
                name, DBT_SAMPLE_CAP, kept);
        rc = EXIT_USAGE;
    }
    dbt_replay_concurrency seen;
    int64_t span_us = 0;
    dbt_replay_result res[MAX_LIMITS];
    if (rc < 0 && !dbt_replay_observed(s.holds, s.n, &seen, &span_us))
        rc = cli_fail("report", "out of memory");
    if (rc < 0 && nlimits == 0)
        nlimits = default_limits(seen.peak, s.enforced.commands ? limit_now : 0, limits);
    int64_t timeout_us = timeout_ms == DBT_FOREVER ? -1 : timeout_ms * 1000;
    for (int i = 0; rc < 0 && i < nlimits; i++)
        if (!dbt_replay(s.holds, s.n, limits[i], timeout_us, classes.n ? &classes.run : NULL,
                        &res[i]))
            rc = cli_fail("report", "out of memory");
    /* --adapt-log: the controller's limit over time, replayed too */
    adapt_read adapt = {.path = adapt_path};
    if (rc < 0 && adapt_path) {
        char log_name[256];
        cli_escape_name(pool, 200, false, log_name, sizeof log_name); /* (as adapt logs it) */
        rc = read_adapt_log(log_name, kind_word, limit_now, &adapt);
    }
    if (rc < 0 && adapt.schedule) {
        if (!dbt_replay_scheduled(s.holds, s.n, adapt.schedule, adapt.n + 1, timeout_us,
                                  classes.n ? &classes.run : NULL, &adapt.result))
            rc = cli_fail("report", "out of memory");
        for (size_t i = 0; i < adapt.n; i++)
            adapt.within +=
                adapt.v[i].at_us >= s.oldest_us && adapt.v[i].at_us <= s.oldest_us + span_us;
    }
    if (rc < 0 && svg_path)
        rc = write_svg(svg_path, &s, name, kind_word, res, nlimits, span_us, &adapt);
    /* --json's timeline: a minute a period, or longer ones for a span over a day (a connection
     * held for days): at most 1440 */
    dbt_replay_bucket *minutes = NULL;
    size_t nminutes = 0;
    int64_t json_period_us =
        span_us > INT64_C(86400000000) ? period_us(span_us, 1440) : INT64_C(60000000);
    if (rc < 0 && json && !dbt_replay_timeline(s.holds, s.n, json_period_us, &minutes, &nminutes))
        rc = cli_fail("report", "out of memory");
    if (rc < 0) {
        report_out out = {.pool = pool,
                          .name = name,
                          .kind = kind_word,
                          .s = &s,
                          .seen = seen,
                          .span_us = span_us,
                          .r = res,
                          .nl = nlimits,
                          .timeout_ms = timeout_ms,
                          .timeout_from = timeout_from,
                          .classes = &classes,
                          .minutes = minutes,
                          .nminutes = nminutes,
                          .period_us = json_period_us,
                          .limit_now = limit_now,
                          .adapt = adapt.schedule ? &adapt : NULL};
        if (json)
            print_json(&out);
        else
            print_text(&out);
        if (!json && svg_path)
            printf("\n  drawn into %s\n", svg_path);
        rc = fflush(stdout) == 0 ? 0 : cli_fail("report", "cannot write the output");
    }
    free(adapt.v);
    free(adapt.schedule);
    free(minutes);
    free(s.holds);
    free(s.names);
    if (keys)
        dbt_keys_free(&k);
    dbt_redis_free(r);
    dbt_config_free(&cfg);
    return rc;
}
