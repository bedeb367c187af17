/* settings.h - the one table of settings (as libpq's PQconninfoOptions[]): each setting's file
 * key, environment variable, default, parser with the field it fills, and a one-line doc.
 * Parsing, defaults, `dbthrottle check`, the fuzz target and the documentation test all read
 * it, so a new setting is one row here (plus its field in dbt_config and its docs). */
#ifndef DBT_SETTINGS_H
#define DBT_SETTINGS_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct dbt_setting dbt_setting;

/* Checks one non-empty value and fills the setting's field of cfg; on a bad value writes the
 * one-line message (naming s->env) into err and leaves cfg as it was. */
typedef bool (*dbt_setting_parse)(const dbt_setting *s, dbt_config *cfg, const char *value,
                                  char *err);
/* The effective value as text, as `dbthrottle check` prints it (never a password). */
typedef void (*dbt_setting_show)(const dbt_setting *s, const dbt_config *cfg, char *out,
                                 size_t cap);

/* A kind of value (a limit, a duration, a text...): how it is parsed into its field, shown, and
 * freed. One per kind, shared by the rows of that kind. */
typedef struct {
    dbt_setting_parse parse;
    dbt_setting_show show;
    void (*release)(const dbt_setting *s, dbt_config *cfg); /* NULL: the field owns no memory */
} dbt_setting_kind;

/* What a parser needs beyond the field: one member per kind of parser. */
typedef union {
    struct {
        bool allow_zero, allow_forever; /* for dbt_parse_duration */
        int64_t min_ms, max_ms;         /* for a bounded duration ... */
        const char *range;              /* ... and the bounds in words, for its message */
    } duration;
    struct {
        const char *const *names; /* the value is the index of the name matched */
        int n;
        const char *expected; /* "open or closed" */
    } words;
    struct {
        size_t max_len;          /* 0 = any length */
        const char *null_word;   /* a value meaning "none" (log = stderr), or NULL */
        const char *unset_shown; /* shown while the field is NULL, or NULL for "" */
        bool quoted;             /* shown in double quotes */
    } text;
    struct {
        bool weights; /* DBTHROTTLE_WEIGHTS (a weight before ':'), else class rules */
    } rules;
} dbt_setting_rule;

struct dbt_setting {
    const char *key;           /* the file key, "max_queries" */
    const char *env;           /* the environment variable, "DBTHROTTLE_MAX_QUERIES" */
    const char *default_value; /* as a user would write it; NULL = unset (the field stays zero) */
    const dbt_setting_kind *kind; /* its parser (over config_values.c), show and release */
    size_t field;                 /* offsetof(dbt_config, the field kind->parse fills) */
    dbt_setting_rule rule;
    bool env_only;    /* refused in a configuration file */
    bool worker_only; /* read by the library only: the operator's commands ignore its errors */
    /* settable per pool in Redis by the operator (dbthrottle set), picked up by every worker
     * within a renewal: docs/design.md, "Live settings per pool" */
    bool live;
    const char *doc;
};

/* Every setting, in the order `dbthrottle check` prints them; ends with a row whose key is NULL. */
extern const dbt_setting dbt_settings[];

/* The setting a key names: the environment form, or the file key in any case; NULL if none. */
const dbt_setting *dbt_setting_find(const char *key);

/* The pool's live settings as Redis keeps them (docs/design.md, "Live settings per pool"): the
 * text "v<version>\n" then one "key=value\n" per setting, each value as a user writes it in the
 * file. Parsed by each row's own parser into cfg (zeroed first; dbt_live_free frees it): set[] says
 * which rows it sets. A key that is not a live row, or a value its parser refuses, is left out and
 * said in refused ("" none: "key: message; ..."). False when text is not of the format. */
typedef struct dbt_live {
    long long version; /* 0: none */
    dbt_config cfg;
    bool set[DBT_MAX_SETTINGS];
    /* the keys of the lines refused, as written ("wait_timeout,nonsense"; cut to fit), for the
     * process' record */
    char refused_keys[128];
} dbt_live;
bool dbt_live_parse(const char *text, dbt_live *out, char *refused, size_t cap);
void dbt_live_free(dbt_live *l);
/* A process' own value of each live row and where it came from, for its record (dbthrottle
 * settings and status show the values in force): "key=S:value key=S:value", S being d (default),
 * f (file) or e (environment), each value as its row shows it, cut to 64 bytes and "..." after,
 * with '%', ' ' and bytes below 0x21 as %XX. Cut whole items to fit cap. */
void dbt_live_own_format(const dbt_config *cfg, char *out, size_t cap);
/* Calls each(key, source, value, arg) for each item of such a text (value decoded); false when it
 * is not one (the items before were given). */
typedef void (*dbt_live_own_fn)(const char *key, dbt_source src, const char *value, void *arg);
bool dbt_live_own_each(const char *text, dbt_live_own_fn each, void *arg);
/* The row of a live setting its file key (any case) or variable names; NULL if none is live. */
const dbt_setting *dbt_live_find(const char *key);

/* Frees what the fields of cfg own. */
void dbt_settings_release(dbt_config *cfg);

/* Where cfg's value of s came from. */
dbt_source dbt_setting_source(const dbt_config *cfg, const dbt_setting *s);

#endif
