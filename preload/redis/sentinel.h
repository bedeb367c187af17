/* sentinel.h - the master of a redis-sentinel:// URL, found and followed as Sentinel's client
 * rules say: sentinels asked in turn (the one that answered first next time), the master's ROLE
 * checked, the address forgotten on any sign that it is no longer the master, and +switch-master
 * heard on one subscriber connection per process. */
#ifndef DBT_SENTINEL_H
#define DBT_SENTINEL_H

#include "redis_conn.h"
#include "sentinel_switch.h"

#include <stdint.h>

/* A connection to the master of cfg's Sentinel URL: found through the sentinels (or the address
 * found last), authenticated with the URL's credentials, ROLE said master. No SELECT, no scripts
 * (dbt_redis_ready goes on with those). *gen: the generation it was found at. NULL with a
 * one-line message in err: "redis-sentinel: ..." is an outage (no sentinel answered, no master
 * reachable), "Redis Sentinel ..." a configuration error (the master name unknown to every
 * sentinel that answered, the sentinels' password refused). Starts the subscriber. */
dbt_redis *dbt_sentinel_connect_master(const dbt_config *cfg, uint64_t *gen, char *err);

/* Goes up each time the master changes or is found wrong (never 0): a connection made at an
 * older one is to a server that may no longer be the master. Lock-free. */
uint64_t dbt_sentinel_generation(void);

/* The master found at `generation` failed (a connection error, a timeout, READONLY): the next
 * connect asks the sentinels again. A no-op when a newer generation already replaced it. */
void dbt_sentinel_master_failed(uint64_t generation);

#endif
