/* sample.c - shadow mode's command sample: the holds of a pool in shadow mode, buffered here and
 * sent to Redis (sample.lua) by the renewer. docs/design.md, "The command sample". */
#include "sample.h"
#include "clock.h"
#include "fork.h"
#include "lease.h"
#include "pool.h"
#include "script_call.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One hold, as the buffer keeps it until it is sent. */
typedef struct {
    int64_t ask_us, wait_us, hold_us; /* ask_us: this process' clock (dbt_now_us) */
    uint32_t conn;                    /* its connection's name, hashed (conn_hash) */
    uint16_t weight;
    uint8_t would;
    uint8_t kind;
    char klass[DBT_CLASS_NAME_MAX + 1];
} sample_hold;

/* A pool's buffer: the holds not sent yet, and per kind those that found it full (or whose call
 * failed) since the last chunk said so. Two of them: the renewer sends one while commands fill
 * the other. */
typedef struct {
    sample_hold holds[DBT_SAMPLE_BUF];
    int n;
    uint64_t dropped[DBT_NKINDS];
} sample_buf;

struct dbt_sample {
    sample_buf *filling, *sending;
    uint64_t serial;   /* the next hold's serial (a member's name: "<cid>.<serial>") */
    bool sending_busy; /* one sender at a time (the renewer; the exit after it has stopped) */
};

/* How long a hold may wait in the buffer: the report reads holds a second old at most late. */
#define SAMPLE_FLUSH_US INT64_C(1000000)

/* A short name of a connection for the sample: FNV-1a of the interposer's name of it. The replay
 * only tells a process' connections apart; a collision between two of one process' connections
 * (1 in 2^32 per pair) runs them as one. */
static uint32_t conn_hash(const char *name)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        h ^= *c;
        h *= 16777619u;
    }
    return h;
}

void dbt_sample_begin(dbt_pool *p, struct dbt_slot *s, int64_t ask_us, int64_t grant_us, int would)
{
    if (atomic_load(&p->mode) != DBT_MODE_SHADOW) {
        s->sample_grant_us = 0;
        return;
    }
    s->sample_ask_us = ask_us;
    s->sample_grant_us = grant_us > 0 ? grant_us : 1;
    s->sample_would = (uint8_t)would;
}

/* The buffer holds, allocated at the first hold (a process never in shadow mode allocates
 * nothing). NULL when out of memory. p->mu held. */
static struct dbt_sample *sample_of(dbt_pool *p)
{
    if (p->sample)
        return p->sample;
    struct dbt_sample *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->filling = calloc(1, sizeof *m->filling);
    m->sending = calloc(1, sizeof *m->sending);
    if (!m->filling || !m->sending) {
        free(m->filling);
        free(m->sending);
        free(m);
        return NULL;
    }
    p->sample = m;
    return m;
}

void dbt_sample_end(dbt_pool *p, struct dbt_slot *s, int64_t now)
{
    if (!s->sample_grant_us)
        return;
    int64_t grant = s->sample_grant_us;
    s->sample_grant_us = 0;
    struct dbt_sample *m = sample_of(p);
    if (!m)
        return; /* (no memory: nothing is sent, and the report finds no sample) */
    sample_buf *b = m->filling;
    if (b->n == DBT_SAMPLE_BUF) {
        b->dropped[s->kind]++;
        return;
    }
    sample_hold *h = &b->holds[b->n++];
    h->ask_us = s->sample_ask_us;
    h->wait_us = grant > s->sample_ask_us ? grant - s->sample_ask_us : 0;
    h->hold_us = now > grant ? now - grant : 0;
    h->conn = conn_hash(s->conn);
    h->weight = (uint16_t)(s->weight > 0 && s->weight <= UINT16_MAX ? s->weight : 1);
    h->would = s->sample_would;
    h->kind = (uint8_t)s->kind;
    memcpy(h->klass, s->klass, sizeof h->klass);
    h->klass[sizeof h->klass - 1] = '\0';
    /* The renewer sleeps until its next task: woken when this makes the buffer due sooner
     * (its first hold, or half full), not once per hold. */
    if ((b->n == 1 || b->n == DBT_SAMPLE_BUF / 2) && p->thread_started &&
        (p->bg_idle || p->bg_until_us > dbt_sample_due_us(p)))
        dbt_pool_wake_bg(p);
}

int64_t dbt_sample_due_us(const dbt_pool *p)
{
    const struct dbt_sample *m = p->sample;
    if (!m || m->sending_busy)
        return -1;
    const sample_buf *b = m->filling;
    bool dropped = false;
    for (int k = 0; k < DBT_NKINDS; k++)
        dropped = dropped || b->dropped[k] > 0;
    if (b->n == 0 && !dropped)
        return -1;
    if (b->n >= DBT_SAMPLE_BUF / 2)
        return 0;
    /* The oldest hold's end is not kept: its ask plus the flush delay is early enough, and
     * never later than a second after it ended. */
    int64_t oldest =
        b->n > 0 ? b->holds[0].ask_us + b->holds[0].wait_us + b->holds[0].hold_us : dbt_now_us();
    return oldest + SAMPLE_FLUSH_US;
}

/* One line per hold, as sample.def says; false when it does not fit (never: the room is the
 * longest line times the chunk). */
static bool format_hold(const sample_hold *h, int64_t built_us, char *out, size_t cap, size_t *len)
{
    int64_t ago = built_us > h->ask_us ? built_us - h->ask_us : 0;
    int n = snprintf(out + *len, cap - *len,
                     "%" PRId64 " %08" PRIx32 " %" PRId64 " %" PRId64 " %u %u %s\n", ago, h->conn,
                     h->wait_us, h->hold_us, (unsigned)h->weight, (unsigned)h->would, h->klass);
    if (n < 0 || (size_t)n >= cap - *len)
        return false;
    *len += (size_t)n;
    return true;
}

/* The longest line: four 64-bit numbers, the hash, two small ones, a class name, and spaces. */
#define SAMPLE_LINE_MAX (4 * 21 + 8 + 2 * 6 + DBT_CLASS_NAME_MAX + 8)

/* Sends one chunk of kind k: the n holds of b at idx, and `dropped`, the holds of k not kept
 * (sent with the kind's first chunk); false when the call failed. */
static bool send_chunk(dbt_pool *p, sample_buf *b, int k, const int *idx, int n, uint64_t dropped,
                       uint64_t first, char *text, size_t cap)
{
    size_t len = 0;
    text[0] = '\0';
    int64_t built = dbt_now_us();
    for (int i = 0; i < n; i++)
        if (!format_hold(&b->holds[idx[i]], built, text, cap, &len))
            return false;
    dbt_script_call call;
    dbt_build_sample(&call, &p->keys, (dbt_kind)k, p->client->cfg, p->client->cid, first, text,
                     dropped);
    dbt_lease_bind(p, &call, dbt_lease_us(p) / 1000);
    char err[DBT_ERRLEN];
    long long kept = 0;
    redisReply *rep = dbt_pool_run(p, "sample", &call, dbt_parse_sample, &kept, err);
    if (!rep)
        return false;
    freeReplyObject(rep);
    return true;
}

void dbt_sample_send(dbt_pool *p)
{
    pthread_mutex_lock(&p->mu);
    struct dbt_sample *m = p->sample;
    if (!m || m->sending_busy) {
        pthread_mutex_unlock(&p->mu);
        return;
    }
    sample_buf *b = m->filling;
    m->filling = m->sending;
    m->sending = b;
    m->sending_busy = true;
    uint64_t serial = m->serial;
    int total = b->n;
    uint64_t ndropped = 0;
    for (int k = 0; k < DBT_NKINDS; k++)
        ndropped += b->dropped[k] > 0;
    /* Each hold and each kind's dropped count is a member: the serials they take. */
    m->serial += (uint64_t)total + ndropped;
    pthread_mutex_unlock(&p->mu);

    char *text = malloc((size_t)DBT_SAMPLE_CHUNK * SAMPLE_LINE_MAX + 1);
    uint64_t lost[DBT_NKINDS] = {0};
    int idx[DBT_SAMPLE_CHUNK];
    for (int k = 0; k < DBT_NKINDS; k++) {
        uint64_t dropped = b->dropped[k];
        int n = 0;
        for (int i = 0; i <= total; i++) {
            if (i < total && b->holds[i].kind == k)
                idx[n++] = i;
            /* a chunk full, or the last of the kind (with its dropped count, even alone) */
            if (n == DBT_SAMPLE_CHUNK || (i == total && (n > 0 || dropped > 0))) {
                bool ok = text && send_chunk(p, b, k, idx, n, dropped, serial, text,
                                             (size_t)DBT_SAMPLE_CHUNK * SAMPLE_LINE_MAX + 1);
                serial += (uint64_t)n + (dropped > 0);
                if (!ok)
                    lost[k] += (uint64_t)n + dropped;
                dropped = 0;
                n = 0;
            }
        }
    }
    free(text);

    pthread_mutex_lock(&p->mu);
    b->n = 0;
    memset(b->dropped, 0, sizeof b->dropped);
    /* What did not reach Redis is said with the next chunk, so that the report knows. */
    for (int k = 0; k < DBT_NKINDS; k++)
        m->filling->dropped[k] += lost[k];
    m->sending_busy = false;
    pthread_mutex_unlock(&p->mu);
}

void dbt_sample_free(dbt_pool *p)
{
    if (!p->sample)
        return;
    free(p->sample->filling);
    free(p->sample->sending);
    free(p->sample);
    p->sample = NULL;
}

/* A fork()ed child: the holds buffered are the parent's, which sends them. */
static void after_fork(dbt_pool *p)
{
    if (!p->sample)
        return;
    p->sample->filling->n = 0;
    memset(p->sample->filling->dropped, 0, sizeof p->sample->filling->dropped);
    p->sample->sending->n = 0;
    p->sample->sending_busy = false;
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
