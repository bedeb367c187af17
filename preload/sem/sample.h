/* sample.h - shadow mode's command sample (docs/design.md, "The command sample"): each permit
 * hold of a pool whose mode in force is shadow, kept in the pool's buffer and sent to Redis
 * (sample.lua) by the renewer, for dbthrottle report to replay. */
#ifndef DBT_SAMPLE_H
#define DBT_SAMPLE_H

#include "pool_types.h"

/* A hold of s begins: it asked at ask_us and was granted at grant_us (dbt_now_us), and `would`
 * says what enforcing would have done (dbt_acquire_would). Sampled when the pool's mode in force
 * is shadow, else not. The caller holds s (no lock needed: only its holder reads these). */
void dbt_sample_begin(dbt_pool *p, struct dbt_slot *s, int64_t ask_us, int64_t grant_us, int would);

/* The hold of s ends now (its command gave it back or kept it between commands): into the
 * pool's buffer, or counted as not kept when that is full. Once per hold. p->mu held. */
void dbt_sample_end(dbt_pool *p, struct dbt_slot *s, int64_t now);

/* When the renewer should send the buffer (dbt_now_us; -1: nothing to send). p->mu held. */
int64_t dbt_sample_due_us(const dbt_pool *p);

/* Sends what the buffer holds, a chunk of DBT_SAMPLE_CHUNK holds per sample.lua call. Holds a
 * call could not deliver are counted as not kept (the next chunk says how many). Without p->mu;
 * from the renewer, or at the exit. */
void dbt_sample_send(dbt_pool *p);

/* The buffers' memory, as the pool is freed. */
void dbt_sample_free(dbt_pool *p);

#endif
