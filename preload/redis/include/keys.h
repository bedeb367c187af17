/* keys.h - Redis key names of a pool: PREFIX{POOL}:..., safe for any pool name or prefix. */
#ifndef DBT_KEYS_H
#define DBT_KEYS_H

#include <stdbool.h>
#include <stddef.h>

/* The kinds of semaphore (dbt_kind, DBT_NKINDS, their letters and words), and the keys of one,
 * in the order the scripts take them (DBT_K_* and DBT_NKEYS): made from lua/protocol/keys.def
 * (their comments there). The operator's three keys (limit override, drain, classes) have no
 * TTL: they last until the operator clears them. */
#include "keys_table.h"

typedef struct {
    char *base;                        /* escaped prefix + "{" + escaped pool + "}" */
    char *wake_prefix;                 /* base + ":wake:" (a process' list: + its cid) */
    char *keys[DBT_NKINDS][DBT_NKEYS]; /* base + ":q:holders" ... */
    /* The processes that use the pool (dbthrottle status): base + ":procs", a ZSET of client id
     * -> when its record expires, and base + ":procinfo", a HASH of client id -> its record. */
    char *procs, *procinfo;
    /* base + ":settings": the pool's live settings (dbthrottle set), a STRING the scripts name
     * from the registry's key (renew.lua) or the limit's (admin.lua), as the operator's keys. */
    char *settings;
} dbt_keys;

/* Escapes text so it can stand inside a Redis Cluster hash tag and be told apart from any other
 * text: bytes other than [A-Za-z0-9._:/@-] become %XX (so '{', '}', '%', spaces and newlines
 * never appear). Injective: two different names never share an escaped form. Returns a malloc'd
 * string, or NULL when out of memory. */
char *dbt_key_escape(const char *text);

/* Builds the key names of pool `pool` under `prefix`. Returns false when out of memory. */
bool dbt_keys_init(dbt_keys *k, const char *prefix, const char *pool);
void dbt_keys_free(dbt_keys *k);

/* "query" or "connection", and the one-letter form the scripts use ("q", "c"). */
const char *dbt_kind_name(dbt_kind kind);
const char *dbt_kind_letter(dbt_kind kind);
/* The kind whose letter is `letter`; false when none is. */
bool dbt_kind_of_letter(char letter, dbt_kind *out);

#endif
