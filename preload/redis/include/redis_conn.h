/* redis_conn.h - one Redis connection: connect, AUTH, SELECT, timeouts, scripts by EVALSHA.
 * hiredis' reply reader and command formatter over transport.c's socket (plain or TLS).
 *
 * A connection goes to the server it is given and knows nothing of why: which server a
 * configuration's keys live on (a Sentinel's master, a Cluster node) is route.h's to decide, and
 * it hears what it must of the connection through its watch. */
#ifndef DBT_REDIS_CONN_H
#define DBT_REDIS_CONN_H

#include "config.h"
#include "scripts.h"
#include "transport.h"

#include <hiredis.h>
#include <stdbool.h>
#include <stdint.h>

/* Fire-and-forget commands a connection may have in flight before it must read their replies. */
#define DBT_MAX_PENDING 32

/* INFO's "name:value" line's value, copied into out (cap bytes); false when absent. */
bool dbt_redis_info_field(const char *info, const char *name, char *out, size_t cap);

/* What the caller of a fire-and-forget command names it by, to learn that it failed. */
#define DBT_REDIS_TAG_LEN 80

typedef struct dbt_redis dbt_redis;

/* What the layer that chose a connection's server (route.c) hears of it. Either may be NULL. */
typedef struct {
    /* The connection has just been given up (an I/O error, a timeout, READONLY, closed by the
     * server): its server may no longer be the one it should be. */
    void (*broken)(dbt_redis *r);
    /* An error reply came (Redis' text): true when it says the connection went to the wrong
     * server, which then gives the connection up. */
    bool (*misrouted)(dbt_redis *r, const char *reply);
} dbt_redis_watch;

struct dbt_redis {
    dbt_transport t;
    redisReader *reader; /* hiredis' reply parser, fed with what the transport reads */
    redisReply *early;   /* a reply dbt_redis_readable_now parsed, for dbt_redis_next_reply */
    char *out;           /* commands appended, not written yet */
    size_t outlen, outcap;
    int64_t timeout_ms; /* command timeout: each wait for the socket, within a budget */
    bool broken;        /* an I/O or protocol error: never used again */
    char errstr[160];   /* why it broke */
    char who[300];      /* "redis HOST:PORT" (or unix:PATH): the server, for messages */
    int npending;       /* replies still to read, oldest first */
    /* What the connect read in INFO: a server that may evict the pool's keys or cannot run the
     * scripts ("" when none; the library refuses such a server, the operator's commands only
     * show it), and whether INFO was refused (an ACL without +info: nothing could be checked). */
    char server_problem[200];
    bool info_refused;
    char version[32]; /* redis_version, as INFO said it ("" when INFO was refused) */
    /* The server's era (docs/design.md, "Failover and data loss"): run_id, new at every start of
     * a server, and when it started (ms, Redis' clock: server_time_usec - uptime). "" and 0 when
     * INFO was refused: then no failover or restart can be told. */
    char run_id[41];
    int64_t started_ms;
    /* Redis' clock against this process' monotonic one, read from the same INFO: how far ahead
     * Redis' clock (ms) is, INFO's server_time_usec minus the monotonic time before INFO was sent
     * (an upper bound: Redis read its time after the send), and when (dbt_now_us; 0: unknown). A
     * renewal states by it, on Redis' clock, until when its leases may still be believed in. */
    int64_t clock_ahead_ms, clock_at_us;
    /* The host and port this connection reached ("" and 0 for a unix socket), and whether INFO
     * said cluster_enabled:1. */
    char node_host[256];
    int node_port;
    bool cluster_node;
    /* A connection to the host's relay (relay.h), not to Redis itself; and whether it broke by
     * a reset (EPIPE, ECONNRESET): the relay closed it without reading what was last written. */
    bool relayed, reset;
    /* A relayed call's reply did not come in time, and the relay's speaker is stopped (relay.h). */
    bool stalled;
    /* Relayed: the relay closed it after reading what was written (its speaker was killed, or
     * ended): what it read may have reached Redis or not. */
    bool ended;
    pid_t relay_pid; /* relayed: the speaker (SO_PEERCRED); 0 unknown */
    /* The routing layer's (route.h): who hears of this connection (NULL: nobody), and its notes
     * on where it sent it. Written by route.c only; redis_conn.c reads none of the notes. */
    const dbt_redis_watch *watch;
    struct {
        uint64_t sentinel_gen; /* the Sentinel generation the master was found at; 0: none */
        int slot;              /* the hash slot it was made for; -1: none */
        uint64_t cluster_gen;  /* the Cluster slot map's generation then */
        char adopt_token[48];  /* the era token its calls adopt (cluster.h); "" if none */
        uint64_t relay_gen;    /* relayed: dbt_relay_generation() when it was made */
        /* Direct while the host's relay could not be used: replaced (dbt_redis_outdated) from
         * then, or once relay_gen changes (the share directory came, a relay stalled or ended);
         * 0: never. */
        int64_t relay_retry_us;
    } route;
    struct {
        char *cmd; /* the formatted command, kept to re-send it after a NOSCRIPT */
        size_t len;
        char tag[DBT_REDIS_TAG_LEN]; /* the caller's name for it; "" if none */
    } pending[DBT_MAX_PENDING];
    /* Tags of fire-and-forget commands that failed (an error reply, or a connection that broke
     * before their reply was read: they may not have run), until dbt_redis_take_failed. */
    char failed[DBT_MAX_PENDING][DBT_REDIS_TAG_LEN];
    int nfailed;
};

/* Where to connect: a TCP host and port, or a unix socket path. */
typedef struct {
    bool is_unix;
    const char *host;
    int port;
    const char *path;
} dbt_endpoint;

/* Connects to ep with cfg's timeout, TLS when cfg's URL is rediss:// (the certificate verified
 * against ep->host), and AUTH with user/password when password is given; no SELECT, no INFO, no
 * scripts: enough for sentinels and cluster probes. Returns NULL with a one-line message (without
 * the password) in err; dbt_redis_error_permanent (redis_errors.h) tells a configuration error
 * from an outage by it. */
dbt_redis *dbt_redis_open(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                          const char *password, char *err);

/* What makes a connection dbt_redis_open made one for the pool's keys: SELECT cfg's db, INFO
 * (see server_problem) and every script loaded, in one round trip. Returns r, or frees it and
 * returns NULL with a message like dbt_redis_open's (NULL r: NULL, err untouched). */
dbt_redis *dbt_redis_ready(const dbt_config *cfg, dbt_redis *r, char *err);
/* A connection for commands written blind: connected to ep (plain TCP or a unix socket, not TLS,
 * whose handshake the server must answer), with AUTH and SELECT appended, not sent, and no INFO,
 * no scripts loaded. The caller appends its commands (dbt_redis_append_eval), writes them all at
 * once (dbt_redis_flush) and closes it without waiting for a reply: Redis runs them whenever it
 * reads them, a stalled or slow one after the caller has given up on it. For commands that may
 * run late or twice (giving a permit back); such a connection was never checked (INFO), so it
 * is never used for anything else. NULL with a message in err. */
dbt_redis *dbt_redis_open_blind(const dbt_config *cfg, const dbt_endpoint *ep, const char *user,
                                const char *password, char *err);
/* Appends EVALSHA of s, whose reply nobody reads (a connection of dbt_redis_open_blind's). The
 * script must already be loaded in Redis: one that is not fails there, unseen. */
bool dbt_redis_append_eval(dbt_redis *r, const dbt_script *s, int nkeys, const char *const *keys,
                           int nargs, const char *const *args, char *err);
/* Closes the connection. Sends nothing (not even TLS' close_notify): safe in a fork child for
 * its parent's connections. */
void dbt_redis_free(dbt_redis *r);
/* r is named (dbt_redis_adopt) or no longer named (dbt_redis_disown) by an owner whose own
 * after-fork handler closes what it names (a pool's connections and listener): until adopted, and
 * once disowned, a fork()ed child closes its copy of r's socket by itself (transport.h). Call both
 * under the lock that a fork waits for and that guards the owner's list. */
void dbt_redis_adopt(dbt_redis *r);
void dbt_redis_disown(dbt_redis *r);

/* True once an I/O or protocol error has made the connection unusable. */
bool dbt_redis_broken(const dbt_redis *r);
/* A call on r failed without reaching Redis, so it may be made again on another connection: r
 * goes to the host's relay, and the relay reset it (it ended, or was killed) before reading the
 * call. A relay that read a call and ended closes with no reset: that call is in doubt. */
bool dbt_redis_undelivered(const dbt_redis *r);

/* A time budget for this thread's Redis calls until dbt_redis_budget_end: connects, writes and
 * reads made meanwhile share `ms` in all, so an operation of several steps (a connect, its AUTH
 * and SCRIPT LOADs, the command, a NOSCRIPT repair) costs at most DBTHROTTLE_REDIS_TIMEOUT when
 * Redis hangs, not that much per step. Nested budgets keep the earlier deadline. Returns what
 * dbt_redis_budget_end must restore. */
int64_t dbt_redis_budget_begin(int64_t ms);
void dbt_redis_budget_end(int64_t saved);
/* A budget of ms from now whatever the caller's: for a step made again after the host's relay
 * stalled, whose time was the relay's, not Redis'. Restored by dbt_redis_budget_end. */
int64_t dbt_redis_budget_anew(int64_t ms);
/* True (once) when this thread's last failed call failed because its budget ran out before its
 * request was written, no wait for Redis having timed out in the budget: the time went to this
 * process (stopped, not scheduled), not to Redis, and no outage is to be noted for it. */
bool dbt_redis_take_unsent(void);

/* Whether process pid is stopped (SIGSTOP, ^Z, a debugger): its state in /proc is T or t. False
 * when that cannot be read (no /proc: a stall is then taken for a slow Redis). The host relay's
 * speaker is looked at so (relay.c, and each wait on a relayed connection). */
bool dbt_process_stopped(pid_t pid);

/* True when the connection cannot be used: broken, or (with no reply owed) closed by the server
 * while it sat idle, as every pooled connection is after Redis restarts. Costs one recv(2) that
 * does not block. A closed connection is marked broken. (dbt_redis_stale, route.h, also asks
 * whether it still goes where it should.) */
bool dbt_redis_closed(dbt_redis *r);

/* Gives the connection up (broken from now on, `why` its message). With owe_pending, the
 * fire-and-forget commands whose replies are still owed become failed (dbt_redis_take_failed):
 * their callers send them again elsewhere. */
void dbt_redis_give_up(dbt_redis *r, const char *why, bool owe_pending);

/* Runs a command and returns its reply (free with freeReplyObject), or NULL with a message in
 * err. An error reply is returned as NULL too, with its text in err. Replies of earlier
 * fire-and-forget commands are read first. */
redisReply *dbt_redis_command(dbt_redis *r, int argc, const char **argv, const size_t *lens,
                              char *err);

/* Runs a script by EVALSHA with the SHA1 computed at build time; on NOSCRIPT (a restarted or
 * flushed Redis) loads it with SCRIPT LOAD and runs it again, the two written together: one round
 * trip. Returns like dbt_redis_command. */
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

/* ---- for a listener that polls the socket itself (a pipeline of BLPOPs) ------------------ */

/* The socket, for poll(2). */
int dbt_redis_fd(const dbt_redis *r);
/* True when a reply, or TLS bytes that poll(2) cannot see, are already here: read them before
 * polling. */
bool dbt_redis_readable_now(dbt_redis *r);
/* Appends a command to send (dbt_redis_flush writes it); its reply is the caller's to read. */
bool dbt_redis_append(dbt_redis *r, int argc, const char **argv, const size_t *lens, char *err);
/* Writes every appended command (waits for the socket within the command timeout). */
bool dbt_redis_flush(dbt_redis *r, char *err);
/* Reads what the socket has, without waiting. False when the connection closed or failed. */
bool dbt_redis_read_available(dbt_redis *r, char *err);
/* The next complete reply already read (no I/O): 1 with *out set (free with freeReplyObject;
 * error replies too), 0 when none is complete yet, -1 on a protocol error (err). */
int dbt_redis_next_reply(dbt_redis *r, redisReply **out, char *err);

#endif
