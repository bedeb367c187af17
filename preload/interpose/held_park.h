/* held_park.h - held commands that no thread waits for yet, watched by one thread (held_park.c).
 *
 * A held command whose permit is likely to come from another thread of the process (a local
 * handover) is parked rather than given a thread of its own: the thread that frees its permit
 * claims it and sends it (held.c). Meanwhile one thread of ours watches every parked command's
 * eventfd (a grant from Redis, the listener's role, a cancel, a withdrawal) and deadline, and
 * hands a command whose fd wakes or whose deadline passes to `fire` (held.c gives it a thread
 * then, as before). Each command leaves the watch exactly once: claimed or fired, never both. */
#ifndef DBT_HELD_PARK_H
#define DBT_HELD_PARK_H

#include <stdbool.h>
#include <stdint.h>

/* A command's place in the watch, kept in its held state; all zero when not parked. Its fields
 * are the watch's, under its lock. */
typedef struct dbt_park_cell {
    bool parked;
    uint64_t serial; /* names it in the epoll set: a cell is found again only while parked */
    int fd;
    int64_t deadline_us; /* -1: none */
    void *arg;
    struct dbt_park_cell *prev, *next;
} dbt_park_cell;

/* What a command that leaves the watch by its fd or its deadline is handed to (on the watch's
 * thread). Set once, before the first park. */
void dbt_park_set_fire(void (*fire)(void *arg));

/* Parks c for arg: fd watched until the deadline. False: no watch to be had (no thread, no
 * epoll): the caller waits for the command its own way. */
bool dbt_park(dbt_park_cell *c, int fd, int64_t deadline_us, void *arg);

/* Takes c out of the watch: true when it was parked (the caller serves it now, and nothing
 * else will), false when it was not or has been fired. */
bool dbt_park_claim(dbt_park_cell *c);

#endif
