/* redis_server.h - tests start their own redis-server on a free loopback port in a temp dir. */
#ifndef DBT_TEST_REDIS_SERVER_H
#define DBT_TEST_REDIS_SERVER_H

#include "config.h"

#include <hiredis.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct {
    pid_t pid;
    int port;
    char dir[256];
} test_redis;

/* Starts redis-server (no persistence unless `extra` asks for it; extra = more "--k v" args,
 * space separated, may be NULL) and waits until it answers PING. Returns false on failure. */
bool test_redis_start(test_redis *r, const char *extra);
/* Starts it again on the same port and dir (after test_redis_kill). */
bool test_redis_restart(test_redis *r, const char *extra);
/* SIGKILLs the server and reaps it (its data is gone unless persisted). */
void test_redis_kill(test_redis *r);
/* Stops the server and removes its directory. */
void test_redis_stop(test_redis *r);

redisContext *test_redis_connect(const test_redis *r);
/* Runs a command (printf-style, hiredis format) and returns its integer reply (or a string reply
 * read as an integer: HGET of a counter), or -1000 on an error or any other reply. */
long long test_redis_int(const test_redis *r, const char *fmt, ...);
/* Commands clients sent (INFO commandstats, without the ones scripts ran, without INFO). */
long long test_redis_commands(const test_redis *r);
/* How many times Redis ran one command (lower case, "evalsha") at top level. */
long long test_redis_calls(const test_redis *r, const char *cmd);
/* Microseconds Redis spent in scripts so far (INFO commandstats: EVALSHA and EVAL usec). */
long long test_redis_script_usec(const test_redis *r);
/* How many of pid's connections to r are blocked in Redis (a BLPOP waiting), matched by their
 * local ports (/proc: pid's sockets); -1000 when Redis did not answer. */
long long test_redis_blocked_of(const test_redis *r, pid_t pid);
/* Number of keys in the db. */
long long test_redis_dbsize(const test_redis *r);

/* A config pointing at r: defaults plus the given settings ("KEY=VALUE", NULL-terminated). */
void test_config(dbt_config *cfg, const test_redis *r, ...);
/* The same for helpers that take the settings as their own arguments: the first one, then the
 * rest of them in a va_list. */
void test_configv(dbt_config *cfg, const test_redis *r, const char *first, va_list more);

/* Polls cond until true or timeout_ms passes; returns the final value. For conditions another
 * process or thread brings about (never used to wait out a fixed delay). */
bool test_wait_until(bool (*cond)(void *), void *arg, int64_t timeout_ms);

int64_t test_now_ms(void);

#endif
