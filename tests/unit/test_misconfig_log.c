/* A permanent Redis error is logged when it starts and again once a minute while it lasts: not
 * once per command, and not once per process. */
#include "pool.h"

#include <criterion/criterion.h>
#include <stdio.h>

Test(misconfig_log, once_a_minute_while_it_lasts)
{
    const char *cause = "Redis refused the user or password (WRONGPASS)";
    int64_t t0 = INT64_C(5000000000);
    cr_expect(dbt_misconfig_log_due("", 0, cause, t0), "the first time");
    for (int64_t dt = 0; dt < DBT_MISCONFIG_RELOG_US; dt += 1000000)
        cr_expect(!dbt_misconfig_log_due(cause, t0, cause, t0 + dt), "again after %lld us",
                  (long long)dt);
    cr_expect(dbt_misconfig_log_due(cause, t0, cause, t0 + DBT_MISCONFIG_RELOG_US),
              "not again after a minute");
    cr_expect_eq(DBT_MISCONFIG_RELOG_US, INT64_C(60000000));
}

Test(misconfig_log, a_new_cause_at_once)
{
    int64_t t0 = INT64_C(5000000000);
    cr_expect(dbt_misconfig_log_due("Redis refused the user or password (WRONGPASS)", t0,
                                    "the Redis user lacks a permission (NOPERM)", t0 + 1));
}

Test(misconfig_log, probes_every_few_seconds)
{
    /* The fix is noticed within the probe period: a few seconds, not a lease or a minute. */
    cr_expect(DBT_MISCONFIG_PROBE_US >= INT64_C(500000) &&
              DBT_MISCONFIG_PROBE_US <= INT64_C(5000000));
}

Test(misconfig_log, one_acquire_probes_the_others_are_refused_without_redis)
{
    static struct dbt_pool p; /* only the misconfig fields are read */
    cr_expect(!dbt_pool_misconfigured(&p, 1), "not misconfigured: not refused");
    snprintf(p.misconfig, sizeof p.misconfig, "%s", "NOPERM: grant the worker ACL");
    p.misconfig_probe_us = 1000;
    cr_expect(dbt_pool_misconfigured(&p, 999), "refused before the probe is due");
    cr_expect(!dbt_pool_misconfigured(&p, 1000), "the acquire that finds it due probes");
    cr_expect(dbt_pool_misconfigured(&p, 1001), "the others meanwhile are refused");
    cr_expect(dbt_pool_misconfigured(&p, 1000 + DBT_MISCONFIG_PROBE_US - 1));
    cr_expect(!dbt_pool_misconfigured(&p, 1000 + DBT_MISCONFIG_PROBE_US), "the next probe");
}
