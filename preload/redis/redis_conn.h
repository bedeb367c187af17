/* redis_conn.h - one Redis connection: connect, AUTH, SELECT, timeouts, scripts by EVALSHA. */
#ifndef DBT_REDIS_CONN_H
#define DBT_REDIS_CONN_H

#include "config.h"
#include "scripts.h"

#include <hiredis.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

/* Fire-and-forget commands a connection may have in flight before it must read their replies. */
#define DBT_MAX_PENDING 32

/* INFO's "name:value" line's value, copied into out (cap bytes); false when absent. */
bool dbt_redis_info_field(const char *info, const char *name, char *out, size_t cap);

/* What the caller of a fire-and-forget command names it by, to learn that it failed. */
#define DBT_REDIS_TAG_LEN 80

typedef struct {
    redisContext *ctx;
    int64_t timeout_ms; /* command timeout (socket send and receive) */
    int64_t armed_ms;   /* the socket's timeout now (a budget may have shortened it) */
    int npending;       /* replies still to read, oldest first */
    /* What the connect read in INFO: a server that may evict the pool's keys or cannot run the
     * scripts ("" when none; the library refuses such a server, the operator's commands only
     * show it), and whether INFO was refused (an ACL without +info: nothing could be checked). */
    char server_problem[200];
    bool info_refused;
    char version[32]; /* redis_version, as INFO said it ("" when INFO was refused) */
    /* Redis Cluster (cluster.c): the node this connection reached, the slot it was made for (-1:
     * none), the slot map's generation then, whether INFO said cluster_enabled:1, and the era
     * token a slot migrated whole lets its calls adopt (dbt_cluster_adopt_token; "" if none). */
    char node_host[256];
    int node_port;
    int slot;
    uint64_t cluster_gen;
    bool cluster_node;
    char adopt_token[48];
    struct {
        char *cmd; /* the formatted command, kept to re-send it after a NOSCRIPT */
        size_t len;
        char tag[DBT_REDIS_TAG_LEN]; /* the caller's name for it; "" if none */
    } pending[DBT_MAX_PENDING];
    /* Tags of fire-and-forget commands that failed (an error reply, or a connection that broke
     * before their reply was read: they may not have run), until dbt_redis_take_failed. */
    char failed[DBT_MAX_PENDING][DBT_REDIS_TAG_LEN];
    int nfailed;
} dbt_redis;

/* SIGPIPE blocked in this thread across a write to a socket, and consumed if the write raised it
 * (every dbt_redis_* call below already does this; for direct hiredis writes). */
typedef struct {
    sigset_t old;
    bool was_pending;
} dbt_sigpipe_guard;
void dbt_sigpipe_block(dbt_sigpipe_guard *g);
void dbt_sigpipe_restore(dbt_sigpipe_guard *g);

/* Connects with cfg's URL and timeout, authenticates, selects the db, marks the socket
 * close-on-exec, loads the scripts and reads INFO (see server_problem). Returns NULL with a
 * one-line message (without the password) in err; dbt_redis_error_permanent (redis_errors.h)
 * tells a configuration error from an outage by it. */
dbt_redis *dbt_redis_connect(const dbt_config *cfg, char *err);
void dbt_redis_free(dbt_redis *r);

/* The same for the keys of one pool: `route` is the pool's key base (dbt_keys.base, which
 * carries its {pool} hash tag). With Redis Cluster (cluster.h) the connection goes to the
 * primary that serves the route's slot; else, as dbt_redis_connect (route NULL: always). */
dbt_redis *dbt_redis_connect_for(const dbt_config *cfg, const char *route, char *err);

/* A server other than the URL's: a sentinel or a cluster node. */
typedef struct {
    bool is_unix;
    const char *host;
    int port;
    const char *path;
} dbt_endpoint;
/* Connects to ep and authenticates with user/password when given: no SELECT, no scripts, no
 * INFO. For probes (CLUSTER SLOTS, ROLE). */
dbt_redis *dbt_redis_open(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                          const char *password, char *err);
/* A full connect (as dbt_redis_connect) to ep instead of the URL's host: a cluster node an ASK
 * redirection names. */
dbt_redis *dbt_redis_connect_at(const dbt_config *cfg, const dbt_endpoint *ep, char *err);

/* True once an I/O or protocol error has made the connection unusable. */
bool dbt_redis_broken(const dbt_redis *r);

/* A time budget for this thread's Redis calls until dbt_redis_budget_end: connects, writes and
 * reads made meanwhile share `ms` in all, so an operation of several steps (a connect, its AUTH
 * and SCRIPT LOADs, the command, a NOSCRIPT repair) costs at most DBTHROTTLE_REDIS_TIMEOUT when
 * Redis hangs, not that much per step. Nested budgets keep the earlier deadline. Returns what
 * dbt_redis_budget_end must restore. */
int64_t dbt_redis_budget_begin(int64_t ms);
void dbt_redis_budget_end(int64_t saved);

/* True when the connection cannot be used: broken, or (with no reply owed) closed by the server
 * while it sat idle, as every pooled connection is after Redis restarts. Costs one recv(2)
 * that does not block. A stale connection is marked broken. */
bool dbt_redis_stale(dbt_redis *r);

/* Sets the socket receive timeout (e.g. BLPOP's own timeout plus the command timeout). */
bool dbt_redis_set_timeout(dbt_redis *r, int64_t ms);

/* Runs a command and returns its reply (free with freeReplyObject), or NULL with a message in
 * err. An error reply is returned as NULL too, with its text in err. Replies of earlier
 * fire-and-forget commands are read first. */
redisReply *dbt_redis_command(dbt_redis *r, int argc, const char **argv, const size_t *lens,
                              char *err);

/* Runs a script by EVALSHA with the SHA1 computed at build time; on NOSCRIPT (a restarted or
 * flushed Redis) loads it with SCRIPT LOAD and runs it again. Returns like dbt_redis_command. */
redisReply *dbt_redis_eval(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, char *err);

/* Sends a script without waiting for its reply: the reply is read (and a NOSCRIPT repaired) by
 * the next command on this connection, or by dbt_redis_drain. If it then fails, `tag` (NULL: not
 * wanted) is kept for dbt_redis_take_failed. */
bool dbt_redis_eval_nowait(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, const char *tag, char *err);

/* Copies out (at most cap) and forgets the tags of the fire-and-forget commands found failed. */
int dbt_redis_take_failed(dbt_redis *r, char (*tags)[DBT_REDIS_TAG_LEN], int cap);

/* Reads the replies of fire-and-forget commands. False when one failed (message in err; the
 * others are still read unless the connection broke). */
bool dbt_redis_drain(dbt_redis *r, char *err);

/* Loads a script with SCRIPT LOAD and checks that Redis computed the SHA1 we compiled in. */
bool dbt_redis_load_script(dbt_redis *r, const dbt_script *s, char *err);

#endif
