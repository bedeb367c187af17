/* The settings table, and the four documents that list the settings (the README table,
 * docs/configuration.md, config/dbthrottle.conf.example, libdbthrottle(7)): each names exactly
 * the table's settings, none missing, none extra, none twice. */
#include "config.h"
#include "settings.h"

#include <criterion/criterion.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DBT_SOURCE_DIR
#define DBT_SOURCE_DIR "."
#endif

#define MAX_NAMES 64

/* The names one document gives, in the order it gives them, with the line each is on. */
typedef struct {
    const char *doc;
    int n;
    char name[MAX_NAMES][64];
    char value[MAX_NAMES][128]; /* the default the document states, when it states one */
    int line[MAX_NAMES];
} doc_names;

static int nsettings(void)
{
    int n = 0;
    while (dbt_settings[n].key)
        n++;
    return n;
}

static char *read_doc(const char *path)
{
    char full[512];
    snprintf(full, sizeof full, "%s/%s", DBT_SOURCE_DIR, path);
    FILE *f = fopen(full, "r");
    cr_assert_not_null(f, "cannot read %s", full);
    char *text = NULL;
    size_t cap = 0;
    ssize_t len = getdelim(&text, &cap, '\0', f);
    fclose(f);
    cr_assert(len > 0, "%s is empty", full);
    return text;
}

static void add_name(doc_names *d, const char *name, size_t len, const char *value,
                     size_t value_len, int line)
{
    cr_assert(d->n < MAX_NAMES, "%s: more than %d names", d->doc, MAX_NAMES);
    snprintf(d->name[d->n], sizeof d->name[0], "%.*s", (int)len, name);
    snprintf(d->value[d->n], sizeof d->value[0], "%.*s", (int)value_len, value ? value : "");
    d->line[d->n++] = line;
}

/* Calls each_line(d, line, number, state) for every line of the document. */
static void scan(doc_names *d, const char *path,
                 void (*each_line)(doc_names *d, const char *line, int number, int *state))
{
    d->doc = path;
    d->n = 0;
    char *text = read_doc(path);
    int state = 0, number = 0;
    for (char *line = text, *next; line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        each_line(d, line, ++number, &state);
    }
    free(text);
}

/* A Markdown table row whose first cell is `DBTHROTTLE_...`: the name, and the cell `column`
 * cells further as the value ("| `DBTHROTTLE_LEASE` | `lease` | `10s` | ..."). */
static void table_row(doc_names *d, const char *line, int number, int column)
{
    static const char start[] = "| `DBTHROTTLE_";
    if (strncmp(line, start, sizeof start - 1) != 0)
        return;
    const char *name = line + 3;
    size_t len = strcspn(name, "`");
    const char *cell = name + len;
    for (int c = 0; c < column && cell; c++) {
        cell = strstr(cell, " | ");
        cell = cell ? cell + 3 : NULL;
    }
    size_t cell_len = cell ? strcspn(cell, "|") : 0;
    while (cell_len && cell[cell_len - 1] == ' ')
        cell_len--;
    add_name(d, name, len, cell, cell_len, number);
}

/* README: | variable | default | what it does | */
static void readme_line(doc_names *d, const char *line, int number, int *state)
{
    (void)state;
    table_row(d, line, number, 1);
}

/* docs/configuration.md: | environment | file key | default | values |; the file key is
 * checked against the table with the names (the value here), the default by its own pass. */
static void configuration_key_line(doc_names *d, const char *line, int number, int *state)
{
    (void)state;
    table_row(d, line, number, 1);
}

static void configuration_default_line(doc_names *d, const char *line, int number, int *state)
{
    (void)state;
    table_row(d, line, number, 2);
}

/* The example file: `key = value`, commented out (`#key = value`) when the default is unset. */
static void example_line(doc_names *d, const char *line, int number, int *state)
{
    (void)state;
    const char *key = line[0] == '#' ? line + 1 : line;
    size_t len = 0;
    while (islower((unsigned char)key[len]) || key[len] == '_')
        len++;
    if (len == 0 || strncmp(key + len, " = ", 3) != 0)
        return;
    /* A commented-out line shows an example, not the default: say so with an empty value. */
    const char *value = line[0] == '#' ? "" : key + len + 3;
    add_name(d, key, len, value, strlen(value), number);
}

/* libdbthrottle(7): each `.TP` of the ENVIRONMENT section is followed by `.B DBTHROTTLE_...`. */
static void man_line(doc_names *d, const char *line, int number, int *state)
{
    enum { BEFORE, IN_SECTION, AFTER_TP, AFTER };
    if (strncmp(line, ".SH ", 4) == 0) {
        *state = strcmp(line, ".SH ENVIRONMENT") == 0 ? IN_SECTION
                 : *state == BEFORE                   ? BEFORE
                                                      : AFTER;
        return;
    }
    if (*state == AFTER_TP) {
        *state = IN_SECTION;
        cr_expect(strncmp(line, ".B ", 3) == 0, "%s:%d: a .TP not followed by .B NAME", d->doc,
                  number);
        if (strncmp(line, ".B ", 3) == 0)
            add_name(d, line + 3, strlen(line + 3), NULL, 0, number);
    } else if (*state == IN_SECTION && strcmp(line, ".TP") == 0) {
        *state = AFTER_TP;
    }
}

/* Each wanted name (the environment name, or the file key when by_key) is in d exactly once,
 * and d names nothing else. Settings refused in a file are not wanted when by_key. */
static void expect_exactly_the_table(const doc_names *d, bool by_key)
{
    int found[MAX_NAMES] = {0};
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        const char *want = by_key ? s->key : s->env;
        int times = 0;
        for (int i = 0; i < d->n; i++)
            if (strcmp(d->name[i], want) == 0) {
                times++;
                found[i] = 1;
            }
        if (by_key && s->env_only)
            cr_expect_eq(times, 0, "%s names %s, which cannot be set in a file", d->doc, want);
        else
            cr_expect_eq(times, 1, "%s names the setting %s %d times (once wanted)", d->doc, want,
                         times);
    }
    for (int i = 0; i < d->n; i++)
        cr_expect(found[i], "%s:%d names %s, which is not in the settings table", d->doc,
                  d->line[i], d->name[i]);
}

/* The value the document gives beside the setting's name. */
static const char *value_of(const doc_names *d, const char *name)
{
    for (int i = 0; i < d->n; i++)
        if (strcmp(d->name[i], name) == 0)
            return d->value[i];
    return NULL;
}

/* ---- the table itself ---- */

Test(settings_table, each_row_is_whole_and_its_names_agree)
{
    cr_assert(nsettings() > 0 && nsettings() <= DBT_MAX_SETTINGS);
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        /* The file key is the variable without its prefix, in lower case: "did you mean" and the
         * messages rely on it. */
        char env[80] = "DBTHROTTLE_";
        for (size_t i = 0; s->key[i] && i < 60; i++)
            env[11 + i] = (char)toupper((unsigned char)s->key[i]);
        cr_expect_str_eq(s->env, env);
        cr_expect_not_null(s->kind, "%s has no kind", s->env);
        cr_expect(s->kind && s->kind->parse && s->kind->show, "%s: parse and show", s->env);
        cr_expect(s->doc && s->doc[0] && !strchr(s->doc, '\n'), "%s: a one-line doc", s->env);
        cr_expect_eq(dbt_setting_find(s->key), s, "%s by its file key", s->key);
        cr_expect_eq(dbt_setting_find(s->env), s, "%s by its variable", s->env);
        for (const dbt_setting *t = s + 1; t->key; t++)
            cr_expect(strcmp(s->key, t->key) != 0, "%s is in the table twice", s->key);
    }
    cr_expect_null(dbt_setting_find("DBTHROTTLE_NONSENSE"));
    cr_expect_null(dbt_setting_find("nonsense"));
}

/* Each default is a value the parser takes, giving the state dbt_config_defaults gives, and
 * `dbthrottle check` shows it as the table (and so the documents) write it. */
Test(settings_table, defaults_parse_and_show_as_written)
{
    dbt_config c;
    dbt_config_defaults(&c);
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        char shown[512], err[DBT_ERRLEN] = "";
        s->kind->show(s, &c, shown, sizeof shown);
        cr_expect_eq(dbt_setting_source(&c, s), DBT_SRC_DEFAULT, "%s", s->env);
        if (!s->default_value)
            continue;
        char quoted[300];
        snprintf(quoted, sizeof quoted, "\"%s\"", s->default_value);
        cr_expect(strcmp(shown, s->default_value) == 0 || strcmp(shown, quoted) == 0,
                  "%s: the default %s is shown as %s", s->env, s->default_value, shown);
        cr_expect(dbt_config_set(&c, s->env, s->default_value, DBT_SRC_ENV, err), "%s: %s", s->env,
                  err);
        char again[512];
        s->kind->show(s, &c, again, sizeof again);
        cr_expect_str_eq(again, shown, "%s: the default shows as it parses", s->env);
    }
    dbt_config_free(&c);
}

/* ---- the documents ---- */

Test(settings_docs, readme_table_names_exactly_the_settings)
{
    static doc_names d;
    scan(&d, "README.md", readme_line);
    expect_exactly_the_table(&d, false);
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        const char *said = value_of(&d, s->env);
        char want[160];
        snprintf(want, sizeof want, "`%s`", s->default_value ? s->default_value : "");
        if (said && s->default_value)
            cr_expect_str_eq(said, want, "README.md: the default of %s is %s, not %s", s->env, want,
                             said);
    }
}

Test(settings_docs, configuration_md_names_exactly_the_settings_with_their_keys)
{
    static doc_names d;
    scan(&d, "docs/configuration.md", configuration_key_line);
    expect_exactly_the_table(&d, false);
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        const char *said = value_of(&d, s->env);
        char want[80];
        snprintf(want, sizeof want, s->env_only ? "(environment only)" : "`%s`", s->key);
        if (said)
            cr_expect_str_eq(said, want, "docs/configuration.md: the file key of %s is %s, not %s",
                             s->env, want, said);
    }
    scan(&d, "docs/configuration.md", configuration_default_line);
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        const char *said = value_of(&d, s->env);
        char want[160];
        snprintf(want, sizeof want, "`%s`", s->default_value ? s->default_value : "");
        if (said && s->default_value)
            cr_expect_str_eq(said, want, "docs/configuration.md: the default of %s is %s, not %s",
                             s->env, want, said);
    }
}

Test(settings_docs, example_config_names_exactly_the_settings_with_their_defaults)
{
    static doc_names d;
    scan(&d, "config/dbthrottle.conf.example", example_line);
    expect_exactly_the_table(&d, true);
    /* "every setting of libdbthrottle.so, with its default": set lines give the default, and only
     * the settings unset by default are commented out. */
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        const char *said = value_of(&d, s->key);
        const char *want = s->default_value ? s->default_value : "";
        char should[160];
        snprintf(should, sizeof should, s->default_value ? "set to %s" : "commented out (%s)",
                 s->default_value ? want : "unset by default");
        if (said && !s->env_only)
            cr_expect_str_eq(said, want, "config/dbthrottle.conf.example: %s (%s) should be %s",
                             s->key, said[0] ? said : "commented out", should);
    }
}

Test(settings_docs, man_page_names_exactly_the_settings)
{
    static doc_names d;
    scan(&d, "docs/libdbthrottle.7", man_line);
    expect_exactly_the_table(&d, false);
}

/* A pool's live settings as Redis keeps them (dbthrottle set): each value by its row's own
 * parser; a key that is not live, a line that is not key=value and a value the parser refuses
 * are left out and said; a text without its version is not live settings at all. */
Test(settings, live_settings_text)
{
    dbt_live l;
    char refused[512];
    cr_assert(dbt_live_parse("v3\nwait_timeout=1s\n", &l, refused, sizeof refused));
    cr_expect_eq(l.version, 3);
    const dbt_setting *w = dbt_live_find("DBTHROTTLE_WAIT_TIMEOUT");
    cr_assert(w && w == dbt_live_find("Wait_Timeout"));
    cr_expect(l.set[w - dbt_settings]);
    cr_expect_eq(l.cfg.wait_timeout_ms, 1000);
    cr_expect_str_eq(refused, "");
    dbt_live_free(&l);

    cr_assert(dbt_live_parse("v4\nwait_timeout=soon\nmax_queries=3\nnonsense\n", &l, refused,
                             sizeof refused));
    cr_expect_not(l.set[w - dbt_settings], "a refused value is not applied");
    cr_expect(strstr(refused, "wait_timeout: DBTHROTTLE_WAIT_TIMEOUT") != NULL, "%s", refused);
    cr_expect(strstr(refused, "max_queries: not a live setting's key") != NULL, "%s", refused);
    cr_expect(strstr(refused, "nonsense: not key=value") != NULL, "%s", refused);
    cr_expect_str_eq(l.refused_keys, "wait_timeout,max_queries,nonsense",
                     "each refused line's key, for the process' record");
    dbt_live_free(&l);

    cr_assert(dbt_live_parse("v6\nDBTHROTTLE_WAIT_TIMEOUT=1s\nWait_Timeout=2s\n", &l, refused,
                             sizeof refused));
    cr_expect_not(l.set[w - dbt_settings], "only the file key as dbthrottle set writes it");
    cr_expect(strstr(refused, "DBTHROTTLE_WAIT_TIMEOUT: not a live setting's key") != NULL, "%s",
              refused);
    dbt_live_free(&l);
    cr_expect_not(dbt_live_parse("v5\r\nwait_timeout=1s\n", &l, refused, sizeof refused),
                  "the version line as renew.lua reads it");
    cr_expect_not(dbt_live_parse("v+5\n", &l, refused, sizeof refused));
    cr_expect_not(dbt_live_parse("v1234567890123456\n", &l, refused, sizeof refused),
                  "16 digits: renew.lua reads version 0");

    cr_assert(dbt_live_parse("v5\n", &l, refused, sizeof refused), "a version with nothing set");
    cr_expect_eq(l.version, 5);
    cr_expect_not(l.set[w - dbt_settings]);
    dbt_live_free(&l);
    cr_expect_not(dbt_live_parse("wait_timeout=1s\n", &l, refused, sizeof refused));
    cr_expect_not(dbt_live_parse("v0\n", &l, refused, sizeof refused));
    cr_expect_not(dbt_live_parse("vx\n", &l, refused, sizeof refused));
    cr_expect_null(dbt_live_find("max_queries"), "only the rows marked live");
}

/* A process' own values of the live rows, for its record: each with where it came from, a value
 * with a space or a '%' (an exemption's glob) read back as it was, whole items only when cut. */
typedef struct {
    char keys[256], values[512];
    dbt_source src_of_exempt, src_of_wait;
} own_seen;

static void on_own(const char *key, dbt_source src, const char *value, void *arg)
{
    own_seen *o = arg;
    snprintf(o->keys + strlen(o->keys), sizeof o->keys - strlen(o->keys), "%s,", key);
    snprintf(o->values + strlen(o->values), sizeof o->values - strlen(o->values), "%s|", value);
    if (strcmp(key, "exempt") == 0)
        o->src_of_exempt = src;
    if (strcmp(key, "wait_timeout") == 0)
        o->src_of_wait = src;
}

Test(settings, live_own_values_for_the_record)
{
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN], text[512];
    cr_assert(dbt_config_set(&c, "DBTHROTTLE_EXEMPT", "application_name=a b%41*", DBT_SRC_ENV, err),
              "%s", err);
    cr_assert(dbt_config_set(&c, "wait_timeout", "30s", DBT_SRC_FILE, err), "%s", err);
    dbt_live_own_format(&c, text, sizeof text);
    cr_expect_null(strchr(text, '\t'));
    own_seen o = {.keys = ""};
    cr_assert(dbt_live_own_each(text, on_own, &o), "%s", text);
    cr_expect_str_eq(
        o.keys,
        "wait_timeout,lease,on_redis_error,mode,sample,log_level,exempt,class_rules,weights,", "%s",
        text);
    cr_expect_str_eq(o.values,
                     "30s|10s|open|enforce|shadow|warn|application_name=a b%41*|none|none|", "%s",
                     text);
    cr_expect_eq(o.src_of_exempt, DBT_SRC_ENV);
    cr_expect_eq(o.src_of_wait, DBT_SRC_FILE);
    char small[48];
    dbt_live_own_format(&c, small, sizeof small);
    own_seen cut = {.keys = ""};
    cr_assert(dbt_live_own_each(small, on_own, &cut), "%s", small);
    cr_expect_str_eq(cut.keys, "wait_timeout,lease,", "whole items: %s", small);
    cr_expect_not(dbt_live_own_each("wait_timeout=x:1s", on_own, &o), "not a source letter");
    /* a value longer than 64 bytes is cut and says so */
    cr_assert(
        dbt_config_set(&c, "exempt",
                       "application_name=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
                       "aaaaaaaaaaa,user=b",
                       DBT_SRC_FILE, err),
        "%s", err);
    own_seen longer = {.keys = ""};
    dbt_live_own_format(&c, text, sizeof text);
    cr_assert(dbt_live_own_each(text, on_own, &longer), "%s", text);
    cr_expect(strstr(longer.values, "aaaa...|") != NULL, "%s", longer.values);
    dbt_config_free(&c);
}

/* DBTHROTTLE_MODE: both kinds, or per kind (a kind not named: enforce), shown back as written;
 * a bad one refused naming the setting and its value. */
Test(settings, mode_per_kind)
{
    static const struct {
        const char *value, *shown;
        dbt_mode queries, connections;
        unsigned named;
    } good[] = {
        {"shadow", "shadow", DBT_MODE_SHADOW, DBT_MODE_SHADOW, 3},
        {"ENFORCE", "enforce", DBT_MODE_ENFORCE, DBT_MODE_ENFORCE, 3},
        {"queries=shadow", "queries=shadow", DBT_MODE_SHADOW, DBT_MODE_ENFORCE, 1},
        {"connections=shadow", "connections=shadow", DBT_MODE_ENFORCE, DBT_MODE_SHADOW, 2},
        {"connections=shadow,queries=enforce", "queries=enforce,connections=shadow",
         DBT_MODE_ENFORCE, DBT_MODE_SHADOW, 3},
        {"queries=shadow,connections=shadow", "shadow", DBT_MODE_SHADOW, DBT_MODE_SHADOW, 3},
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        dbt_config c;
        char err[DBT_ERRLEN], shown[64];
        dbt_config_defaults(&c);
        cr_assert(dbt_config_set(&c, "DBTHROTTLE_MODE", good[i].value, DBT_SRC_ENV, err), "%s",
                  err);
        cr_expect_eq(c.mode[0], good[i].queries, "%s", good[i].value);
        cr_expect_eq(c.mode[1], good[i].connections, "%s", good[i].value);
        cr_expect_eq(c.mode_named, good[i].named, "%s", good[i].value);
        dbt_mode_show(c.mode, c.mode_named, shown, sizeof shown);
        cr_expect_str_eq(shown, good[i].shown);
        dbt_config_free(&c);
    }
    static const char *const bad[] = {"",
                                      "sideways",
                                      "queries=maybe",
                                      "rows=shadow",
                                      "queries=shadow,queries=enforce",
                                      "queries=shadow,",
                                      "queries",
                                      "shadow,connections=enforce"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dbt_config c;
        char err[DBT_ERRLEN];
        dbt_config_defaults(&c);
        cr_expect_not(dbt_config_set(&c, "DBTHROTTLE_MODE", bad[i], DBT_SRC_ENV, err), "took %s",
                      bad[i]);
        cr_expect(strstr(err, "DBTHROTTLE_MODE") != NULL, "%s", err);
        cr_expect(!strchr(err, '\n'), "one line: %s", err);
        cr_expect_eq(c.mode[0], DBT_MODE_ENFORCE, "a refused value leaves the mode as it was");
        dbt_config_free(&c);
    }
}
