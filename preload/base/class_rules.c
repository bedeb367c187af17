/* class_rules.c - the settings of classes and weights: DBTHROTTLE_CLASS_RULES and
 * DBTHROTTLE_WEIGHTS (rules of field conditions, matched per connection and per command) and
 * DBTHROTTLE_CLASSES (the shipped class definitions, turned into the definition text the scripts
 * read). Pure: no I/O; each error is one line naming the setting and the value. The regular
 * expressions are compiled here, once, so that matching a command costs a regexec, not a
 * regcomp. */
#include "config.h"

#include <fnmatch.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const field_names[DBT_RULE_NFIELDS] = {"application_name", "user", "database",
                                                          "sql"};

bool dbt_class_name_valid(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > DBT_CLASS_NAME_MAX || strcmp(name, "-") == 0)
        return false;
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '_' || *p == '-'))
            return false;
    return true;
}

static void free_rule(dbt_rule *r)
{
    for (int i = 0; i < r->ncond; i++) {
        free(r->cond[i].pattern);
        if (r->cond[i].regex) {
            regfree(r->cond[i].regex);
            free(r->cond[i].regex);
        }
    }
    r->ncond = 0;
}

void dbt_rule_list_free(dbt_rule_list *l)
{
    for (int i = 0; i < l->n; i++)
        free_rule(&l->rules[i]);
    free(l->rules);
    l->rules = NULL;
    l->n = 0;
}

/* The next `;`-separated part of *p (a `\;` is a `;` of the part), unescaped into out (cap
 * bytes); false when there is none left. A part too long for out is cut (and so refused by the
 * caller's checks: out is as long as a whole value may be). */
static bool next_part(const char **p, char *out, size_t cap)
{
    if (!**p)
        return false;
    size_t o = 0;
    const char *s = *p;
    for (; *s && *s != ';'; s++) {
        if (*s == '\\' && s[1] == ';')
            s++;
        if (o + 1 < cap)
            out[o++] = *s;
    }
    out[o] = '\0';
    *p = *s ? s + 1 : s;
    return true;
}

/* The field whose name `text` starts with, followed by '='; -1 when none (or sql when !sql). */
static int field_at(const char *text, bool sql)
{
    for (int f = 0; f < DBT_RULE_NFIELDS; f++) {
        if (f == DBT_RULE_SQL && !sql)
            continue;
        size_t n = strlen(field_names[f]);
        if (strncmp(text, field_names[f], n) == 0 && text[n] == '=')
            return f;
    }
    return -1;
}

/* Reads the conditions "field=pattern[,field=pattern...]" of one rule. A condition ends at a ','
 * that a field name and '=' follow, so that a regular expression may hold commas ({1,3}). */
static const char *parse_conds(char *text, bool weights, dbt_rule *r)
{
    char *p = text;
    while (*p) {
        int f = field_at(p, weights);
        if (f < 0)
            return weights ? "expected application_name=, user=, database= or sql= after the ':'"
                           : "expected application_name=, user= or database= after the ':'";
        if (r->ncond == DBT_MAX_RULE_CONDS)
            return "at most 4 conditions in a rule";
        char *value = p + strlen(field_names[f]) + 1, *end = value;
        while (*end && !(*end == ',' && field_at(end + 1, weights) >= 0))
            end++;
        char *next = *end ? end + 1 : end;
        *end = '\0';
        if (!*value)
            return "a condition with an empty pattern";
        dbt_rule_cond *c = &r->cond[r->ncond];
        c->field = (dbt_rule_field)f;
        c->regex = NULL;
        if (!(c->pattern = strdup(value)))
            return "out of memory";
        r->ncond++;
        if (f == DBT_RULE_SQL) {
            regex_t *re = malloc(sizeof *re);
            if (!re)
                return "out of memory";
            /* Case-insensitive as SQL keywords are; REG_NOSUB: only whether it matches. glibc
             * takes the GNU escapes (\s, \w, \b) in an extended expression. */
            if (regcomp(re, value, REG_EXTENDED | REG_ICASE | REG_NOSUB) != 0) {
                free(re);
                return "sql= is not a valid POSIX extended regular expression";
            }
            c->regex = re;
        }
        p = next;
    }
    return r->ncond ? NULL : "a rule without a condition";
}

/* A whole number in [lo, hi], optionally signed; false on anything else. */
static bool int_in(const char *s, long lo, long hi, long *out)
{
    char *end;
    if (!*s || (*s != '-' && *s != '+' && (*s < '0' || *s > '9')))
        return false;
    long v = strtol(s, &end, 10);
    if (*end || v < lo || v > hi)
        return false;
    *out = v;
    return true;
}

static bool parse_rules(const char *setting, const char *text, bool weights, dbt_rule_list *out,
                        char *err)
{
    dbt_rule got[DBT_MAX_RULES];
    memset(got, 0, sizeof got);
    int n = 0;
    const char *p = text, *why = NULL;
    size_t cap = strlen(text) + 1;
    char *part = malloc(cap), *shown = NULL;
    if (!part)
        return dbt_bad_value(setting, text, "out of memory", err);
    while (!why && next_part(&p, part, cap)) {
        if (!part[0])
            continue; /* "a;;b" or a trailing ';' */
        shown = part;
        char *colon = strchr(part, ':');
        if (n == DBT_MAX_RULES) {
            why = "at most 16 rules";
            break;
        }
        dbt_rule *r = &got[n++];
        if (!colon) {
            why = weights ? "expected N:field=pattern" : "expected NAME:field=glob";
            break;
        }
        *colon = '\0';
        long w;
        if (weights && !int_in(part, 1, 100000, &w))
            why = "the weight before ':' must be a whole number from 1 to 100000";
        else if (!weights && !dbt_class_name_valid(part))
            why = "the class name before ':' must be 1 to 32 of a-z, 0-9, '_' and '-'";
        *colon = ':'; /* the rule is shown whole */
        if (why)
            break;
        if (weights)
            r->weight = (int)w;
        else
            snprintf(r->klass, sizeof r->klass, "%.*s", (int)(colon - part), part);
        why = parse_conds(colon + 1, weights, r);
    }
    if (!why && n == 0) {
        why = "expected at least one rule";
        shown = NULL;
    }
    bool ok = !why || dbt_bad_value(setting, shown ? shown : text, why, err);
    free(part);
    if (!ok) {
        for (int i = 0; i < n; i++)
            free_rule(&got[i]);
        return false;
    }
    dbt_rule *rules = malloc(sizeof *rules * (size_t)n);
    if (!rules) {
        for (int i = 0; i < n; i++)
            free_rule(&got[i]);
        return dbt_bad_value(setting, text, "out of memory", err);
    }
    memcpy(rules, got, sizeof *rules * (size_t)n);
    dbt_rule_list_free(out);
    out->rules = rules;
    out->n = n;
    return true;
}

bool dbt_parse_class_rules(const char *setting, const char *text, dbt_rule_list *out, char *err)
{
    return parse_rules(setting, text, false, out, err);
}

bool dbt_parse_weights(const char *setting, const char *text, dbt_rule_list *out, char *err)
{
    return parse_rules(setting, text, true, out, err);
}

const dbt_rule *dbt_rules_match(const dbt_rule_list *l, const dbt_rule_values *v)
{
    for (int i = 0; i < l->n; i++) {
        const dbt_rule *r = &l->rules[i];
        bool all = true;
        for (int k = 0; k < r->ncond && all; k++) {
            const dbt_rule_cond *c = &r->cond[k];
            const char *value = v->value[c->field];
            if (!value) {
                all = false;
            } else if (c->regex) {
                /* Only the text's first DBT_RULE_SQL_MAX bytes: an unanchored expression is
                 * tried at every offset, and a command must not pay for its text's length. */
                regmatch_t span = {.rm_so = 0, .rm_eo = (regoff_t)strnlen(value, DBT_RULE_SQL_MAX)};
                all = regexec(c->regex, value, 1, &span, REG_STARTEND) == 0;
            } else {
                all = fnmatch(c->pattern, value, 0) == 0;
            }
        }
        if (all)
            return r;
    }
    return NULL;
}

void dbt_rules_show(const dbt_rule_list *l, bool weights, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = '\0';
    for (int i = 0; i < l->n && len + 1 < cap; i++) {
        const dbt_rule *r = &l->rules[i];
        if (weights)
            len += (size_t)snprintf(out + len, cap - len, "%s%d:", i ? ";" : "", r->weight);
        else
            len += (size_t)snprintf(out + len, cap - len, "%s%s:", i ? ";" : "", r->klass);
        for (int k = 0; k < r->ncond && len + 1 < cap; k++) {
            len += (size_t)snprintf(out + len, cap - len, "%s%s=", k ? "," : "",
                                    field_names[r->cond[k].field]);
            /* As it is written: a ';' of the pattern escaped, so that the text reads back. */
            for (const char *c = r->cond[k].pattern; *c && len + 3 < cap; c++) {
                if (*c == ';')
                    out[len++] = '\\';
                out[len++] = *c;
            }
            out[len < cap ? len : cap - 1] = '\0';
        }
    }
    if (!l->n)
        snprintf(out, cap, "none");
}

/* ---- DBTHROTTLE_CLASSES ---------------------------------------------------------------------- */

typedef struct {
    char name[DBT_CLASS_NAME_MAX + 1];
    long share, priority;
    long long wait_ms, cap; /* -1: none */
} class_def;

/* "75%" (or "75"): a share from 0 to 100. */
static bool share_of(const char *s, long *out)
{
    char buf[16];
    size_t n = strlen(s);
    if (n == 0 || n >= sizeof buf)
        return false;
    memcpy(buf, s, n + 1);
    if (buf[n - 1] == '%')
        buf[n - 1] = '\0';
    return int_in(buf, 0, 100, out) && buf[0] != '-' && buf[0] != '+';
}

/* One class: "name=share%[,priority=N][,wait=DURATION][,queue_cap=N]". */
static const char *parse_class(const char *setting, char *part, class_def *d, char *err)
{
    char *eq = strchr(part, '=');
    *eq = '\0';
    if (!dbt_class_name_valid(part))
        return "a class name must be 1 to 32 of a-z, 0-9, '_' and '-'";
    snprintf(d->name, sizeof d->name, "%s", part);
    d->priority = 0;
    d->wait_ms = d->cap = -1;
    char *save = NULL, *item = strtok_r(eq + 1, ",", &save);
    if (!item || !share_of(item, &d->share))
        return "a class's share must be a percentage from 0% to 100% (name=75%)";
    while ((item = strtok_r(NULL, ",", &save)) != NULL) {
        char *v = strchr(item, '=');
        if (!v)
            return "expected priority=N, wait=DURATION or queue_cap=N after the share";
        *v++ = '\0';
        long n;
        int64_t ms;
        if (strcmp(item, "priority") == 0) {
            if (!int_in(v, -1000, 1000, &n))
                return "priority must be a whole number from -1000 to 1000";
            d->priority = n;
        } else if (strcmp(item, "wait") == 0) {
            char sub[DBT_ERRLEN];
            if (!dbt_parse_duration(setting, v, true, true, &ms, sub))
                return "wait must be a duration such as 500ms, 5s or 2m (or none)";
            d->wait_ms = ms == DBT_FOREVER ? -1 : ms;
        } else if (strcmp(item, "queue_cap") == 0) {
            if (!int_in(v, 0, 1000000000, &n) || v[0] == '-' || v[0] == '+')
                return "queue_cap must be a whole number from 0 (never queue) up";
            d->cap = n;
        } else {
            return "expected priority=N, wait=DURATION or queue_cap=N after the share";
        }
    }
    (void)err;
    return NULL;
}

/* DBT_MAX_CLASSES as text, for the refusal. */
#define CAP_TEXT(n)  #n
#define CAP_TEXT2(n) CAP_TEXT(n)
#define CLASSES_CAP  CAP_TEXT2(DBT_MAX_CLASSES)

bool dbt_parse_classes(const char *setting, const char *text, char **out, char *err)
{
    class_def defs[DBT_MAX_CLASSES];
    int n = 0;
    long total = 0;
    int64_t aging_ms = 0;
    char deflt[DBT_CLASS_NAME_MAX + 1] = "";
    size_t cap = strlen(text) + 1;
    char *part = malloc(cap);
    if (!part)
        return dbt_bad_value(setting, text, "out of memory", err);
    const char *p = text, *why = NULL;
    char shown[DBT_ERRLEN] = "";
    while (!why && next_part(&p, part, cap)) {
        if (!part[0])
            continue;
        snprintf(shown, sizeof shown, "%s", part);
        char *eq = strchr(part, '=');
        bool is_class = eq && eq[1] && (strchr(eq, '%') || strchr(eq, ','));
        if (!eq) {
            why = "expected name=SHARE%, aging=DURATION or default=NAME";
        } else if (!is_class && strncmp(part, "aging=", 6) == 0) {
            char sub[DBT_ERRLEN];
            if (!dbt_parse_duration(setting, part + 6, true, false, &aging_ms, sub))
                why = "aging must be a duration such as 30s (0: no aging bound)";
        } else if (!is_class && strncmp(part, "default=", 8) == 0) {
            if (part[8] && !dbt_class_name_valid(part + 8))
                why = "default= must name a class (1 to 32 of a-z, 0-9, '_' and '-')";
            else
                snprintf(deflt, sizeof deflt, "%s", part + 8);
        } else if (n == DBT_MAX_CLASSES) {
            why = "at most " CLASSES_CAP " classes";
        } else if (!(why = parse_class(setting, part, &defs[n], err))) {
            for (int i = 0; i < n && !why; i++)
                if (strcmp(defs[i].name, defs[n].name) == 0)
                    why = "a class defined twice";
            total += defs[n].share;
            n++;
            if (!why && total > 100)
                why = "the shares add up to more than 100%";
        }
    }
    free(part);
    if (!why && n == 0) {
        why = "expected at least one class (name=SHARE%)";
        shown[0] = '\0';
    }
    if (!why && deflt[0]) {
        bool found = false;
        for (int i = 0; i < n; i++)
            found = found || strcmp(defs[i].name, deflt) == 0;
        if (!found) {
            why = "default= names no class defined in the value";
            shown[0] = '\0';
        }
    }
    if (why)
        return dbt_bad_value(setting, shown[0] ? shown : text, why, err);
    size_t room = 64 + (size_t)n * 96, len;
    char *def = malloc(room);
    if (!def)
        return dbt_bad_value(setting, text, "out of memory", err);
    len = (size_t)snprintf(def, room, "aging=%lld;default=%s", (long long)aging_ms, deflt);
    for (int i = 0; i < n; i++) {
        char wait[24] = "-", capped[24] = "-";
        if (defs[i].wait_ms >= 0)
            snprintf(wait, sizeof wait, "%lld", defs[i].wait_ms);
        if (defs[i].cap >= 0)
            snprintf(capped, sizeof capped, "%lld", defs[i].cap);
        len += (size_t)snprintf(def + len, room - len, ";%s:%ld:%ld:%s:%s", defs[i].name,
                                defs[i].share, defs[i].priority, wait, capped);
    }
    free(*out);
    *out = def;
    return true;
}
