/* sem_fixture.h - the set-up most semaphore tests repeat, as Criterion fixtures: a redis-server
 * of the test's own, started by .init = fx_redis_start and stopped by .fini = fx_stop, and the
 * clients the test makes against it, freed by fx_stop with their configurations. Criterion runs
 * each test in a process of its own, so the fixture's state is the test's alone; .fini runs
 * after a failed assertion too, so no redis-server outlives its test. */
#ifndef DBT_TEST_SEM_FIXTURE_H
#define DBT_TEST_SEM_FIXTURE_H

#include "sem_helpers.h"

/* The test's redis-server (valid between .init and .fini). */
extern test_redis fx_redis;

/* .init: starts fx_redis (fails the test if it does not start). */
void fx_redis_start(void);
/* .fini: frees the clients fx_client made that are still open, in the order made, then their
 * configurations, then stops fx_redis. */
void fx_stop(void);

/* A client of fx_redis with the defaults plus the given settings ("KEY=VALUE", NULL-terminated). */
dbt_client *fx_client(const char *setting, ...);
/* The configuration a client of fx_client was made with (valid until the client is freed; a
 * test may change what the client reads in it, as a changing environment would). */
dbt_config *fx_config(const dbt_client *c);
/* Frees a client of fx_client (and its configuration) now, for a test that asserts what happens
 * once it is gone. */
void fx_client_free(dbt_client *c);

#endif
