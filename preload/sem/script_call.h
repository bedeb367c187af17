/* script_call.h - running a built script call (script_protocol.h): on a connection the caller
 * holds (the dbthrottle command: script_run.h, the public part), or on one of a pool's command
 * connections, which is where the library's every script call goes through. */
#ifndef DBT_SCRIPT_CALL_H
#define DBT_SCRIPT_CALL_H

#include "route.h"
#include "script_protocol.h"
#include "script_run.h"
#include "sem_client.h"

/* Runs c on one of p's command connections, taken and given back around it, Redis Cluster's
 * redirections followed (dbt_route_run: a MOVED also sends the listener after the slot); a
 * failure is noted (dbt_pool_note_error, `what` naming the operation in the log) for the outage
 * backoff, but for sample.lua's (shadow mode's sample: not the semaphore). Call without p->mu. */
redisReply *dbt_pool_run(dbt_pool *p, const char *what, dbt_script_call *c, dbt_reply_parser parse,
                         void *out, char *err);

/* Sends c on one of p's command connections without waiting: its reply is read by the next
 * command on that connection, or by the renewer soon after. False, noted, when it could not be
 * sent. With a tag (dbt_op_tag), a failure found in its reply later (an error, or a connection
 * lost before it) makes it an owed operation, sent again until it lands. Call without p->mu. */
bool dbt_pool_send(dbt_pool *p, const char *what, dbt_script_call *c, const char *tag, char *err);

/* Whether this thread's last dbt_pool_run of acquire.lua failed because the host's relay failed
 * it (dbt_route_take_relay_failure), its error then in err (DBT_ERRLEN): no outage was noted (the
 * caller notes one if it gives up: dbt_pool_note_error), the call may have queued its
 * id or not, and the caller queues anew under another id (the process now connects directly).
 * A call that is harmless twice (a renewal, a cancel) was made again by dbt_pool_run. Clears it. */
bool dbt_pool_take_relay_failure(char *err);

#endif
