/* sem_helpers.h - small helpers shared by the semaphore tests. */
#ifndef DBT_TEST_SEM_HELPERS_H
#define DBT_TEST_SEM_HELPERS_H

#include "redis_server.h"
#include "sem_client.h"

#include <stdbool.h>
#include <sys/types.h>

/* A condition for test_wait_until: ZCARD of key == n. */
typedef struct {
    const test_redis *r;
    const char *key;
    long long n;
} zcard_is;
bool test_zcard_is(void *arg);

/* A condition: the key does not exist. */
typedef struct {
    const test_redis *r;
    const char *key;
} key_gone;
bool test_key_gone(void *arg);

/* A child process that holds or waits for a permit on its own client, told what to do through
 * a pipe. It reports 'G' when granted, 'T' on timeout, 'U'/'R' for unthrottled/refused. */
typedef struct {
    pid_t pid;
    int to_child;   /* write 'r' to make it release and exit */
    int from_child; /* reads its reports */
} test_child;

bool test_child_start(test_child *ch, const test_redis *r, const char *pool, int limit,
                      int64_t wait_ms, const char *lease);
/* The same, forked now but acquiring only once test_child_go says so: a test whose own process
 * will have threads (a renewer listening) forks its children before, since a child forked while
 * another thread is inside the sanitizer allocator (ASan before LLVM 17) can hang in it. */
bool test_child_start_paused(test_child *ch, const test_redis *r, const char *pool, int limit,
                             int64_t wait_ms, const char *lease);
void test_child_go(test_child *ch);
/* Reads one report (waits up to timeout_ms); returns 0 on timeout. */
char test_child_report(test_child *ch, int64_t timeout_ms);
/* Tells it to release and exit, and reaps it. */
void test_child_finish(test_child *ch);
void test_child_kill(test_child *ch);

#endif
