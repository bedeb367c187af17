/* cluster.h - Redis Cluster: a key's hash slot, the process-wide map of which primary serves
 * which slot, and what a redirection (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) says.
 *
 * Every key of a pool carries the pool's hash tag ({pool}, keys.c), so a pool lives in one slot
 * and each of its connections goes to the primary that serves that slot (route.c,
 * dbt_redis_connect_for). The map comes from CLUSTER SLOTS asked of a seed (the hosts of a
 * redis-cluster:// URL, or the host of a redis:// URL whose server says cluster_enabled:1); a
 * MOVED reply patches it and asks for a new CLUSTER SLOTS at the next connect, as does a
 * connection that could not be made to a node. */
#ifndef DBT_CLUSTER_H
#define DBT_CLUSTER_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DBT_CLUSTER_NSLOTS   16384
#define DBT_CLUSTER_HOST_LEN 256
/* Room for the era token of the node a slot migrated from (run_id, 40 hex). */
#define DBT_ADOPT_LEN 48

/* CRC16-XMODEM (polynomial 0x1021, initial 0), the checksum Redis Cluster hashes keys with. */
uint16_t dbt_crc16(const char *buf, size_t len);

/* The hash slot of a key: of the text between the first '{' and the next '}' when that is not
 * empty (the hash tag), else of the whole key. Pure. */
int dbt_cluster_slot(const char *key, size_t len);

typedef struct {
    char host[DBT_CLUSTER_HOST_LEN];
    int port;
} dbt_cluster_node;

/* Whether connections are routed by slot: a redis-cluster:// URL, or a server of a redis:// URL
 * found to be a cluster node (dbt_cluster_discovered). */
bool dbt_cluster_routing(const dbt_config *cfg);
/* The server of a redis:// URL is a cluster node (INFO's cluster_enabled:1, or a MOVED). */
void dbt_cluster_discovered(void);

/* The primary that serves `slot`, from the map; the map is (re)read from a seed first when it
 * has no entry for the slot or a redirection or failure asked for a refresh. The seeds are asked
 * in turn, each for at most min(DBTHROTTLE_REDIS_TIMEOUT, 500 ms) within the caller's budget.
 * False with a message in err when no seed answered and the map knows no node for the slot. */
bool dbt_cluster_node_for(const dbt_config *cfg, int slot, dbt_cluster_node *out, char *err);

/* Changes to the map: generation() goes up with each, so a connection made before knows to
 * check that its node still serves its slot (dbt_cluster_serves). */
uint64_t dbt_cluster_generation(void);
bool dbt_cluster_serves(int slot, const char *host, int port);
/* A connection to this node failed: the next connect reads the map again. */
void dbt_cluster_node_failed(const char *host, int port);

/* The redirections, from an error reply (or a message of dbt_redis_*, whose prefix is skipped).
 * Only MOVED and ASK name a node (in *to, with the slot in *slot; either may be NULL). */
typedef enum {
    DBT_REDIR_NONE = 0,
    DBT_REDIR_MOVED,    /* the slot is served by another node now */
    DBT_REDIR_ASK,      /* a slot being migrated: this one command goes to *to, after ASKING */
    DBT_REDIR_TRYAGAIN, /* some keys moved already (a migration in progress): try again soon */
    DBT_REDIR_DOWN,     /* CLUSTERDOWN: the cluster cannot serve the slot now (a failover) */
} dbt_redirect;
dbt_redirect dbt_cluster_redirect_of(const char *err, int *slot, dbt_cluster_node *to);

/* A MOVED reply (text) came on a connection to `from`: the map is patched at once (slot -> the
 * node it names) and read again at the next connect. Slot migration or failover: the next
 * connect for the slot asks `from` (dbt_cluster_adopt_token). True when text was a MOVED. */
bool dbt_cluster_note_moved(const char *text, const char *from_host, int from_port);

/* The era token a connection for `slot` passes as "adopt" (part E's eras): when the slot's last
 * MOVED came from a node that is still a primary (ROLE), the slot was migrated whole with its
 * keys, and the token is that node's run_id (read with INFO server). Asked once per MOVED, on a
 * connection of its own within the caller's budget; "" when it was a failover (the node is a
 * replica now or does not answer) or nothing moved. */
void dbt_cluster_adopt_token(const dbt_config *cfg, int slot, char *out, size_t cap);

/* The primaries the map knows now (after reading it if empty): for the operator's commands,
 * which SCAN every node. Returns how many were written to out (at most cap), -1 with err set. */
int dbt_cluster_primaries(const dbt_config *cfg, dbt_cluster_node *out, int cap, char *err);

#endif
