/* Classes and weights: DBTHROTTLE_CLASS, _CLASS_RULES, _CLASSES and _WEIGHTS parsed, refused
 * with one line naming the setting and the value, matched, and shown back. */
#include "config.h"
#include "config_load.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

static void check_refusal(const char *err, const char *setting, const char *value)
{
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    cr_expect(strstr(err, setting) != NULL, "does not name %s: %s", setting, err);
    if (value) {
        char quoted[160];
        snprintf(quoted, sizeof quoted, "bad value \"%s\"", value);
        cr_expect(strstr(err, quoted) != NULL, "does not show %s: %s", quoted, err);
    }
}

static dbt_rule_values values(const char *app, const char *user, const char *db, const char *sql)
{
    dbt_rule_values v = {{app, user, db, sql}};
    return v;
}

Test(class_rules, first_match_wins_and_all_conditions_must_match)
{
    char err[DBT_ERRLEN];
    dbt_rule_list l = {0};
    cr_assert(dbt_parse_class_rules("DBTHROTTLE_CLASS_RULES",
                                    "batch:user=etl,database=dw*;interactive:application_name=web*;"
                                    "batch:application_name=cron-*",
                                    &l, err),
              "%s", err);
    cr_assert_eq(l.n, 3);
    dbt_rule_values v = values("web-1", "etl", "dwh", NULL);
    cr_expect_str_eq(dbt_rules_match(&l, &v)->klass, "batch"); /* both conditions of rule 1 */
    v = values("web-1", "etl", "app", NULL);
    cr_expect_str_eq(dbt_rules_match(&l, &v)->klass, "interactive"); /* rule 1: one only */
    v = values("cron-nightly", "bob", "app", NULL);
    cr_expect_str_eq(dbt_rules_match(&l, &v)->klass, "batch");
    v = values(NULL, "bob", "app", NULL); /* no application_name: its rules cannot match */
    cr_expect_null(dbt_rules_match(&l, &v));
    dbt_rule_list_free(&l);
}

Test(class_rules, refusals_name_the_setting_and_the_rule)
{
    static const struct {
        const char *text, *shown;
    } bad[] = {{"Web:user=x", "Web:user=x"},
               {"web", "web"},
               {"web:host=x", "web:host=x"},
               {"web:user=", "web:user="},
               {"web:sql=select", "web:sql=select"},
               {"-:user=x", "-:user=x"},
               {";", NULL},
               {"a23456789012345678901234567890123:user=x", NULL}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        dbt_rule_list l = {0};
        cr_expect(!dbt_parse_class_rules("DBTHROTTLE_CLASS_RULES", bad[i].text, &l, err), "%s",
                  bad[i].text);
        cr_expect_eq(l.n, 0);
        check_refusal(err, "DBTHROTTLE_CLASS_RULES", bad[i].shown);
    }
}

Test(weights, sql_regex_is_extended_case_insensitive_with_gnu_escapes)
{
    char err[DBT_ERRLEN];
    dbt_rule_list l = {0};
    cr_assert(dbt_parse_weights("DBTHROTTLE_WEIGHTS",
                                "4:sql=^\\s*(COPY|CREATE INDEX|REFRESH);"
                                "3:sql=^select .*a{1,3}\\;$,user=etl;2:application_name=report*",
                                &l, err),
              "%s", err);
    cr_assert_eq(l.n, 3);
    cr_expect_eq(l.rules[1].ncond, 2, "the comma inside {1,3} is the regex's");
    struct {
        const char *app, *user, *sql;
        int weight; /* 0: no rule */
    } cases[] = {{"x", "bob", "  copy t from stdin", 4},
                 {"x", "bob", "\tCreate Index i on t(a)", 4},
                 {"x", "bob", "refresh materialized view v", 4},
                 {"x", "bob", "select 1", 0},
                 {"x", "etl", "SELECT * from aa;", 3},
                 {"x", "bob", "SELECT * from aa;", 0},
                 {"report-7", "bob", "select 1", 2},
                 {"report-7", "bob", NULL, 2},
                 {"x", "bob", NULL, 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dbt_rule_values v = values(cases[i].app, cases[i].user, "db", cases[i].sql);
        const dbt_rule *r = dbt_rules_match(&l, &v);
        cr_expect_eq(r ? r->weight : 0, cases[i].weight, "case %zu (%s)", i,
                     cases[i].sql ? cases[i].sql : "no text");
    }
    /* Only the first DBT_RULE_SQL_MAX bytes are matched (a bound on the cost per command). */
    char late[DBT_RULE_SQL_MAX + 64];
    memset(late, ' ', sizeof late);
    snprintf(late + DBT_RULE_SQL_MAX, sizeof late - DBT_RULE_SQL_MAX, "x");
    dbt_rule_list loose = {0};
    cr_assert(dbt_parse_weights("W", "5:sql=x", &loose, err), "%s", err);
    dbt_rule_values v = values("a", "b", "c", late);
    cr_expect_null(dbt_rules_match(&loose, &v), "matched past the first %d bytes",
                   DBT_RULE_SQL_MAX);
    late[DBT_RULE_SQL_MAX - 1] = 'x';
    cr_expect_not_null(dbt_rules_match(&loose, &v));
    dbt_rule_list_free(&loose);
    char shown[512];
    dbt_rules_show(&l, true, shown, sizeof shown);
    cr_expect_str_eq(shown, "4:sql=^\\s*(COPY|CREATE INDEX|REFRESH);"
                            "3:sql=^select .*a{1,3}\\;$,user=etl;2:application_name=report*");
    dbt_rule_list_free(&l);
}

Test(weights, refusals)
{
    static const char *const bad[] = {
        "0:sql=x", "x:sql=y", "100001:user=a", "2:sql=(", "2:flavor=ab", "2", "2:"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "";
        dbt_rule_list l = {0};
        cr_expect(!dbt_parse_weights("DBTHROTTLE_WEIGHTS", bad[i], &l, err), "%s", bad[i]);
        check_refusal(err, "DBTHROTTLE_WEIGHTS", bad[i]);
    }
}

Test(weights, above_max_queries_is_a_configuration_error)
{
    char err[DBT_ERRLEN] = "";
    dbt_config cfg;
    char *env[] = {"DBTHROTTLE_MAX_QUERIES=8", "DBTHROTTLE_WEIGHTS=4:user=a;9:sql=copy", NULL};
    cr_expect(!test_config_load(&cfg, env, err));
    check_refusal(err, "DBTHROTTLE_WEIGHTS", NULL);
    cr_expect(strstr(err, "weight 9") && strstr(err, "DBTHROTTLE_MAX_QUERIES=8"), "%s", err);
    dbt_config_free(&cfg);
    char *fine[] = {"DBTHROTTLE_MAX_QUERIES=8", "DBTHROTTLE_WEIGHTS=8:sql=copy", NULL};
    cr_expect(test_config_load(&cfg, fine, err), "%s", err);
    dbt_config_free(&cfg);
}

Test(classes, user_syntax_becomes_the_definition_text)
{
    char err[DBT_ERRLEN], *def = NULL;
    cr_assert(dbt_parse_classes("DBTHROTTLE_CLASSES",
                                "interactive=75%,priority=1,wait=5s,queue_cap=100;batch=25%;"
                                "aging=30s;default=batch",
                                &def, err),
              "%s", err);
    cr_expect_str_eq(def, "aging=30000;default=batch;interactive:75:1:5000:100;batch:25:0:-:-");
    cr_assert(dbt_parse_classes("X", "a=10%,priority=-5,wait=0,queue_cap=0;default=50%", &def, err),
              "%s", err);
    /* "default=50%" is a class named default (a share), not the default's name */
    cr_expect_str_eq(def, "aging=0;default=;a:10:-5:0:0;default:50:0:-:-");
    free(def);
}

Test(classes, refusals)
{
    static const struct {
        const char *text, *shown;
    } bad[] = {{"a=80%;b=30%", "b=30%"},
               {"a=101%", "a=101%"},
               {"a=-1%", "a=-1%"},
               {"A=10%", "A=10%"},
               {"a=10%,priority=2000", "a=10%,priority=2000"},
               {"a=10%,wait=soon", "a=10%,wait=soon"},
               {"a=10%,queue_cap=-1", "a=10%,queue_cap=-1"},
               {"a=10%,colour=red", "a=10%,colour=red"},
               {"a=10%;a=20%", "a=20%"},
               {"aging=30s", NULL},
               {"a=10%;aging=forever", "aging=forever"},
               {"a=10%;default=b", NULL},
               {"a", "a"}};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        char err[DBT_ERRLEN] = "", *def = NULL;
        cr_expect(!dbt_parse_classes("DBTHROTTLE_CLASSES", bad[i].text, &def, err), "%s",
                  bad[i].text);
        cr_expect_null(def);
        check_refusal(err, "DBTHROTTLE_CLASSES", bad[i].shown);
    }
}

Test(class_name, the_rule)
{
    cr_expect(dbt_class_name_valid("interactive"));
    cr_expect(dbt_class_name_valid("etl_2-b"));
    cr_expect(dbt_class_name_valid("a2345678901234567890123456789012"));
    cr_expect(!dbt_class_name_valid("a23456789012345678901234567890123"));
    cr_expect(!dbt_class_name_valid("-"));
    cr_expect(!dbt_class_name_valid(""));
    cr_expect(!dbt_class_name_valid("Web"));
    cr_expect(!dbt_class_name_valid("a.b"));
    char err[DBT_ERRLEN] = "";
    dbt_config cfg;
    char *env[] = {"DBTHROTTLE_CLASS=a.b", NULL};
    cr_expect(!test_config_load(&cfg, env, err));
    check_refusal(err, "DBTHROTTLE_CLASS", "a.b");
    dbt_config_free(&cfg);
}
