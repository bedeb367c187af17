/* relay_core.c - the host relay's decisions (relay_core.h): the commands of many local clients
 * over one command connection and one listening connection to Redis. Pure: no socket, no clock.
 *
 * Each client has a queue of its commands in their order. A command is answered here (AUTH,
 * SELECT, a refusal), sent on the command connection (its reply comes back in the order sent:
 * one FIFO says whose each is), or, a BLPOP, blocks the client once every command before it was
 * answered. The blocked clients form one list in the order they blocked; the listening
 * connection's BLPOPs name the union of their keys and the relay's wake list, and each value
 * popped goes to the first blocked client that named its key. */
#include "relay_core.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- buffers ---------------------------------------------------------------------------- */

void dbt_relay_buf_consumed(dbt_relay_buf *b, size_t n)
{
    b->off += n;
    if (b->off >= b->len)
        b->off = b->len = 0;
}

/* Appends; false when out of memory (then nothing was appended). */
static bool buf_add(dbt_relay_buf *b, const char *s, size_t n)
{
    if (b->len + n > b->cap) {
        if (b->off > 0) { /* reclaim what was written before growing */
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        if (b->len + n > b->cap) {
            size_t cap = b->cap ? b->cap : 256;
            while (cap < b->len + n)
                cap *= 2;
            char *p = realloc(b->p, cap);
            if (!p)
                return false;
            b->p = p;
            b->cap = cap;
        }
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    return true;
}

static bool buf_str(dbt_relay_buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* "<c><n>\r\n", RESP's header of a type c. */
static bool buf_head(dbt_relay_buf *b, char c, long long n)
{
    char h[32];
    int k = snprintf(h, sizeof h, "%c%lld\r\n", c, n);
    return buf_add(b, h, (size_t)k);
}

static bool buf_bulk(dbt_relay_buf *b, const char *s, size_t n)
{
    return buf_head(b, '$', (long long)n) && buf_add(b, s, n) && buf_add(b, "\r\n", 2);
}

/* A command as RESP (an array of bulk strings). */
static bool buf_command(dbt_relay_buf *b, int argc, const char *const *argv, const size_t *lens)
{
    if (!buf_head(b, '*', argc))
        return false;
    for (int i = 0; i < argc; i++)
        if (!buf_bulk(b, argv[i], lens ? lens[i] : strlen(argv[i])))
            return false;
    return true;
}

/* A reply of Redis, as it came (RESP2: hiredis 0.14 reads no other). */
static bool buf_reply(dbt_relay_buf *b, const redisReply *r)
{
    switch (r->type) {
    case REDIS_REPLY_STATUS:
        return buf_add(b, "+", 1) && buf_add(b, r->str, r->len) && buf_add(b, "\r\n", 2);
    case REDIS_REPLY_ERROR:
        return buf_add(b, "-", 1) && buf_add(b, r->str, r->len) && buf_add(b, "\r\n", 2);
    case REDIS_REPLY_INTEGER:
        return buf_head(b, ':', r->integer);
    case REDIS_REPLY_STRING:
        return buf_bulk(b, r->str, r->len);
    case REDIS_REPLY_ARRAY:
        if (!buf_head(b, '*', (long long)r->elements))
            return false;
        for (size_t i = 0; i < r->elements; i++)
            if (!buf_reply(b, r->element[i]))
                return false;
        return true;
    default: /* REDIS_REPLY_NIL */
        return buf_str(b, "$-1\r\n");
    }
}

/* ---- the commands ------------------------------------------------------------------------ */

typedef enum {
    CMD_FORWARD, /* sent on the command connection */
    CMD_AUTH,    /* answered here, against the relay's own user and password */
    CMD_SELECT,  /* answered here, against the relay's own database */
    CMD_BLPOP,   /* blocks the client; served by the listening connection */
    CMD_REFUSED, /* not relayed: the library sends none of these */
} cmd_kind;

/* The commands the library sends on a connection to its pool's server (redis_conn.c, route.c,
 * sem/), each with what the relay does with it. Any other is refused, loudly. */
static const struct {
    const char *name;
    cmd_kind kind;
} COMMANDS[] = {
    {"AUTH", CMD_AUTH},       {"SELECT", CMD_SELECT}, {"BLPOP", CMD_BLPOP},
    {"EVALSHA", CMD_FORWARD}, {"EVAL", CMD_FORWARD},  {"SCRIPT", CMD_FORWARD},
    {"INFO", CMD_FORWARD},    {"PING", CMD_FORWARD},  {"ROLE", CMD_FORWARD},
    {"HGETALL", CMD_FORWARD},
};

static cmd_kind kind_of(const redisReply *name)
{
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (strlen(COMMANDS[i].name) == name->len &&
            strncasecmp(COMMANDS[i].name, name->str, name->len) == 0)
            return COMMANDS[i].kind;
    return CMD_REFUSED;
}

/* ---- the state ---------------------------------------------------------------------------- */

typedef enum { E_QUEUED, E_SENT, E_BLOCKED, E_DONE } entry_state;

typedef struct entry {
    struct entry *next;          /* the client's next command */
    struct entry *bprev, *bnext; /* the blocked list, while E_BLOCKED */
    struct entry *hit;           /* a list of entries being answered at once (answer_blocked) */
    int client;
    redisReply *req; /* the command (an array of strings) */
    entry_state st;
    dbt_relay_buf reply; /* E_DONE: the reply, as RESP */
    int64_t deadline;    /* E_BLOCKED: when it times out (0: never) */
} entry;

typedef struct {
    bool used, doomed, authed;
    uint32_t gen; /* raised at each close: a FIFO place of an earlier client is stale */
    redisReader *reader;
    entry *head, *tail;
    int queued;
    dbt_relay_buf out;
} client;

/* A place in the command connection's FIFO: whose the next reply is. client -1: the relay's own
 * (a push to its wake list, a value given back). */
typedef struct {
    int client;
    uint32_t gen;
    entry *e;
} cmd_place;

/* A value popped for no client (its client left, or timed out, after the BLPOP was sent): kept
 * for the next BLPOP of its list, in the order popped, as Redis would have kept it in the list. */
typedef struct held_value {
    struct held_value *next;
    char *key, *value;
    size_t klen, vlen;
    int64_t until; /* dropped then (a grant lost so is found by the process' next renewal) */
} held_value;

/* A BLPOP in flight on the listening connection, with the keys it named. */
typedef struct {
    char **keys;
    int nkeys;
    bool stale; /* a wake was pushed for it: it ends soon, and is not counted on to cover keys */
} blpop_place;

struct dbt_relay {
    char *user, *password, *wake_key;
    int db;
    client *clients;
    int nclients; /* slots made (used or not) */
    int nused;
    entry *bhead, *btail; /* the blocked, oldest first */
    int nblocked;
    dbt_relay_buf link_out[2];
    bool link_up[2];
    cmd_place *fifo;
    size_t fifo_head, fifo_len, fifo_cap;
    blpop_place blpops[DBT_RELAY_MAX_BLPOPS];
    int blpop_head, nblpops;
    int wakes_out; /* pushed to the wake list and not popped yet (at most: see cover) */
    held_value *held, *held_tail;
    int nheld;
    long long dropped;
    long long own_errors; /* error replies to the relay's own commands */
    char own_error[120];  /* the last one */
};

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

dbt_relay *dbt_relay_new(const dbt_relay_conf *conf)
{
    dbt_relay *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->user = dup_or_null(conf->user);
    r->password = dup_or_null(conf->password);
    r->wake_key = strdup(conf->wake_key);
    r->db = conf->db;
    r->link_up[DBT_RELAY_CMD] = r->link_up[DBT_RELAY_LISTEN] = true;
    if ((conf->user && !r->user) || (conf->password && !r->password) || !r->wake_key) {
        dbt_relay_free(r);
        return NULL;
    }
    return r;
}

static void free_entry(entry *e)
{
    if (e->req)
        freeReplyObject(e->req);
    free(e->reply.p);
    free(e);
}

static void free_blpop(blpop_place *b)
{
    for (int i = 0; i < b->nkeys; i++)
        free(b->keys[i]);
    free(b->keys);
    b->keys = NULL;
    b->nkeys = 0;
}

void dbt_relay_free(dbt_relay *r)
{
    if (!r)
        return;
    for (int c = 0; c < r->nclients; c++)
        if (r->clients[c].used)
            dbt_relay_close(r, c);
    free(r->clients);
    for (int i = 0; i < r->nblpops; i++)
        free_blpop(&r->blpops[(r->blpop_head + i) % DBT_RELAY_MAX_BLPOPS]);
    while (r->held) {
        held_value *h = r->held;
        r->held = h->next;
        free(h->key);
        free(h->value);
        free(h);
    }
    free(r->link_out[0].p);
    free(r->link_out[1].p);
    free(r->fifo);
    free(r->user);
    free(r->password);
    free(r->wake_key);
    free(r);
}

/* ---- the blocked list --------------------------------------------------------------------- */

static void unblock(dbt_relay *r, entry *e)
{
    if (e->bprev)
        e->bprev->bnext = e->bnext;
    else
        r->bhead = e->bnext;
    if (e->bnext)
        e->bnext->bprev = e->bprev;
    else
        r->btail = e->bprev;
    e->bprev = e->bnext = NULL;
    r->nblocked--;
}

/* The keys of a BLPOP: its arguments but the first (the name) and the last (the timeout). */
static bool names_key(const entry *e, const char *key, size_t len)
{
    for (size_t i = 1; i + 1 < e->req->elements; i++) {
        const redisReply *k = e->req->element[i];
        if (k->len == len && memcmp(k->str, key, len) == 0)
            return true;
    }
    return false;
}

static bool blpop_names(const blpop_place *b, const char *key, size_t len)
{
    for (int i = 0; i < b->nkeys; i++)
        if (strlen(b->keys[i]) == len && memcmp(b->keys[i], key, len) == 0)
            return true;
    return false;
}

/* ---- a client's queue ---------------------------------------------------------------------- */

static void doom(dbt_relay *r, int c)
{
    r->clients[c].doomed = true;
}

/* e is answered with the error text msg (one line). */
static void done_error(dbt_relay *r, entry *e, const char *msg)
{
    if (!buf_add(&e->reply, "-", 1) || !buf_str(&e->reply, msg) || !buf_add(&e->reply, "\r\n", 2))
        doom(r, e->client);
    e->st = E_DONE;
}

static void done_status(dbt_relay *r, entry *e, const char *msg)
{
    if (!buf_add(&e->reply, "+", 1) || !buf_str(&e->reply, msg) || !buf_add(&e->reply, "\r\n", 2))
        doom(r, e->client);
    e->st = E_DONE;
}

/* Whether a secret equals the relay's, in time that does not depend on where they differ. */
static bool same_secret(const char *mine, const redisReply *given)
{
    size_t n = strlen(mine);
    unsigned d = n != given->len;
    for (size_t i = 0; i < given->len; i++)
        d |= (unsigned char)(i < n ? mine[i] : 0) ^ (unsigned char)given->str[i];
    return d == 0;
}

static void answer_auth(dbt_relay *r, entry *e)
{
    const redisReply *q = e->req;
    bool ok = false;
    if (r->password && (q->elements == 2 || q->elements == 3)) {
        const char *user = r->user ? r->user : "default";
        const redisReply *pw = q->element[q->elements - 1];
        bool user_ok = q->elements == 2
                           ? r->user == NULL
                           : strlen(user) == q->element[1]->len &&
                                 memcmp(user, q->element[1]->str, q->element[1]->len) == 0;
        bool pw_ok = same_secret(r->password, pw);
        ok = user_ok && pw_ok;
    }
    if (ok) {
        r->clients[e->client].authed = true;
        done_status(r, e, "OK");
    } else {
        done_error(r, e, "WRONGPASS invalid username-password pair or user is disabled.");
    }
}

static void answer_select(dbt_relay *r, entry *e)
{
    const redisReply *q = e->req;
    char want[16];
    snprintf(want, sizeof want, "%d", r->db);
    if (q->elements == 2 && q->element[1]->len == strlen(want) &&
        memcmp(q->element[1]->str, want, q->element[1]->len) == 0) {
        done_status(r, e, "OK");
    } else {
        char msg[120];
        snprintf(msg, sizeof msg, "ERR dbthrottle relay: SELECT %.20s: it speaks for database %d",
                 q->elements == 2 ? q->element[1]->str : "?", r->db);
        done_error(r, e, msg);
    }
}

/* Takes the next place of the command connection's FIFO, before the command is buffered (false:
 * out of memory, nothing taken). */
static bool fifo_push(dbt_relay *r, int c, entry *e)
{
    if (r->fifo_len == r->fifo_cap) {
        size_t cap = r->fifo_cap ? r->fifo_cap * 2 : 64;
        cmd_place *f = malloc(cap * sizeof *f);
        if (!f)
            return false;
        for (size_t i = 0; i < r->fifo_len; i++)
            f[i] = r->fifo[(r->fifo_head + i) % r->fifo_cap];
        free(r->fifo);
        r->fifo = f;
        r->fifo_head = 0;
        r->fifo_cap = cap;
    }
    r->fifo[(r->fifo_head + r->fifo_len) % r->fifo_cap] =
        (cmd_place){c, c >= 0 ? r->clients[c].gen : 0, e};
    r->fifo_len++;
    return true;
}

/* Buffers a command for the command connection with its FIFO place (client -1: the relay's
 * own); false when out of memory (then neither is there). */
static bool send_command(dbt_relay *r, int c, entry *e, int argc, const char *const *argv,
                         const size_t *lens)
{
    dbt_relay_buf *b = &r->link_out[DBT_RELAY_CMD];
    size_t unwritten = b->len - b->off; /* buf_add may move it to the front (off 0) */
    if (!fifo_push(r, c, e))
        return false;
    if (buf_command(b, argc, argv, lens))
        return true;
    b->len = b->off + unwritten; /* a partial command must not be written */
    r->fifo_len--;
    return false;
}

/* The most arguments a relayed command may have (the library's have at most a few dozen). */
#define MAX_ARGS 256

/* Sends e's command on the command connection. */
static void forward(dbt_relay *r, entry *e)
{
    const redisReply *q = e->req;
    if (q->elements > MAX_ARGS) {
        done_error(r, e, "ERR dbthrottle relay: too many arguments");
        return;
    }
    const char *argv[MAX_ARGS];
    size_t lens[MAX_ARGS];
    for (size_t i = 0; i < q->elements; i++) {
        argv[i] = q->element[i]->str;
        lens[i] = q->element[i]->len;
    }
    if (send_command(r, e->client, e, (int)q->elements, argv, lens))
        e->st = E_SENT;
    else
        doom(r, e->client);
}

/* The relay's own command on the command connection (its reply is read and dropped). Out of
 * memory, it is not sent: a wake not pushed leaves a BLPOP to its own timeout, a value not
 * given back is a grant lost as on a broken connection (renewals find it). */
static void own_command(dbt_relay *r, int argc, const char *const *argv, const size_t *lens)
{
    (void)send_command(r, -1, NULL, argc, argv, lens);
}

static void ensure_listening(dbt_relay *r);
static void block(dbt_relay *r, entry *e, int64_t now_us);
static bool take_held(dbt_relay *r, entry *e);

/* Writes the answered commands at the head of c's queue to its output, in order. */
static void emit_done(client *cl)
{
    while (cl->head && cl->head->st == E_DONE) {
        entry *e = cl->head;
        if (!buf_add(&cl->out, e->reply.p, e->reply.len))
            cl->doomed = true;
        cl->head = e->next;
        if (!cl->head)
            cl->tail = NULL;
        cl->queued--;
        free_entry(e);
    }
}

/* One command of c's queue, not yet acted on: answered here, sent, or (a BLPOP at the head of
 * the queue) blocked. False: it is a BLPOP that must wait, and so must the commands after it. */
static bool act(dbt_relay *r, client *cl, entry *e, int64_t now_us)
{
    cmd_kind k = kind_of(e->req->element[0]);
    if (r->password && !cl->authed && k != CMD_AUTH) {
        done_error(r, e, "NOAUTH Authentication required.");
    } else if (k == CMD_AUTH) {
        answer_auth(r, e);
    } else if (k == CMD_SELECT) {
        answer_select(r, e);
    } else if (k == CMD_REFUSED) {
        char msg[120];
        snprintf(msg, sizeof msg, "ERR dbthrottle relay: %.*s is not relayed",
                 (int)(e->req->element[0]->len < 40 ? e->req->element[0]->len : 40),
                 e->req->element[0]->str);
        done_error(r, e, msg);
    } else if (k == CMD_FORWARD) {
        forward(r, e);
    } else if (e->req->elements < 3) {
        done_error(r, e, "ERR wrong number of arguments for 'blpop' command");
    } else if (e == cl->head) {
        block(r, e, now_us);
        return false;
    } else {
        return false; /* a BLPOP waits for the commands before it to be answered */
    }
    return true;
}

/* Moves c's queue on: answered commands written out, in order; commands after them answered
 * here, sent, or blocked (a BLPOP once it is at the head). */
static void advance(dbt_relay *r, int c, int64_t now_us)
{
    client *cl = &r->clients[c];
    for (;;) {
        emit_done(cl);
        entry *e = cl->head;
        while (e && !cl->doomed && e->st != E_BLOCKED) {
            if (e->st == E_QUEUED && !act(r, cl, e, now_us))
                break;
            e = e->next;
        }
        /* A BLPOP whose timeout was refused is answered at the head: write it, go on. */
        if (cl->doomed || !cl->head || cl->head->st != E_DONE)
            return;
    }
}

/* ---- listening ---------------------------------------------------------------------------- */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sends one BLPOP naming the keys of every blocked client (each once) and the wake list. */
static bool send_blpop(dbt_relay *r)
{
    int cap = 1;
    for (entry *e = r->bhead; e; e = e->bnext)
        cap += (int)e->req->elements - 2;
    char **keys = malloc((size_t)cap * sizeof *keys);
    if (!keys)
        return false;
    int n = 0;
    bool ok = true;
    for (entry *e = r->bhead; e && ok; e = e->bnext)
        for (size_t i = 1; i + 1 < e->req->elements && ok; i++) {
            const redisReply *k = e->req->element[i];
            ok = (keys[n++] = strndup(k->str, k->len)) != NULL;
            n -= !ok;
        }
    if (ok) {
        ok = (keys[n++] = strdup(r->wake_key)) != NULL;
        n -= !ok;
    }
    if (ok) {
        qsort(keys, (size_t)n, sizeof *keys, cmp_str);
        int u = 0;
        for (int i = 0; i < n; i++) {
            if (u > 0 && strcmp(keys[u - 1], keys[i]) == 0)
                free(keys[i]);
            else
                keys[u++] = keys[i];
        }
        n = u;
    }
    const char **argv = ok ? malloc((size_t)(n + 2) * sizeof *argv) : NULL;
    if (!argv) {
        for (int i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
        return false;
    }
    char secs[16];
    snprintf(secs, sizeof secs, "%d", DBT_RELAY_BLPOP_SECONDS);
    argv[0] = "BLPOP";
    for (int i = 0; i < n; i++)
        argv[i + 1] = keys[i];
    argv[n + 1] = secs;
    ok = buf_command(&r->link_out[DBT_RELAY_LISTEN], n + 2, argv, NULL);
    free(argv);
    if (!ok) {
        for (int i = 0; i < n; i++)
            free(keys[i]);
        free(keys);
        return false;
    }
    blpop_place *b = &r->blpops[(r->blpop_head + r->nblpops) % DBT_RELAY_MAX_BLPOPS];
    *b = (blpop_place){keys, n, false};
    r->nblpops++;
    return true;
}

/* BLPOPs in flight up to DBT_RELAY_MAX_BLPOPS while anyone is blocked. */
static void ensure_listening(dbt_relay *r)
{
    while (r->link_up[DBT_RELAY_LISTEN] && r->nblocked > 0 && r->nblpops < DBT_RELAY_MAX_BLPOPS &&
           send_blpop(r))
        ;
}

/* e's keys must be in every BLPOP in flight: one that lacks a key would not end when a value is
 * pushed there, and e would wait for its timeout. Redis serves a connection's pipelined BLPOPs in
 * order, and each names the wake list: with j elements in the wake list, the first j return at
 * once (each pops one element, a wake or a value). So if the last BLPOP that lacks a key is the
 * j-th in flight, the wake list gets as many pushes as it lacks of j, and the first j are marked
 * stale: each is sent again, with the keys of now, when it returns. */
static void cover(dbt_relay *r, entry *e)
{
    int last = -1;
    for (int i = 0; i < r->nblpops; i++) {
        blpop_place *b = &r->blpops[(r->blpop_head + i) % DBT_RELAY_MAX_BLPOPS];
        for (size_t k = 1; k + 1 < e->req->elements; k++)
            if (!blpop_names(b, e->req->element[k]->str, e->req->element[k]->len)) {
                last = i;
                break;
            }
    }
    if (last < 0)
        return;
    for (int i = 0; i <= last; i++)
        r->blpops[(r->blpop_head + i) % DBT_RELAY_MAX_BLPOPS].stale = true;
    int need = last + 1 - r->wakes_out;
    if (need <= 0)
        return;
    /* RPUSH wake x... then PEXPIRE wake TTL: the list is the relay's, and it must not outlive a
     * relay that ended before popping it. */
    const char *argv[2 + DBT_RELAY_MAX_BLPOPS];
    argv[0] = "RPUSH";
    argv[1] = r->wake_key;
    for (int i = 0; i < need; i++)
        argv[2 + i] = "x";
    own_command(r, 2 + need, argv, NULL);
    r->wakes_out += need;
    char ttl[24];
    snprintf(ttl, sizeof ttl, "%d", DBT_RELAY_WAKE_TTL_MS);
    const char *exp[] = {"PEXPIRE", r->wake_key, ttl};
    own_command(r, 3, exp, NULL);
}

/* e is a BLPOP at the head of its client's queue: the client is blocked. */
static void block(dbt_relay *r, entry *e, int64_t now_us)
{
    const redisReply *t = e->req->element[e->req->elements - 1];
    char secs[32];
    size_t n = t->len < sizeof secs - 1 ? t->len : sizeof secs - 1;
    memcpy(secs, t->str, n);
    secs[n] = '\0';
    char *end;
    double s = strtod(secs, &end);
    if (n == 0 || *end != '\0' || !(s >= 0) || s > 1e9) {
        done_error(r, e, "ERR timeout is not a float or out of range");
        return;
    }
    for (size_t i = 1; i + 1 < e->req->elements; i++)
        if (memchr(e->req->element[i]->str, '\0', e->req->element[i]->len)) {
            done_error(r, e, "ERR dbthrottle relay: a key with a NUL byte is not relayed");
            return;
        }
    if (take_held(r, e))
        return;
    e->deadline = s > 0 ? now_us + (int64_t)(s * 1e6) : 0;
    e->st = E_BLOCKED;
    e->bprev = r->btail;
    e->bnext = NULL;
    if (r->btail)
        r->btail->bnext = e;
    else
        r->bhead = e;
    r->btail = e;
    r->nblocked++;
    cover(r, e);
    ensure_listening(r);
}

/* Keeps a value popped for no client for the next BLPOP of its list (DBT_RELAY_MAX_HELD at most:
 * past that the oldest is dropped). */
static void hold(dbt_relay *r, const redisReply *key, const redisReply *value, int64_t now_us)
{
    held_value *h = calloc(1, sizeof *h);
    if (h && (h->key = malloc(key->len + 1)) && (h->value = malloc(value->len + 1))) {
        memcpy(h->key, key->str, key->len);
        memcpy(h->value, value->str, value->len);
        h->klen = key->len;
        h->vlen = value->len;
        h->until = now_us + DBT_RELAY_HOLD_US;
        if (r->held_tail)
            r->held_tail->next = h;
        else
            r->held = h;
        r->held_tail = h;
        r->nheld++;
    } else {
        if (h)
            free(h->key);
        free(h);
        r->dropped++;
    }
    while (r->nheld > DBT_RELAY_MAX_HELD) {
        held_value *old = r->held;
        r->held = old->next;
        if (!r->held)
            r->held_tail = NULL;
        free(old->key);
        free(old->value);
        free(old);
        r->nheld--;
        r->dropped++;
    }
}

/* A BLPOP about to block takes a held value of its keys instead, the first key first (as Redis
 * pops the first of its keys that holds an element), the oldest value of that key. */
static bool take_held(dbt_relay *r, entry *e)
{
    for (size_t i = 1; i + 1 < e->req->elements; i++) {
        const redisReply *k = e->req->element[i];
        held_value *prev = NULL;
        for (held_value *h = r->held; h; prev = h, h = h->next) {
            if (h->klen != k->len || memcmp(h->key, k->str, k->len) != 0)
                continue;
            bool ok = buf_head(&e->reply, '*', 2) && buf_bulk(&e->reply, h->key, h->klen) &&
                      buf_bulk(&e->reply, h->value, h->vlen);
            if (!ok)
                doom(r, e->client);
            e->st = E_DONE;
            if (prev)
                prev->next = h->next;
            else
                r->held = h->next;
            if (r->held_tail == h)
                r->held_tail = prev;
            free(h->key);
            free(h->value);
            free(h);
            r->nheld--;
            return true;
        }
    }
    return false;
}

/* Answers the blocked entries of the list `hit` (linked by e->hit; each of another client, as a
 * client blocks on one BLPOP at most) with `reply` (NULL: a nil one, their timeout), then moves
 * their clients' queues on. The list is taken whole first: a queue moved on may block again. */
static void answer_blocked(dbt_relay *r, entry *hit, const redisReply *reply, int64_t now_us)
{
    entry *next;
    for (entry *e = hit; e; e = next) {
        next = e->hit; /* read before advance frees e */
        e->hit = NULL;
        unblock(r, e);
        if (!(reply ? buf_reply(&e->reply, reply) : buf_str(&e->reply, "*-1\r\n")))
            doom(r, e->client);
        e->st = E_DONE;
        advance(r, e->client, now_us);
    }
}

/* A value popped from key: to the client blocked longest on it, or held for the next. */
static void route_pop(dbt_relay *r, const redisReply *pop, int64_t now_us)
{
    const redisReply *key = pop->element[0], *value = pop->element[1];
    if (key->len == strlen(r->wake_key) && memcmp(key->str, r->wake_key, key->len) == 0) {
        if (r->wakes_out > 0)
            r->wakes_out--;
        return;
    }
    for (entry *e = r->bhead; e; e = e->bnext) {
        if (!names_key(e, key->str, key->len))
            continue;
        answer_blocked(r, e, pop, now_us);
        return;
    }
    hold(r, key, value, now_us);
}

/* An error in answer to a listening BLPOP: each client blocked on one of its keys gets it, as
 * its own BLPOP would have. */
static void route_error(dbt_relay *r, const blpop_place *b, const redisReply *err, int64_t now_us)
{
    entry *hit = NULL;
    for (entry *e = r->bhead; e; e = e->bnext) {
        bool named = false;
        for (int i = 0; i < b->nkeys && !named; i++)
            named = names_key(e, b->keys[i], strlen(b->keys[i]));
        if (named) {
            e->hit = hit;
            hit = e;
        }
    }
    answer_blocked(r, hit, err, now_us);
}

/* ---- clients ------------------------------------------------------------------------------- */

int dbt_relay_open(dbt_relay *r)
{
    int c = -1;
    for (int i = 0; i < r->nclients; i++)
        if (!r->clients[i].used) {
            c = i;
            break;
        }
    if (c < 0) {
        if (r->nclients >= DBT_RELAY_MAX_CLIENTS)
            return -1;
        client *cs = realloc(r->clients, (size_t)(r->nclients + 1) * sizeof *cs);
        if (!cs)
            return -1;
        r->clients = cs;
        c = r->nclients++;
        memset(&r->clients[c], 0, sizeof r->clients[c]);
    }
    client *cl = &r->clients[c];
    uint32_t gen = cl->gen;
    memset(cl, 0, sizeof *cl);
    cl->gen = gen;
    if (!(cl->reader = redisReaderCreate()))
        return -1;
    cl->used = true;
    r->nused++;
    return c;
}

static bool valid_command(const redisReply *q)
{
    if (q->type != REDIS_REPLY_ARRAY || q->elements == 0)
        return false;
    for (size_t i = 0; i < q->elements; i++)
        if (q->element[i]->type != REDIS_REPLY_STRING)
            return false;
    return true;
}

bool dbt_relay_input(dbt_relay *r, int c, const char *buf, size_t len, int64_t now_us)
{
    client *cl = &r->clients[c];
    if (cl->doomed)
        return false;
    if (redisReaderFeed(cl->reader, buf, len) != REDIS_OK) {
        cl->doomed = true;
        return false;
    }
    for (;;) {
        void *got = NULL;
        if (redisReaderGetReply(cl->reader, &got) != REDIS_OK) {
            (void)buf_str(&cl->out, "-ERR Protocol error\r\n");
            cl->doomed = true;
            return false;
        }
        if (!got)
            break;
        redisReply *q = got;
        entry *e =
            valid_command(q) && cl->queued < DBT_RELAY_MAX_QUEUED ? calloc(1, sizeof *e) : NULL;
        if (!e) {
            freeReplyObject(q);
            (void)buf_str(&cl->out, "-ERR dbthrottle relay: not a command, or too many\r\n");
            cl->doomed = true;
            return false;
        }
        e->client = c;
        e->req = q;
        if (cl->tail)
            cl->tail->next = e;
        else
            cl->head = e;
        cl->tail = e;
        cl->queued++;
    }
    advance(r, c, now_us);
    return !cl->doomed;
}

void dbt_relay_close(dbt_relay *r, int c)
{
    client *cl = &r->clients[c];
    if (!cl->used)
        return;
    entry *next;
    for (entry *e = cl->head; e; e = next) {
        next = e->next;
        if (e->st == E_BLOCKED)
            unblock(r, e);
        free_entry(e);
    }
    if (cl->reader)
        redisReaderFree(cl->reader);
    free(cl->out.p);
    uint32_t gen = cl->gen + 1;
    memset(cl, 0, sizeof *cl);
    cl->gen = gen;
    r->nused--;
}

bool dbt_relay_doomed(const dbt_relay *r, int c)
{
    return r->clients[c].doomed;
}

dbt_relay_buf *dbt_relay_client_out(dbt_relay *r, int c)
{
    return &r->clients[c].out;
}

/* ---- the connections to Redis ------------------------------------------------------------ */

dbt_relay_buf *dbt_relay_link_out(dbt_relay *r, dbt_relay_link l)
{
    return &r->link_out[l];
}

static bool cmd_reply(dbt_relay *r, redisReply *reply, int64_t now_us)
{
    if (r->fifo_len == 0)
        return false; /* a reply nobody asked for: out of step */
    cmd_place p = r->fifo[r->fifo_head];
    r->fifo_head = (r->fifo_head + 1) % r->fifo_cap;
    r->fifo_len--;
    if (p.client < 0 && reply->type == REDIS_REPLY_ERROR) {
        r->own_errors++; /* the driver says it: an ACL without RPUSH, say */
        snprintf(r->own_error, sizeof r->own_error, "%.*s",
                 (int)(reply->len < sizeof r->own_error ? reply->len : sizeof r->own_error - 1),
                 reply->str);
    }
    if (p.client < 0 || !r->clients[p.client].used || r->clients[p.client].gen != p.gen)
        return true; /* the relay's own, or its client left */
    if (!buf_reply(&p.e->reply, reply))
        doom(r, p.client);
    p.e->st = E_DONE;
    advance(r, p.client, now_us);
    return true;
}

static bool listen_reply(dbt_relay *r, redisReply *reply, int64_t now_us)
{
    if (r->nblpops == 0)
        return false;
    blpop_place b = r->blpops[r->blpop_head];
    r->blpop_head = (r->blpop_head + 1) % DBT_RELAY_MAX_BLPOPS;
    r->nblpops--;
    if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2 &&
        reply->element[0]->type == REDIS_REPLY_STRING &&
        reply->element[1]->type == REDIS_REPLY_STRING)
        route_pop(r, reply, now_us);
    else if (reply->type == REDIS_REPLY_ERROR)
        route_error(r, &b, reply, now_us);
    free_blpop(&b);
    if (r->nblpops == 0 && r->nblocked == 0)
        r->wakes_out = 0; /* any left are popped as extra returns later: fewer is never wrong */
    ensure_listening(r);
    return true;
}

bool dbt_relay_reply(dbt_relay *r, dbt_relay_link l, redisReply *reply, int64_t now_us)
{
    bool ok = l == DBT_RELAY_CMD ? cmd_reply(r, reply, now_us) : listen_reply(r, reply, now_us);
    freeReplyObject(reply);
    return ok;
}

void dbt_relay_link_lost(dbt_relay *r, dbt_relay_link l)
{
    r->link_up[l] = false;
    r->link_out[l].off = r->link_out[l].len = 0;
    if (l == DBT_RELAY_CMD) {
        for (size_t i = 0; i < r->fifo_len; i++) {
            cmd_place p = r->fifo[(r->fifo_head + i) % r->fifo_cap];
            if (p.client >= 0 && r->clients[p.client].used && r->clients[p.client].gen == p.gen)
                doom(r, p.client);
        }
        r->fifo_head = r->fifo_len = 0;
    } else {
        for (int i = 0; i < r->nblpops; i++)
            free_blpop(&r->blpops[(r->blpop_head + i) % DBT_RELAY_MAX_BLPOPS]);
        r->blpop_head = r->nblpops = 0;
        r->wakes_out = 0;
        for (entry *e = r->bhead; e; e = e->bnext)
            doom(r, e->client);
    }
}

void dbt_relay_server_changed(dbt_relay *r)
{
    for (int l = 0; l < 2; l++)
        dbt_relay_link_lost(r, (dbt_relay_link)l);
    for (int c = 0; c < r->nclients; c++)
        if (r->clients[c].used)
            doom(r, c);
}

void dbt_relay_link_ready(dbt_relay *r, dbt_relay_link l, int64_t now_us)
{
    (void)now_us;
    r->link_up[l] = true;
    if (l == DBT_RELAY_LISTEN)
        ensure_listening(r);
}

/* ---- time ---------------------------------------------------------------------------------- */

void dbt_relay_tick(dbt_relay *r, int64_t now_us)
{
    while (r->held && r->held->until <= now_us) {
        held_value *h = r->held;
        r->held = h->next;
        if (!r->held)
            r->held_tail = NULL;
        free(h->key);
        free(h->value);
        free(h);
        r->nheld--;
        r->dropped++;
    }
    entry *hit = NULL;
    for (entry *e = r->bhead; e; e = e->bnext)
        if (e->deadline != 0 && e->deadline <= now_us) {
            e->hit = hit;
            hit = e;
        }
    answer_blocked(r, hit, NULL, now_us);
}

int64_t dbt_relay_next_deadline(const dbt_relay *r)
{
    int64_t next = r->held ? r->held->until : INT64_MAX;
    for (const entry *e = r->bhead; e; e = e->bnext)
        if (e->deadline != 0 && e->deadline < next)
            next = e->deadline;
    return next;
}

dbt_relay_counts dbt_relay_count(const dbt_relay *r)
{
    return (dbt_relay_counts){.clients = r->nused,
                              .blocked = r->nblocked,
                              .blpops = r->nblpops,
                              .pending = (int)r->fifo_len,
                              .held = r->nheld,
                              .dropped = r->dropped,
                              .own_errors = r->own_errors,
                              .own_error = r->own_error};
}

int64_t dbt_relay_reconnect_after(int64_t stood_us, int *brief)
{
    if (stood_us >= DBT_RELAY_BRIEF_LINK_US) {
        *brief = 0;
        return 0;
    }
    if (*brief < 16)
        (*brief)++;
    if (*brief == 1)
        return 0;
    int64_t after = DBT_RELAY_RECONNECT_US << (*brief - 2);
    return after < DBT_RELAY_RECONNECT_MAX_US ? after : DBT_RELAY_RECONNECT_MAX_US;
}
