/* cli/in_force.c: the values of a live-able setting in force in a pool's processes, grouped, most
 * processes first. Groups with as many processes come in one order whatever order Redis listed
 * the records in: status' line once read "30s: environment, 1, 2m: default, 1" in one CI run and
 * the other way round in the next (integration live_log_level). */
#include "cli.h"

#include <criterion/criterion.h>
#include <string.h>

static const dbt_setting *row_named(const char *key)
{
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (strcmp(s->key, key) == 0)
            return s;
    cr_assert_fail("no setting %s", key);
    return NULL;
}

/* The groups of wait_timeout over two records, the one given first listed first. */
static int groups_of(const char *first, const char *second, cli_in_force *g)
{
    dbt_proc_record procs[2] = {0};
    snprintf(procs[0].own, sizeof procs[0].own, "%s", first);
    snprintf(procs[1].own, sizeof procs[1].own, "%s", second);
    cli_pool_view v = {.procs = procs, .nprocs = 2};
    return cli_in_force_of(&v, NULL, row_named("wait_timeout"), g, 4);
}

Test(in_force, ties_come_in_one_order_whatever_the_records_order)
{
    cli_in_force a[4], b[4];
    cr_assert_eq(groups_of("wait_timeout=d:2m", "wait_timeout=e:30s", a), 2);
    cr_assert_eq(groups_of("wait_timeout=e:30s", "wait_timeout=d:2m", b), 2);
    for (int i = 0; i < 2; i++) {
        cr_expect_str_eq(a[i].value, b[i].value, "group %d: %s against %s", i, a[i].value,
                         b[i].value);
        cr_expect_str_eq(a[i].from, b[i].from);
    }
    cr_expect_str_eq(a[0].value, "2m");
    cr_expect_str_eq(a[1].value, "30s");
}

Test(in_force, the_most_processes_come_first)
{
    dbt_proc_record procs[3] = {0};
    snprintf(procs[0].own, sizeof procs[0].own, "wait_timeout=d:2m");
    snprintf(procs[1].own, sizeof procs[1].own, "wait_timeout=e:30s");
    snprintf(procs[2].own, sizeof procs[2].own, "wait_timeout=e:30s");
    cli_pool_view v = {.procs = procs, .nprocs = 3};
    cli_in_force g[4];
    cr_assert_eq(cli_in_force_of(&v, NULL, row_named("wait_timeout"), g, 4), 2);
    cr_expect_str_eq(g[0].value, "30s");
    cr_expect_eq(g[0].processes, 2);
    cr_expect_str_eq(g[1].value, "2m");
}
