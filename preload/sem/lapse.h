/* lapse.h - closed mode: a running command whose lease is about to lapse unconfirmed is
 * cancelled at the server before Redis can grant its permit to another (lapse.c). */
#ifndef DBT_LAPSE_H
#define DBT_LAPSE_H

#include "pool_types.h"

/* Connections whose running command is to be cancelled, found with p->mu held and cancelled by
 * the renewer once it is let go (a cancel is network I/O). */
#define DBT_MAX_CANCELS 8
typedef struct {
    char conn[DBT_MAX_CANCELS][64];
    const char *event[DBT_MAX_CANCELS]; /* the cancel's log event: evict_cancel, lapse_cancel */
    int n;
} dbt_cancels;

/* How long before its lease (µs: the one its last accepted renewal carried) ends in Redis a held
 * permit's command is cancelled. */
int64_t dbt_lapse_margin_us(const dbt_pool *p, int64_t lease);

/* Closed mode, when commands can be cancelled (can_cancel: the interposer's hook is set): marks
 * lost each held query permit whose command runs and whose lease may lapse before the renewer
 * could confirm it (logged as lease_lost, "its command is cancelled"), and adds its connection to
 * `out`; likewise a running command whose lease already lapsed (its process was stopped, or Redis
 * reaped it). Returns when the next one is due (-1: none). p->mu held. */
int64_t dbt_lapse_take_due(dbt_pool *p, int64_t now, bool can_cancel, dbt_cancels *out);

#endif
