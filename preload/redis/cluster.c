/* cluster.c - Redis Cluster: slots, the slot map, redirections (see cluster.h). */
#include "cluster.h"

#include "redis_conn.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint16_t dbt_crc16(const char *buf, size_t len)
{
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((unsigned char)buf[i] << 8);
        for (int bit = 0; bit < 8; bit++)
            crc = crc & 0x8000 ? (uint16_t)(crc << 1 ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

int dbt_cluster_slot(const char *key, size_t len)
{
    const char *open = memchr(key, '{', len);
    if (open) {
        size_t from = (size_t)(open - key) + 1;
        const char *close = memchr(open + 1, '}', len - from);
        if (close && close > open + 1)
            return dbt_crc16(open + 1, (size_t)(close - open - 1)) & (DBT_CLUSTER_NSLOTS - 1);
    }
    return dbt_crc16(key, len) & (DBT_CLUSTER_NSLOTS - 1);
}

/* ---- the map ------------------------------------------------------------------------------ */

/* Primaries the map can name (a slot's owner is an index into nodes[]). */
#define MAX_NODES 255
#define NO_NODE   255
/* Slots whose last MOVED is remembered for the adopt token (the most recent ones). */
#define MAX_MOVES 32

static struct {
    pthread_mutex_t mu;
    bool discovered; /* a redis:// URL's server is a cluster node */
    bool refresh;    /* read CLUSTER SLOTS again at the next lookup */
    bool ever_read;  /* CLUSTER SLOTS was read at least once */
    /* The node the last MOVED named: asked first for CLUSTER SLOTS, since a node knows its own
     * new slots before the others learn them by gossip (a seed may still name the old owner). */
    dbt_cluster_node prefer;
    uint8_t owner[DBT_CLUSTER_NSLOTS];
    dbt_cluster_node nodes[MAX_NODES];
    int nnodes;
    struct {
        int slot;
        dbt_cluster_node from;
        bool asked; /* ROLE asked of `from` (token is its answer) */
        char token[DBT_ADOPT_LEN];
    } moves[MAX_MOVES];
    int nmoves, next_move;
} map = {.mu = PTHREAD_MUTEX_INITIALIZER};

static atomic_uint_fast64_t generation = 1;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

/* The lock is never held across I/O, so a fork waits for it a few instructions at most, and the
 * child gets the map whole. */
static void before_fork(void)
{
    pthread_mutex_lock(&map.mu);
}
static void after_fork_parent(void)
{
    pthread_mutex_unlock(&map.mu);
}
static void after_fork_child(void)
{
    pthread_mutex_init(&map.mu, NULL);
}
static void register_fork(void)
{
    (void)pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

static void lock(void)
{
    pthread_once(&fork_once, register_fork);
    pthread_mutex_lock(&map.mu);
}

static void unlock(void)
{
    pthread_mutex_unlock(&map.mu);
}

bool dbt_cluster_routing(const dbt_config *cfg)
{
    if (cfg->redis.cluster)
        return true;
    lock();
    bool d = map.discovered;
    unlock();
    return d;
}

void dbt_cluster_discovered(void)
{
    lock();
    if (!map.discovered) {
        map.discovered = true;
        map.refresh = true;
        atomic_fetch_add(&generation, 1);
    }
    unlock();
}

uint64_t dbt_cluster_generation(void)
{
    return atomic_load(&generation);
}

/* The index of a node in the table, added when new; NO_NODE when the table is full. Lock held. */
static int node_index(const char *host, int port)
{
    for (int i = 0; i < map.nnodes; i++)
        if (map.nodes[i].port == port && strcmp(map.nodes[i].host, host) == 0)
            return i;
    if (map.nnodes == MAX_NODES)
        return NO_NODE;
    snprintf(map.nodes[map.nnodes].host, DBT_CLUSTER_HOST_LEN, "%s", host);
    map.nodes[map.nnodes].port = port;
    return map.nnodes++;
}

bool dbt_cluster_serves(int slot, const char *host, int port)
{
    if (slot < 0 || slot >= DBT_CLUSTER_NSLOTS)
        return true;
    lock();
    int o = map.owner[slot];
    bool yes = !map.ever_read || o == NO_NODE ||
               (map.nodes[o].port == port && strcmp(map.nodes[o].host, host) == 0);
    unlock();
    return yes;
}

void dbt_cluster_node_failed(const char *host, int port)
{
    (void)host;
    (void)port;
    lock();
    map.refresh = true;
    unlock();
}

/* CLUSTER SLOTS' reply: [[start, end, [host, port, id, ...], replicas...], ...]. The map is
 * replaced whole when the reply is well formed. */
static bool apply_slots(const redisReply *rep, char *err)
{
    if (rep->type != REDIS_REPLY_ARRAY || rep->elements == 0) {
        snprintf(err, DBT_ERRLEN, "redis: CLUSTER SLOTS gave no slots (the cluster is not set up)");
        return false;
    }
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
            e->element[0]->type != REDIS_REPLY_INTEGER ||
            e->element[1]->type != REDIS_REPLY_INTEGER ||
            e->element[2]->type != REDIS_REPLY_ARRAY || e->element[2]->elements < 2 ||
            e->element[2]->element[0]->type != REDIS_REPLY_STRING ||
            e->element[2]->element[1]->type != REDIS_REPLY_INTEGER || e->element[0]->integer < 0 ||
            e->element[1]->integer >= DBT_CLUSTER_NSLOTS ||
            e->element[0]->integer > e->element[1]->integer) {
            snprintf(err, DBT_ERRLEN, "redis: unexpected reply to CLUSTER SLOTS");
            return false;
        }
    }
    lock();
    memset(map.owner, NO_NODE, sizeof map.owner);
    for (size_t i = 0; i < rep->elements; i++) {
        const redisReply *e = rep->element[i];
        int n = node_index(e->element[2]->element[0]->str, (int)e->element[2]->element[1]->integer);
        for (long long s = e->element[0]->integer; s <= e->element[1]->integer; s++)
            map.owner[s] = (uint8_t)n;
    }
    map.ever_read = true;
    map.refresh = false;
    atomic_fetch_add(&generation, 1);
    unlock();
    return true;
}

/* Where to ask for the map: the URL's seeds, then every node the map has named. */
static int candidates(const dbt_config *cfg, dbt_cluster_node *out, int cap)
{
    int n = 0;
    lock();
    if (map.prefer.port && n < cap)
        out[n++] = map.prefer;
    unlock();
    if (cfg->redis.nseeds > 0) {
        for (int i = 0; i < cfg->redis.nseeds && n < cap; i++, n++) {
            snprintf(out[n].host, DBT_CLUSTER_HOST_LEN, "%s", cfg->redis.seeds[i].host);
            out[n].port = cfg->redis.seeds[i].port;
        }
    } else if (cfg->redis.host && n < cap) {
        snprintf(out[n].host, DBT_CLUSTER_HOST_LEN, "%s", cfg->redis.host);
        out[n++].port = cfg->redis.port;
    }
    lock();
    for (int i = 0; i < map.nnodes && n < cap; i++) {
        bool dup = false;
        for (int j = 0; j < n && !dup; j++)
            dup = out[j].port == map.nodes[i].port && strcmp(out[j].host, map.nodes[i].host) == 0;
        if (!dup)
            out[n++] = map.nodes[i];
    }
    unlock();
    return n;
}

/* Asks the candidates in turn for CLUSTER SLOTS until one answers. */
static bool read_map(const dbt_config *cfg, char *err)
{
    enum { CAP = 32 };
    dbt_cluster_node *c = malloc(CAP * sizeof *c);
    if (!c) {
        snprintf(err, DBT_ERRLEN, "redis: out of memory");
        return false;
    }
    int n = candidates(cfg, c, CAP);
    int64_t each = cfg->redis_timeout_ms < 500 ? cfg->redis_timeout_ms : 500;
    bool ok = false;
    snprintf(err, DBT_ERRLEN, "redis: no cluster node to ask for CLUSTER SLOTS");
    for (int i = 0; i < n && !ok; i++) {
        int64_t b = dbt_redis_budget_begin(each);
        dbt_endpoint ep = {.host = c[i].host, .port = c[i].port};
        dbt_redis *r = dbt_redis_open(cfg, &ep, cfg->redis.user, cfg->redis.password, err);
        if (r) {
            const char *argv[] = {"CLUSTER", "SLOTS"};
            redisReply *rep = dbt_redis_command(r, 2, argv, NULL, err);
            ok = rep && apply_slots(rep, err);
            if (rep)
                freeReplyObject(rep);
            dbt_redis_free(r);
        }
        dbt_redis_budget_end(b);
    }
    free(c);
    return ok;
}

bool dbt_cluster_node_for(const dbt_config *cfg, int slot, dbt_cluster_node *out, char *err)
{
    lock();
    bool want = map.refresh || !map.ever_read || map.owner[slot] == NO_NODE;
    unlock();
    char rerr[DBT_ERRLEN];
    if (want && !read_map(cfg, rerr)) {
        /* A patched entry (a MOVED) still names the right node: use it if there is one. */
        lock();
        bool known = map.ever_read && map.owner[slot] != NO_NODE;
        unlock();
        if (!known) {
            snprintf(err, DBT_ERRLEN, "%s", rerr);
            return false;
        }
    }
    lock();
    int o = map.owner[slot];
    if (o != NO_NODE)
        *out = map.nodes[o];
    unlock();
    if (o == NO_NODE) {
        snprintf(err, DBT_ERRLEN, "redis: no cluster node serves slot %d (CLUSTER SLOTS)", slot);
        return false;
    }
    return true;
}

int dbt_cluster_primaries(const dbt_config *cfg, dbt_cluster_node *out, int cap, char *err)
{
    lock();
    bool want = map.refresh || !map.ever_read;
    unlock();
    if (want && !read_map(cfg, err))
        return -1;
    int n = 0;
    lock();
    bool used[MAX_NODES] = {false};
    for (int s = 0; s < DBT_CLUSTER_NSLOTS; s++)
        if (map.owner[s] != NO_NODE)
            used[map.owner[s]] = true;
    for (int i = 0; i < map.nnodes && n < cap; i++)
        if (used[i])
            out[n++] = map.nodes[i];
    unlock();
    return n;
}

/* ---- redirections ------------------------------------------------------------------------- */

/* "SLOT HOST:PORT" (the host may be an IPv6 address: the port follows the last ':'). */
static bool parse_target(const char *s, int *slot, dbt_cluster_node *to)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (end == s || *end != ' ' || v < 0 || v >= DBT_CLUSTER_NSLOTS)
        return false;
    const char *addr = end + 1;
    size_t len = strcspn(addr, " \r\n");
    const char *colon = NULL;
    for (const char *p = addr; p < addr + len; p++)
        if (*p == ':')
            colon = p;
    if (!colon || colon == addr || (size_t)(colon - addr) >= DBT_CLUSTER_HOST_LEN)
        return false;
    long port = strtol(colon + 1, &end, 10);
    if (end != addr + len || port < 1 || port > 65535)
        return false;
    if (slot)
        *slot = (int)v;
    if (to) {
        snprintf(to->host, DBT_CLUSTER_HOST_LEN, "%.*s", (int)(colon - addr), addr);
        to->port = (int)port;
    }
    return true;
}

dbt_redirect dbt_cluster_redirect_of(const char *err, int *slot, dbt_cluster_node *to)
{
    if (!err)
        return DBT_REDIR_NONE;
    /* A message of dbt_redis_*: "redis[ WHERE]: REPLY". */
    const char *reply = err;
    if (strncmp(err, "redis", 5) == 0) {
        const char *p = strstr(err, ": ");
        if (p)
            reply = p + 2;
    }
    if (strncmp(reply, "MOVED ", 6) == 0)
        return parse_target(reply + 6, slot, to) ? DBT_REDIR_MOVED : DBT_REDIR_NONE;
    if (strncmp(reply, "ASK ", 4) == 0)
        return parse_target(reply + 4, slot, to) ? DBT_REDIR_ASK : DBT_REDIR_NONE;
    if (strncmp(reply, "TRYAGAIN", 8) == 0 && (reply[8] == ' ' || !reply[8]))
        return DBT_REDIR_TRYAGAIN;
    if (strncmp(reply, "CLUSTERDOWN", 11) == 0 && (reply[11] == ' ' || !reply[11]))
        return DBT_REDIR_DOWN;
    return DBT_REDIR_NONE;
}

bool dbt_cluster_note_moved(const char *text, const char *from_host, int from_port)
{
    int slot;
    dbt_cluster_node to;
    if (strncmp(text, "MOVED ", 6) != 0 || !parse_target(text + 6, &slot, &to))
        return false;
    lock();
    map.discovered = true;
    map.refresh = true;
    map.prefer = to;
    int n = node_index(to.host, to.port);
    if (n != NO_NODE) {
        if (!map.ever_read) /* a redis:// URL's first MOVED: no other slot is known yet */
            memset(map.owner, NO_NODE, sizeof map.owner);
        map.ever_read = true;
        map.owner[slot] = (uint8_t)n;
    }
    /* One pending question per slot: the latest move replaces an earlier one. */
    int m = -1;
    for (int i = 0; i < map.nmoves; i++)
        if (map.moves[i].slot == slot)
            m = i;
    bool same_from = m >= 0 && map.moves[m].from.port == from_port &&
                     strcmp(map.moves[m].from.host, from_host) == 0;
    if (!same_from) {
        if (m < 0) {
            m = map.nmoves < MAX_MOVES ? map.nmoves++ : map.next_move;
            map.next_move = (m + 1) % MAX_MOVES;
        }
        map.moves[m].slot = slot;
        snprintf(map.moves[m].from.host, DBT_CLUSTER_HOST_LEN, "%s", from_host);
        map.moves[m].from.port = from_port;
        map.moves[m].asked = false;
        map.moves[m].token[0] = '\0';
    }
    atomic_fetch_add(&generation, 1);
    unlock();
    return true;
}

/* Asks `from` whether it is still a primary (ROLE) and its run_id (INFO server): "" when it is
 * not, or does not answer. */
static void ask_role(const dbt_config *cfg, const dbt_cluster_node *from, char *token, size_t cap)
{
    token[0] = '\0';
    int64_t each = cfg->redis_timeout_ms < 500 ? cfg->redis_timeout_ms : 500;
    int64_t b = dbt_redis_budget_begin(each);
    char err[DBT_ERRLEN];
    dbt_endpoint ep = {.host = from->host, .port = from->port};
    dbt_redis *r = dbt_redis_open(cfg, &ep, cfg->redis.user, cfg->redis.password, err);
    if (r) {
        const char *role_argv[] = {"ROLE"};
        redisReply *role = dbt_redis_command(r, 1, role_argv, NULL, err);
        bool primary = role && role->type == REDIS_REPLY_ARRAY && role->elements > 0 &&
                       role->element[0]->type == REDIS_REPLY_STRING &&
                       strcmp(role->element[0]->str, "master") == 0;
        if (role)
            freeReplyObject(role);
        if (primary) {
            const char *info_argv[] = {"INFO", "server"};
            redisReply *info = dbt_redis_command(r, 2, info_argv, NULL, err);
            if (info && info->type == REDIS_REPLY_STRING)
                (void)dbt_redis_info_field(info->str, "run_id", token, cap);
            if (info)
                freeReplyObject(info);
        }
        dbt_redis_free(r);
    }
    dbt_redis_budget_end(b);
}

void dbt_cluster_adopt_token(const dbt_config *cfg, int slot, char *out, size_t cap)
{
    out[0] = '\0';
    lock();
    int m = -1;
    for (int i = 0; i < map.nmoves; i++)
        if (map.moves[i].slot == slot)
            m = i;
    dbt_cluster_node from;
    bool ask = m >= 0 && !map.moves[m].asked;
    if (m >= 0) {
        from = map.moves[m].from;
        if (!ask)
            snprintf(out, cap, "%s", map.moves[m].token);
    }
    unlock();
    if (!ask)
        return;
    char token[DBT_ADOPT_LEN];
    ask_role(cfg, &from, token, sizeof token);
    lock();
    /* Unless another MOVED for the slot came meanwhile (then that one is asked next). */
    for (int i = 0; i < map.nmoves; i++)
        if (map.moves[i].slot == slot && map.moves[i].from.port == from.port &&
            strcmp(map.moves[i].from.host, from.host) == 0) {
            map.moves[i].asked = true;
            snprintf(map.moves[i].token, sizeof map.moves[i].token, "%s", token);
        }
    unlock();
    snprintf(out, cap, "%s", token);
}
