/* sample.c - the command sample: the holds of a pool that DBTHROTTLE_SAMPLE keeps (those of shadow
 * mode by default), buffered here and sent to Redis (sample.lua) by the renewer. docs/design.md,
 * "The command sample". */
#include "sample.h"
#include "clock.h"
#include "fork.h"
#include "lease.h"
#include "pool.h"
#include "script_call.h"

#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A shadow hold's line says acquire.lua's `would` as it came (sample.def). */
_Static_assert(DBT_SAMPLE_RAN == (int)DBT_WOULD_RUN &&
                   DBT_SAMPLE_WOULD_WAIT == (int)DBT_WOULD_WAIT &&
                   DBT_SAMPLE_WOULD_REFUSE == (int)DBT_WOULD_REFUSE,
               "sample.def's shadow values are acquire.def's");

/* One hold, as the buffer keeps it until it is sent. */
typedef struct {
    int64_t ask_us, wait_us, hold_us; /* ask_us: this process' clock (dbt_now_us) */
    int64_t queued_us;                /* of wait_us, what it spent queued (after its acquire) */
    uint32_t conn;                    /* its connection's name, hashed (conn_hash) */
    uint16_t weight;
    uint8_t would;
    uint8_t kind;
    char klass[DBT_CLASS_NAME_MAX + 1];
} sample_hold;

/* A pool's buffer: the holds not sent yet, and per kind those not sampled (the buffer full, or
 * their call failed) since a chunk last said so. */
struct dbt_sample {
    sample_hold holds[DBT_SAMPLE_BUF];
    int n;
    uint64_t dropped[DBT_NKINDS];
    int64_t dropped_since_us; /* when the first of those came (0: none) */
    uint64_t serial;          /* the next chunk's first serial (its name: "<cid>.<serial>") */
    int64_t retry_us;         /* after a failed call, not before then (0: at once) */
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

/* Whether DBTHROTTLE_SAMPLE in force (`when`) keeps a hold of a command run in shadow mode or
 * not. */
static bool sampled(int when, bool shadow)
{
    return when == DBT_SAMPLE_ALWAYS || (when == DBT_SAMPLE_SHADOW && shadow);
}

bool dbt_sample_kept(dbt_pool *p, dbt_kind kind)
{
    return sampled(atomic_load(&p->sample_when), dbt_pool_shadow(p, kind));
}

void dbt_sample_begin(dbt_pool *p, struct dbt_slot *s, bool shadow, int64_t ask_us,
                      int64_t queued_at_us, int64_t grant_us, dbt_sample_would line)
{
    if (!sampled(atomic_load(&p->sample_when), shadow)) {
        s->sample_grant_us = 0;
        return;
    }
    s->sample_ask_us = ask_us;
    s->sample_grant_us = grant_us > 0 ? grant_us : 1;
    s->sample_would = (uint8_t)line;
    s->sample_queued_at_us = queued_at_us;
}

/* The buffer, allocated at the pool's first sampled hold (a process never in shadow mode
 * allocates nothing), once. NULL when out of memory. p->mu held. */
static struct dbt_sample *sample_of(dbt_pool *p)
{
    if (!p->sample)
        p->sample = calloc(1, sizeof *p->sample);
    return p->sample;
}

/* Holds of kind k not sampled: said with the kind's next chunk. p->mu held. */
static void count_dropped(struct dbt_sample *m, int k, uint64_t n, int64_t now)
{
    if (n == 0)
        return;
    m->dropped[k] += n;
    if (!m->dropped_since_us)
        m->dropped_since_us = now;
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
    if (m->n == DBT_SAMPLE_BUF) {
        count_dropped(m, s->kind, 1, now);
        return;
    }
    sample_hold *h = &m->holds[m->n++];
    h->ask_us = s->sample_ask_us;
    h->wait_us = grant > s->sample_ask_us ? grant - s->sample_ask_us : 0;
    /* queued from its acquire's reply to its grant (a grant pushed before that reply was read:
     * none) */
    int64_t queued_at = s->sample_queued_at_us;
    h->queued_us = queued_at > s->sample_ask_us && grant > queued_at ? grant - queued_at : 0;
    h->hold_us = now > grant ? now - grant : 0;
    h->conn = conn_hash(s->conn);
    h->weight = (uint16_t)(s->weight > 0 && s->weight <= UINT16_MAX ? s->weight : 1);
    h->would = s->sample_would;
    h->kind = (uint8_t)s->kind;
    memcpy(h->klass, s->klass, sizeof h->klass);
    h->klass[sizeof h->klass - 1] = '\0';
    /* The renewer sleeps until its next task: woken when this makes the buffer due sooner
     * (its first hold, or half full), not once per hold. */
    if ((m->n == 1 || m->n == DBT_SAMPLE_BUF / 2) && p->thread_started &&
        (p->bg_idle || p->bg_until_us > dbt_sample_due_us(p)))
        dbt_pool_wake_bg(p);
}

void dbt_sample_missed(dbt_pool *p, dbt_kind kind, int64_t now)
{
    struct dbt_sample *m = sample_of(p);
    if (m)
        count_dropped(m, kind, 1, now);
}

int64_t dbt_sample_due_us(const dbt_pool *p)
{
    const struct dbt_sample *m = p->sample;
    if (!m || (m->n == 0 && !m->dropped_since_us))
        return -1;
    int64_t due;
    if (m->n >= DBT_SAMPLE_BUF / 2) {
        due = 0;
    } else {
        /* A second after the oldest hold's end, or after the first hold not sampled. */
        const sample_hold *o = &m->holds[0];
        int64_t oldest = m->n > 0 ? o->ask_us + o->wait_us + o->hold_us : m->dropped_since_us;
        if (m->dropped_since_us && m->dropped_since_us < oldest)
            oldest = m->dropped_since_us;
        due = oldest + SAMPLE_FLUSH_US;
    }
    return due > m->retry_us ? due : m->retry_us;
}

/* One line per hold, as sample.def says; false when it does not fit (never: the room is the
 * longest line times the chunk). */
static bool format_hold(const sample_hold *h, int64_t built_us, char *out, size_t cap, size_t *len)
{
    int64_t ago = built_us > h->ask_us ? built_us - h->ask_us : 0;
    /* a queued hold's wait: its acquire's own time, ":", its queueing (sample.def) */
    char wait[48];
    if (h->would == DBT_SAMPLE_QUEUED)
        snprintf(wait, sizeof wait, "%" PRId64 ":%" PRId64, h->wait_us - h->queued_us,
                 h->queued_us);
    else
        snprintf(wait, sizeof wait, "%" PRId64, h->wait_us);
    int n =
        snprintf(out + *len, cap - *len, "%" PRId64 " %08" PRIx32 " %s %" PRId64 " %u %u %s\n", ago,
                 h->conn, wait, h->hold_us, (unsigned)h->weight, (unsigned)h->would, h->klass);
    if (n < 0 || (size_t)n >= cap - *len)
        return false;
    *len += (size_t)n;
    return true;
}

/* Which monotonic clock dbt_now_us reads: the kernel's boot id hashed (FNV-1a, 16 hex digits),
 * the same for every process of the kernel (of a host, its containers included), "" when it
 * cannot be read. The report places the holds of the processes of one clock together
 * (cli/sample_clock.h). Read once. */
static char clock_id[17];
static pthread_once_t clock_once = PTHREAD_ONCE_INIT;

static void read_clock_id(void)
{
    char boot[64];
    int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, boot, sizeof boot);
    close(fd);
    if (n < 16)
        return;
    uint64_t h = UINT64_C(14695981039346656037);
    for (ssize_t i = 0; i < n && boot[i] != '\n'; i++) {
        h ^= (unsigned char)boot[i];
        h *= UINT64_C(1099511628211);
    }
    snprintf(clock_id, sizeof clock_id, "%016" PRIx64, h);
}

static const char *kernel_clock(void)
{
    pthread_once(&clock_once, read_clock_id);
    return clock_id;
}

/* The longest line: five 64-bit numbers, the hash, two small ones, a class name, spaces and ":". */
#define SAMPLE_LINE_MAX (5 * 21 + 8 + 2 * 6 + DBT_CLASS_NAME_MAX + 9)

bool dbt_sample_send(dbt_pool *p)
{
    sample_hold *chunk = malloc(DBT_SAMPLE_CHUNK * sizeof *chunk);
    char *text = malloc((size_t)DBT_SAMPLE_CHUNK * SAMPLE_LINE_MAX + 1);
    pthread_mutex_lock(&p->mu);
    struct dbt_sample *m = p->sample;
    if (!m || !chunk || !text || (m->n == 0 && !m->dropped_since_us)) {
        pthread_mutex_unlock(&p->mu);
        free(chunk);
        free(text);
        return false;
    }
    /* The first hold's kind (or, with none, a kind with holds not sampled), and up to a chunk
     * of that kind's holds, taken out of the buffer in their order. */
    int k = 0;
    if (m->n > 0)
        k = m->holds[0].kind;
    else
        while (k < DBT_NKINDS - 1 && m->dropped[k] == 0)
            k++;
    int n = 0, kept = 0;
    for (int i = 0; i < m->n; i++) {
        if (n < DBT_SAMPLE_CHUNK && m->holds[i].kind == k)
            chunk[n++] = m->holds[i];
        else
            m->holds[kept++] = m->holds[i];
    }
    m->n = kept;
    uint64_t dropped = m->dropped[k];
    m->dropped[k] = 0;
    bool any_dropped = false;
    for (int j = 0; j < DBT_NKINDS; j++)
        any_dropped = any_dropped || m->dropped[j] > 0;
    if (!any_dropped)
        m->dropped_since_us = 0;
    uint64_t first = m->serial;
    m->serial += (uint64_t)n + 1; /* its holds, and a name for a chunk of none */
    pthread_mutex_unlock(&p->mu);

    size_t len = 0;
    text[0] = '\0';
    int64_t built = dbt_now_us();
    for (int i = 0; i < n; i++)
        (void)format_hold(&chunk[i], built, text, (size_t)DBT_SAMPLE_CHUNK * SAMPLE_LINE_MAX + 1,
                          &len);
    dbt_script_call call;
    dbt_build_sample(&call, &p->keys, (dbt_kind)k, p->client->cfg, p->client->cid, first, n, text,
                     dropped, built, kernel_clock());
    dbt_lease_bind(p, &call, dbt_lease_us(p) / 1000);
    char err[DBT_ERRLEN];
    long long members = 0;
    redisReply *rep = dbt_pool_run(p, "sample", &call, dbt_parse_sample, &members, err);
    free(chunk);
    free(text);
    if (rep)
        freeReplyObject(rep);
    pthread_mutex_lock(&p->mu);
    if (rep) {
        m->retry_us = 0;
    } else {
        /* Not delivered: said with the next chunk, which waits a second (this is not the
         * semaphore's call: no outage is noted for it, so none backs it off). */
        int64_t now = dbt_now_us();
        count_dropped(m, k, (uint64_t)n + dropped, now);
        m->retry_us = now + SAMPLE_FLUSH_US;
    }
    pthread_mutex_unlock(&p->mu);
    return rep != NULL;
}

void dbt_sample_send_all(dbt_pool *p)
{
    /* (at most the buffer's chunks and one per kind of holds not sampled: a failure stops it) */
    for (int i = 0; i < DBT_SAMPLE_BUF / DBT_SAMPLE_CHUNK + DBT_NKINDS; i++) {
        pthread_mutex_lock(&p->mu);
        bool any = p->sample && (p->sample->n > 0 || p->sample->dropped_since_us);
        bool down = p->down_until_us > dbt_now_us();
        pthread_mutex_unlock(&p->mu);
        if (!any || down || !dbt_sample_send(p))
            return;
    }
}

void dbt_sample_free(dbt_pool *p)
{
    free(p->sample);
    p->sample = NULL;
}

/* A fork()ed child: the holds buffered are the parent's, which sends them. */
static void after_fork(dbt_pool *p)
{
    if (!p->sample)
        return;
    p->sample->n = 0;
    memset(p->sample->dropped, 0, sizeof p->sample->dropped);
    p->sample->dropped_since_us = 0;
    p->sample->retry_us = 0;
}

__attribute__((constructor)) static void register_after_fork(void)
{
    dbt_fork_on_child(DBT_FORK_MODULE, after_fork);
}
