/* route_step.h - the pure step of route.c's policy for Redis Cluster's redirections, apart from
 * route.h (a call routed and run): for a caller that runs its own commands on a connection it
 * keeps, as the listener's BLPOP does (sem/listener.c), and for route.c's unit test
 * (tests/unit/test_route.c). */
#ifndef DBT_ROUTE_STEP_H
#define DBT_ROUTE_STEP_H

#include "cluster.h"

#include <stdint.h>

/* What the policy does after a try failed with a redirection of kind k (dbt_cluster_redirect_of),
 * left_us before the call's DBTHROTTLE_REDIS_TIMEOUT is spent; *moves counts the MOVEDs followed.
 * Pure. */
typedef enum {
    DBT_ROUTE_STOP,  /* the error stands: not a redirection, the time spent, a second MOVED */
    DBT_ROUTE_MOVED, /* try again at once: the map names the slot's new node */
    DBT_ROUTE_ASK,   /* send this call to the node ASK names, after ASKING */
    DBT_ROUTE_PAUSE, /* try again after a short pause (TRYAGAIN, CLUSTERDOWN) */
} dbt_route_step;
dbt_route_step dbt_route_next(dbt_redirect k, int *moves, int64_t left_us);

#endif
