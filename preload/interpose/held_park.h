/* held_park.h - held commands that no thread waits for yet, watched by one thread (held_park.c).
 *
 * A held command whose permit is likely to come from another thread of the process (a local
 * handover) is parked rather than given a thread of its own: the thread that frees its permit
 * claims it and sends it (held.c). Meanwhile one thread of ours watches the parked commands: told
 * through one eventfd (dbt_park_notify_fd) that something came for one of them (a grant from
 * Redis, the listener's role, a cancel, a withdrawal), it hands each for which `due` says so, and
 * each whose deadline passed, to `fire` (held.c gives it a thread then, as before). Each command
 * leaves the watch exactly once: claimed or fired, never both. */
#ifndef DBT_HELD_PARK_H
#define DBT_HELD_PARK_H

#include <stdbool.h>
#include <stdint.h>

/* A command's place in the watch, kept in its held state; all zero when not parked. Its fields
 * are the watch's, under its lock. */
typedef struct dbt_park_cell {
    bool parked;
    int64_t deadline_us; /* -1: none */
    void *arg;
    struct dbt_park_cell *prev, *next;
} dbt_park_cell;

/* What a command that leaves the watch by `due` or its deadline is handed to (on the watch's
 * thread); `due` is asked under the watch's lock, of parked commands only. Set once, before the
 * first park. */
void dbt_park_set_fire(void (*fire)(void *arg), bool (*due)(void *arg));

/* The eventfd that wakes the watch (made, with its thread, at the first call); -1: none to be
 * had. */
int dbt_park_notify_fd(void);

/* Parks c for arg until the deadline (-1: none). False: no watch to be had, or `due` says
 * something came for it already (its permit, passed before it could be linked here): the caller
 * finishes the command its own way. */
bool dbt_park(dbt_park_cell *c, int64_t deadline_us, void *arg);

/* Takes c out of the watch: true when it was parked (the caller serves it now, and nothing
 * else will), false when it was not or has been fired. */
bool dbt_park_claim(dbt_park_cell *c);

#endif
