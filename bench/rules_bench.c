/* rules_bench.c - `make bench`: what matching DBTHROTTLE_CLASS_RULES and DBTHROTTLE_WEIGHTS costs
 * a command, with 3 class rules and 3 weight rules (one a sql= regular expression), as the
 * interposer matches them: the class once per connection (shown apart), the weight per command.
 * The target: under 5 us per command. Pure CPU: no Redis, no PostgreSQL. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TARGET_NS 5000.0

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The best of a few rounds of `n` matches (the machine may be busy with other work): ns each. */
static double per_match(const dbt_rule_list *l, const dbt_rule_values *v, int n, int *sink)
{
    double best = 1e18;
    for (int round = 0; round < 5; round++) {
        int64_t t0 = now_ns();
        for (int i = 0; i < n; i++) {
            const dbt_rule *r = dbt_rules_match(l, v);
            *sink += r ? r->weight + (int)r->klass[0] : 1;
        }
        double ns = (double)(now_ns() - t0) / n;
        if (ns < best)
            best = ns;
    }
    return best;
}

int main(void)
{
    char err[DBT_ERRLEN];
    dbt_rule_list classes = {0}, weights = {0};
    if (!dbt_parse_class_rules("DBTHROTTLE_CLASS_RULES",
                               "interactive:application_name=web*;batch:user=etl,database=dw*;"
                               "batch:application_name=cron-*",
                               &classes, err) ||
        !dbt_parse_weights("DBTHROTTLE_WEIGHTS",
                           "8:application_name=backfill-*;2:user=report*,database=dw*;"
                           "4:sql=^\\s*(COPY|CREATE INDEX|REFRESH)",
                           &weights, err)) {
        fprintf(stderr, "rules_bench: %s\n", err);
        return 1;
    }
    /* A typical OLTP statement (none of the weight rules match: every rule is tried, the regex
     * run over the text), a heavy one (the regex matches), and a long text. */
    char long_sql[4096];
    snprintf(long_sql, sizeof long_sql, "SELECT ");
    while (strlen(long_sql) < sizeof long_sql - 64)
        strcat(long_sql, "col_a, col_b, col_c, ");
    strcat(long_sql, "1 FROM t WHERE id = $1");
    struct {
        const char *what, *sql;
    } cases[] = {
        {"select (no rule matches)", "SELECT id, name FROM users WHERE id = $1"},
        {"create index (regex matches)", "  CREATE INDEX CONCURRENTLY i ON t (a)"},
        {"4 KiB select (no rule matches)", long_sql},
    };
    int n = 200000, sink = 0;
    printf("rule matching per command (3 class rules, 3 weight rules, one sql= regex), best of "
           "5 x %d:\n",
           n);
    dbt_rule_values conn = {{"api-7", "app", "shop", NULL}};
    printf("  %-42s %8.0f ns (once per connection)\n", "class of a connection (no match)",
           per_match(&classes, &conn, n, &sink));
    double worst = 0;
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dbt_rule_values v = conn;
        v.value[DBT_RULE_SQL] = cases[i].sql;
        double ns = per_match(&weights, &v, n, &sink);
        if (ns > worst)
            worst = ns;
        printf("  weight: %-34s %8.0f ns\n", cases[i].what, ns);
    }
    /* A regex without its ^ anchor is tried at every offset of the text (its first
     * DBT_RULE_SQL_MAX bytes): the dear case. */
    dbt_rule_list loose = {0};
    if (dbt_parse_weights("DBTHROTTLE_WEIGHTS", "4:sql=(COPY|CREATE INDEX|REFRESH)", &loose, err)) {
        dbt_rule_values v = conn;
        v.value[DBT_RULE_SQL] = long_sql;
        double ns = per_match(&loose, &v, n / 10, &sink);
        if (ns > worst)
            worst = ns;
        printf("  weight: %-34s %8.0f ns\n", "unanchored regex, 4 KiB text", ns);
        dbt_rule_list_free(&loose);
    }
    printf("  worst per command: %.2f us (target < %.0f us): %s\n", worst / 1000.0,
           TARGET_NS / 1000.0, worst < TARGET_NS ? "ok" : "OVER");
    dbt_rule_list_free(&classes);
    dbt_rule_list_free(&weights);
    return sink == 42 ? 2 : 0; /* keeps the loops */
}
