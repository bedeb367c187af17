/* sample.h - the command sample (docs/design.md, "The command sample"): each permit hold of a
 * pool in shadow mode (DBTHROTTLE_SAMPLE=shadow, the default) or of every mode (always), kept in
 * the pool's buffer and sent to Redis (sample.lua) by the renewer, for dbthrottle report. */
#ifndef DBT_SAMPLE_H
#define DBT_SAMPLE_H

#include "pool_types.h"

/* A hold of s begins: it asked at ask_us, found itself queued at queued_at_us (0: it did not
 * queue) and was granted at grant_us (dbt_now_us); `line` is what its line will say
 * (sample.def): in shadow mode (`shadow`: the mode its acquire ran in, or the pool's for a kept
 * permit reused) what enforcing would have done, enforced how it was granted. Sampled as the
 * pool's DBTHROTTLE_SAMPLE in force says. The caller holds s (no lock needed: only its holder
 * reads these). */
void dbt_sample_begin(dbt_pool *p, struct dbt_slot *s, bool shadow, int64_t ask_us,
                      int64_t queued_at_us, int64_t grant_us, dbt_sample_would line);

/* Whether the pool's commands of kind go into the sample now (DBTHROTTLE_SAMPLE in force, and
 * the kind's mode). */
bool dbt_sample_kept(dbt_pool *p, dbt_kind kind);

/* The hold of s ends now (its command gave it back or kept it between commands): into the
 * pool's buffer, or counted as not kept when that is full. Once per hold. p->mu held. */
void dbt_sample_end(dbt_pool *p, struct dbt_slot *s, int64_t now);

/* A command of kind ran with no permit (Redis unreachable) or was refused, while its holds are
 * sampled: counted as not sampled, so that the report knows its sample lacks it. p->mu held. */
void dbt_sample_missed(dbt_pool *p, dbt_kind kind, int64_t now);

/* When the renewer should send the buffer (dbt_now_us; -1: nothing to send). p->mu held. */
int64_t dbt_sample_due_us(const dbt_pool *p);

/* Sends one chunk: up to DBT_SAMPLE_CHUNK holds of one kind, the oldest first, with that kind's
 * count of holds not sampled (one sample.lua call). A chunk the call could not deliver is counted
 * as not sampled, and the next waits a second. False when nothing was sent or the call failed.
 * Without p->mu; from the renewer, one chunk per pass of its loop. */
bool dbt_sample_send(dbt_pool *p);

/* Sends what the buffer holds, chunk after chunk, unless Redis is away; stops at a failure. At
 * the exit, once what the process gives back is settled. Without p->mu. */
void dbt_sample_send_all(dbt_pool *p);

/* The buffer's memory, as the pool is freed. */
void dbt_sample_free(dbt_pool *p);

#endif
