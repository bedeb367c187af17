/* dbt_route_run's resends of a call the host's relay reset before reading it (route.h,
 * dbt_route_resend_undelivered): over fake connections, each try's connection reset by "the
 * relay" until the given one answers. No Redis: the connections are the test's own. */
#include "config.h"
#include "route.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    int resets; /* tries reset unread before one answers */
    int tries;  /* connections the call was tried on */
} fake;

static dbt_redis *fake_get(void *ctx, char *err)
{
    (void)ctx;
    (void)err;
    return calloc(1, sizeof(dbt_redis));
}

static void fake_put(void *ctx, dbt_redis *r)
{
    (void)ctx;
    free(r);
}

/* A relayed connection whose speaker ended before reading the call (a reset), or the reply. */
static redisReply *fake_op(dbt_redis *r, void *arg, char *err)
{
    fake *f = arg;
    if (f->tries++ < f->resets) {
        r->relayed = r->broken = r->reset = true;
        strcpy(err, "redis: Connection reset by peer");
        return NULL;
    }
    redisReply *rep = calloc(1, sizeof *rep);
    rep->type = REDIS_REPLY_INTEGER;
    return rep;
}

static redisReply *run(fake *f, char *err)
{
    dbt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.redis_timeout_ms = 1000;
    dbt_route_conns conns = {.get = fake_get, .put = fake_put, .ctx = f};
    return dbt_route_run(&cfg, &conns, fake_op, f, err);
}

/* Speakers that end one after another (a host's processes ending together) reset the call twice:
 * it is made a third time, and answered. (Before: given up after the second reset, and in closed
 * mode commands refused for Redis' outage: make test's host_relay.) */
Test(route_resend, a_call_reset_unread_twice_is_made_again)
{
    char err[DBT_ERRLEN] = "";
    fake f = {.resets = 2};
    redisReply *rep = run(&f, err);
    cr_expect_not_null(rep, "given up after %d tries: %s", f.tries, err);
    cr_expect_eq(f.tries, 3);
    free(rep);
}

/* At most three resends: a relay that resets every try does not keep the call forever (the last
 * one goes to Redis directly, dbt_relay_avoid). */
Test(route_resend, resends_end_after_three)
{
    char err[DBT_ERRLEN] = "";
    fake f = {.resets = 100};
    cr_expect_null(run(&f, err));
    cr_expect_eq(f.tries, 4, "%d tries", f.tries);
    cr_expect_str_eq(err, "redis: Connection reset by peer");
}

/* A connection broken otherwise (not a relay's reset) is not a call left unread: not again. */
Test(route_resend, a_plain_failure_is_not_made_again)
{
    dbt_redis r;
    memset(&r, 0, sizeof r);
    r.broken = true;
    int resends = 0;
    cr_expect_not(dbt_route_resend_undelivered(&r, &resends));
    r.relayed = r.reset = true;
    cr_expect(dbt_route_resend_undelivered(&r, &resends));
    cr_expect_not(dbt_route_resend_undelivered(NULL, &resends));
    cr_expect_eq(resends, 1);
}
