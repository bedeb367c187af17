/* relay.h - one relay per host, user and Redis target (docs/design.md, "One relay per host"):
 * a process of the host (the speaker) owns two connections to Redis and carries the commands
 * of the host's other processes over a Unix socket in the user's share directory, so that the
 * host's connections to Redis do not grow with its processes. With DBTHROTTLE_HOST_RELAY=on. */
#ifndef DBT_RELAY_H
#define DBT_RELAY_H

#include "config.h"
#include "redis_conn.h"

/* The user's own share directory (an fd, which is dup'd; the first one given is kept), where the
 * relay's socket and lock live: the one the host's segment is in (sem/sharing.c gives it once
 * the segment is attached). Until then, connections go directly to Redis. */
void dbt_relay_set_dir(int dirfd);

/* A connection to cfg's Redis through the host's relay, made ready (dbt_redis_ready), or NULL:
 * relaying is off or does not apply (Sentinel, Cluster), or no relay could be used now (then
 * *retry_us says when one may be: the caller connects directly, and replaces that connection
 * with a relayed one then; 0: never; *stalled: the relay's speaker was found stopped, and the
 * time spent on it was not Redis'). When nobody speaks for the host, this process takes the lock
 * and starts its relay, and gets NULL with *retry_us a second ahead: its own first connection
 * is direct (the relay's connections to Redis are made meanwhile). The relay reads cfg until it
 * stops: see dbt_relay_forget_config. */
dbt_redis *dbt_relay_connect(const dbt_config *cfg, int64_t *retry_us, bool *stalled, char *err);

/* A relayed connection broke (route.c's watch, and the relay's own while connecting): by a
 * stall (the speaker stopped: dbt_relay_suspect), or by a reset (the relay ended:
 * dbt_relay_gone). Nothing for another connection. */
void dbt_relay_broken(dbt_redis *r);

/* Whether this process speaks for its host (its relay runs). */
bool dbt_relay_speaking(void);

/* At the process' exit, after its last calls: if it speaks, its relay stops taking clients and
 * lets the lock go at once (newcomers elect the next speaker), answers within 100 ms what it was
 * asked, then closes its clients, who connect to the next speaker. No relay starts after this. */
void dbt_relay_stop(void);

/* cfg is about to be freed (dbt_client_free: the dbthrottle command and the benches free theirs;
 * the library's lives until the process ends): a relay started with it stops first, answering
 * what it had read (within DBTHROTTLE_REDIS_TIMEOUT), and this waits until it no longer reads
 * cfg. Its clients go to the next speaker, or direct. Nothing if this process does not speak
 * with cfg. */
void dbt_relay_forget_config(const dbt_config *cfg);

/* A relayed call got no reply within its time (half of DBTHROTTLE_REDIS_TIMEOUT): the speaker is
 * stopped or starved. For DBT_RELAY_SUSPECT_US this process connects directly, and the relayed
 * connections made before (an older dbt_relay_generation) are given up. */
#define DBT_RELAY_SUSPECT_US INT64_C(10000000)
void dbt_relay_suspect(void);
/* Relayed connections broke under a call several times in a row (speakers that ended one after
 * another, or whose own connections to Redis failed): this process connects directly for a
 * while (a second, doubled at each failure in a row, as when no relay can be used), and the
 * connections made meanwhile go back through the relay later (dbt_redis_outdated). */
void dbt_relay_avoid(void);
uint64_t dbt_relay_generation(void);
/* A connection made at relay generation `gen` was reset by its relay: that relay ended, and the
 * process' other connections to it are given up too (a newer generation), rather than each
 * failing a call in turn. */
void dbt_relay_gone(uint64_t gen);

#endif
