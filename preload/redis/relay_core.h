/* relay_core.h - the host relay's decisions (docs/design.md, "One relay per host"), with no I/O:
 * the commands of many local clients over two connections to Redis, one for commands and one
 * for listening. The driver (the relay's thread) feeds it what the clients' sockets and the two
 * Redis connections read, and writes out what it says: bytes for each client, bytes for each
 * connection to Redis, clients to close. Nothing here reads a clock: times are passed in.
 *
 * What it keeps of Redis' behaviour, for a client that cannot tell the relay from Redis:
 *   - a client's replies come in the order of its commands, and a BLPOP holds up that client's
 *     later commands until it is answered;
 *   - a value pushed to a list goes to the client blocked longest on that list;
 *   - a value popped for no client (it left, or timed out, after the BLPOP was sent) is kept for
 *     the next BLPOP of its list, as Redis would have kept it in the list.
 * AUTH and SELECT are answered here, against the relay's own user, password and database; the
 * commands the library never sends are refused (relay_core.c's table says which are relayed). */
#ifndef DBT_RELAY_CORE_H
#define DBT_RELAY_CORE_H

#include <hiredis.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bytes waiting to be written; the driver writes from p + off and advances off
 * (dbt_relay_buf_consumed). */
typedef struct {
    char *p;
    size_t off, len, cap;
} dbt_relay_buf;
void dbt_relay_buf_consumed(dbt_relay_buf *b, size_t n);

/* The two connections to Redis. */
typedef enum { DBT_RELAY_CMD, DBT_RELAY_LISTEN } dbt_relay_link;

/* What the relay speaks for: AUTH and SELECT of a client are checked against these. user NULL:
 * AUTH with a password alone (Redis' default user); password NULL: no AUTH needed; the list
 * `wake_key`, which only the relay pops, ends its listening BLPOPs when their keys must change
 * (a list of the pool's namespace, so that an ACL that lets the library use its keys lets the
 * relay push it). */
typedef struct {
    const char *user;
    const char *password;
    int db;
    const char *wake_key;
} dbt_relay_conf;

/* BLPOPs kept in flight on the listening connection: Redis serves the next one as soon as it
 * answered one, so this many grants can come per round trip (as sem/listener.c's MAX_BLPOPS). */
#define DBT_RELAY_MAX_BLPOPS 8
/* The listening BLPOP's own timeout (s): it only bounds how long one outlives its clients. */
#define DBT_RELAY_BLPOP_SECONDS 30
/* The relay's wake list lives this long (ms) after its last push. */
#define DBT_RELAY_WAKE_TTL_MS 60000
/* Values popped for no client are kept for the next BLPOP of their list this long, and this many
 * at most: a grant dropped so is found by its process' next renewal, as one lost with a broken
 * listener connection is. */
#define DBT_RELAY_HOLD_US  INT64_C(30000000)
#define DBT_RELAY_MAX_HELD 256
/* Commands of one client queued and not answered yet, at most: the library pipelines a few
 * (sem/listener.c's BLPOPs, releases not waited for); a client past this is closed. */
#define DBT_RELAY_MAX_QUEUED 256
/* Clients at once, at most: one more is refused (the driver closes it, and it connects directly).
 */
#define DBT_RELAY_MAX_CLIENTS 4096

typedef struct dbt_relay dbt_relay;

/* NULL when out of memory. The strings of conf are copied. */
dbt_relay *dbt_relay_new(const dbt_relay_conf *conf);
void dbt_relay_free(dbt_relay *r);

/* A client connected: its handle (>= 0), or -1 when the relay has DBT_RELAY_MAX_CLIENTS. */
int dbt_relay_open(dbt_relay *r);
/* What client c sent, at now_us. False: it broke the protocol, or queued too much; it is doomed
 * (dbt_relay_doomed) and its input is not read any more. */
bool dbt_relay_input(dbt_relay *r, int c, const char *buf, size_t len, int64_t now_us);
/* Client c left (or the driver closed it): forgotten; replies still to come for it are dropped,
 * and values popped for it are given back. */
void dbt_relay_close(dbt_relay *r, int c);
/* Whether client c is to be closed once its output is written (it broke the protocol, or a
 * connection to Redis broke with a command of its in flight: like a connection to Redis that
 * broke, which is what it sees). */
bool dbt_relay_doomed(const dbt_relay *r, int c);
/* The bytes for client c (its replies, in order). */
dbt_relay_buf *dbt_relay_client_out(dbt_relay *r, int c);

/* The bytes to send on a connection to Redis. */
dbt_relay_buf *dbt_relay_link_out(dbt_relay *r, dbt_relay_link l);
/* The next reply read on connection l, at now_us; taken over (freed here). False: nothing was
 * asked on l that it could answer (out of step: the driver breaks the connection). */
bool dbt_relay_reply(dbt_relay *r, dbt_relay_link l, redisReply *reply, int64_t now_us);
/* Connection l broke: what was sent on it is in doubt, and what was still to send is dropped.
 * The clients with a command in flight on it (on the listening one: the clients blocked) are
 * doomed, as a client of a broken connection. Commands that come meanwhile wait for it. The
 * driver connects l again (AUTH and SELECT are its own), and calls dbt_relay_link_ready. */
void dbt_relay_link_lost(dbt_relay *r, dbt_relay_link l);
/* The server the relay reached again is another (INFO's run_id: a restart, a failover): both
 * connections' state goes, and every client is doomed, as a restart closes every connection to
 * Redis: each connects anew and reads the server's era again. One kept open would call the
 * scripts with the era of a server that is gone, and a restart from nothing would not be
 * quarantined (docs/design.md, "Failover and data loss"). */
void dbt_relay_server_changed(dbt_relay *r);
/* Connection l is up again (after dbt_relay_link_lost): listening may start again. */
void dbt_relay_link_ready(dbt_relay *r, dbt_relay_link l, int64_t now_us);

/* A connection that failed to connect is tried again this long after. */
#define DBT_RELAY_RECONNECT_US INT64_C(200000)
/* A connection that broke within this long of being made broke "at once". */
#define DBT_RELAY_BRIEF_LINK_US INT64_C(1000000)
/* The longest pause before connecting again a connection that keeps breaking at once. */
#define DBT_RELAY_RECONNECT_MAX_US INT64_C(5000000)
/* How long after connection l broke, having stood stood_us, the driver connects it again;
 * *brief counts the breaks in a row that came at once (the driver keeps one per connection,
 * from 0). One that stood (a restart, a speaker resumed) or the first that did not: at once, as a
 * direct client connects again at its next call (a short DBTHROTTLE_REDIS_TIMEOUT must not be
 * spent on a pause). Breaking at once again and again (a proxy, or a server at maxclients, that
 * closes each connection once made): DBT_RELAY_RECONNECT_US, doubled at each up to
 * DBT_RELAY_RECONNECT_MAX_US, not a new connection to Redis per round trip. */
int64_t dbt_relay_reconnect_after(int64_t stood_us, int *brief);

/* Answers the BLPOPs whose timeout passed at now_us (a nil reply). */
void dbt_relay_tick(dbt_relay *r, int64_t now_us);
/* When dbt_relay_tick next has something to do (INT64_MAX: never). */
int64_t dbt_relay_next_deadline(const dbt_relay *r);

/* Counts, for the driver's status and the tests. */
typedef struct {
    int clients;           /* connected */
    int blocked;           /* with a BLPOP waiting */
    int blpops;            /* in flight on the listening connection */
    int pending;           /* sent on the command connection, not answered yet */
    int held;              /* values popped for no client, kept for the next BLPOP of their list */
    long long dropped;     /* held values dropped (too many, or kept DBT_RELAY_HOLD_US) */
    long long own_errors;  /* error replies to the relay's own commands (its wake list's) */
    const char *own_error; /* the last one ("" none) */
} dbt_relay_counts;
dbt_relay_counts dbt_relay_count(const dbt_relay *r);

#endif
