/* sem_fixture.c - see sem_fixture.h. */
#include "sem_fixture.h"

#include <criterion/criterion.h>
#include <stdarg.h>

/* More clients than any test makes. */
#define FX_MAX_CLIENTS 4

test_redis fx_redis;

/* A client's configuration must outlive it: each stays in its slot until the client is freed. */
static struct {
    dbt_client *client;
    dbt_config cfg;
} fx_clients[FX_MAX_CLIENTS];

void fx_redis_start(void)
{
    cr_assert(test_redis_start(&fx_redis, NULL), "redis-server did not start");
}

dbt_client *fx_client(const char *first, ...)
{
    for (int i = 0; i < FX_MAX_CLIENTS; i++) {
        if (fx_clients[i].client)
            continue;
        va_list more;
        va_start(more, first);
        test_configv(&fx_clients[i].cfg, &fx_redis, first, more);
        va_end(more);
        fx_clients[i].client = dbt_client_new(&fx_clients[i].cfg);
        return fx_clients[i].client;
    }
    cr_assert_fail("more than %d clients in one test", FX_MAX_CLIENTS);
    return NULL;
}

dbt_config *fx_config(const dbt_client *c)
{
    for (int i = 0; i < FX_MAX_CLIENTS; i++)
        if (c && fx_clients[i].client == c)
            return &fx_clients[i].cfg;
    cr_assert_fail("not a client of fx_client");
    return NULL;
}

static void free_slot(int i)
{
    dbt_client_free(fx_clients[i].client);
    dbt_config_free(&fx_clients[i].cfg);
    fx_clients[i].client = NULL;
}

void fx_client_free(dbt_client *c)
{
    for (int i = 0; i < FX_MAX_CLIENTS; i++)
        if (fx_clients[i].client == c)
            free_slot(i);
}

void fx_stop(void)
{
    /* Every client first, then every configuration, as the tests did by hand. */
    dbt_config *cfgs[FX_MAX_CLIENTS];
    int n = 0;
    for (int i = 0; i < FX_MAX_CLIENTS; i++) {
        if (!fx_clients[i].client)
            continue;
        dbt_client_free(fx_clients[i].client);
        fx_clients[i].client = NULL;
        cfgs[n++] = &fx_clients[i].cfg;
    }
    for (int i = 0; i < n; i++)
        dbt_config_free(cfgs[i]);
    test_redis_stop(&fx_redis);
}
