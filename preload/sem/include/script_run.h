/* script_run.h - running a built script call (script_protocol.h) on a connection the caller holds:
 * how the dbthrottle command, the benches and the tests speak the scripts' protocol. The library's
 * own calls go through a pool's connections instead (script_call.h, the semaphore's own). */
#ifndef DBT_SCRIPT_RUN_H
#define DBT_SCRIPT_RUN_H

#include "redis_conn.h"
#include "script_protocol.h"

/* Runs c on r by EVALSHA and reads the reply into out with parse. Returns the reply (free it with
 * freeReplyObject once done with out, which may point into it), or NULL with a message in err
 * when Redis failed or the reply is not what the script answers. c's era arguments become r's
 * server's (dbt_script_bind_era). */
redisReply *dbt_script_run(dbt_redis *r, dbt_script_call *c, dbt_reply_parser parse, void *out,
                           char *err);

/* What dbt_script_run does before it sends c on r, for a caller that sends c otherwise (without
 * waiting for its reply): c's era arguments become those of r's server (dbt_script_bind_era),
 * and a slot r's node took over whole names the server it came from (the adopt token route.c
 * noted: no quarantine). */
void dbt_script_bind_server(dbt_script_call *c, const dbt_redis *r);

#endif
