/* config.c - the settings: defaults, the configuration file, the environment, and where each
 * value came from. Reads the file named by DBTHROTTLE_CONFIG; prints nothing (callers log). */
#include "config.h"
#include "log.h"
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define PREFIX_LEN 11 /* strlen("DBTHROTTLE_") */

void dbt_config_defaults(dbt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    /* The defaults are valid values: a parser can fail on one only when memory runs out, and
     * that leaves the field unset (NULL), as a failed strdup of a default always did. */
    char err[DBT_ERRLEN];
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (s->default_value)
            (void)s->kind->parse(s, cfg, s->default_value, err);
}

void dbt_config_free(dbt_config *cfg)
{
    dbt_settings_release(cfg);
    memset(cfg, 0, sizeof *cfg);
}

/* Levenshtein distance, for "did you mean". Names are short, so a small table will do. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = d[i - 1][j - 1] +
                         (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static bool unknown_key(const char *key, char *err)
{
    bool env_form = strncmp(key, "DBTHROTTLE_", PREFIX_LEN) == 0;
    size_t best = 99;
    const dbt_setting *nearest = NULL;
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        size_t d = distance(key, env_form ? s->env : s->key);
        if (d < best) {
            best = d;
            nearest = s;
        }
    }
    char shown[300];
    dbt_escape(key, 64, false, shown, sizeof shown);
    if (nearest && best <= 3)
        snprintf(err, DBT_ERRLEN, "unknown setting %s (did you mean %s?)", shown,
                 env_form ? nearest->env : nearest->key);
    else
        snprintf(err, DBT_ERRLEN, "unknown setting %s", shown);
    return false;
}

bool dbt_config_set(dbt_config *cfg, const char *key, const char *value, dbt_source src, char *err)
{
    const dbt_setting *s = dbt_setting_find(key);
    if (!s)
        return unknown_key(key, err);
    if (s->env_only && src == DBT_SRC_FILE) {
        snprintf(err, DBT_ERRLEN, "%s cannot be set inside a config file", s->env);
        return false;
    }
    /* An empty value is a mistake more often than a wish for the default: say so. */
    if (!value[0])
        return dbt_bad_value(s->env, value, "empty: give a value or remove the setting", err);
    if (!s->kind->parse(s, cfg, value, err))
        return false;
    cfg->sources[s - dbt_settings] = src;
    return true;
}

dbt_source dbt_config_source(const dbt_config *cfg, const char *short_name)
{
    const dbt_setting *s = dbt_setting_find(short_name);
    return s ? dbt_setting_source(cfg, s) : DBT_SRC_DEFAULT;
}

/* Trims blanks at both ends, in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* Reads a value: "quoted" (with \" and \\) or bare up to a " #" comment. */
static bool file_value(char *v, char **out, const char **why)
{
    v = trim(v);
    if (*v == '"') {
        char *o = v, *p = v + 1;
        for (; *p && *p != '"'; p++) {
            if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            *o++ = *p;
        }
        if (*p != '"') {
            *why = "unterminated quote";
            return false;
        }
        char *rest = trim(p + 1);
        if (*rest && *rest != '#') {
            *why = "text after the closing quote";
            return false;
        }
        *o = '\0';
        *out = v;
        return true;
    }
    /* v[-1] is the blank or the (cut) '=' before the value: "pool=#1" keeps its '#'. */
    for (char *p = v; *p; p++)
        if (*p == '#' && (p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            break;
        }
    *out = trim(v);
    return true;
}

bool dbt_config_parse_text(dbt_config *cfg, const char *name, const char *text, char *err)
{
    /* The file name comes from the environment: escaped, so the message stays one line. */
    char shown[256];
    dbt_escape(name, 160, false, shown, sizeof shown);
    char *copy = strdup(text);
    if (!copy) {
        snprintf(err, DBT_ERRLEN, "%s: out of memory", shown);
        return false;
    }
    bool seen[DBT_MAX_SETTINGS] = {false};
    bool ok = true;
    int lineno = 0;
    char *next = copy;
    /* Editors on some systems start a UTF-8 file with a byte order mark: not part of a key. */
    if (strncmp(next, "\xef\xbb\xbf", 3) == 0)
        next += 3;
    /* strtok_r would skip empty lines and so miscount them: walk the lines by hand. */
    for (char *line = next; line && ok; line = next) {
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        lineno++;
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        const char *why = NULL;
        char msg[DBT_ERRLEN];
        if (!eq) {
            why = "expected key = value";
        } else {
            *eq = '\0';
            char *key = trim(l), *value = NULL;
            if (!*key) {
                why = "missing key before =";
            } else if (file_value(eq + 1, &value, &why)) {
                const dbt_setting *s = dbt_setting_find(key);
                if (s && seen[s - dbt_settings]) {
                    char key_shown[128];
                    dbt_escape(key, 64, false, key_shown, sizeof key_shown);
                    snprintf(msg, sizeof msg, "%s is set twice", key_shown);
                    why = msg;
                } else if (!dbt_config_set(cfg, key, value, DBT_SRC_FILE, msg)) {
                    why = msg;
                } else if (s) {
                    seen[s - dbt_settings] = true;
                }
            }
        }
        if (why) {
            /* Bounded parts: the name, line number and reason always fit in DBT_ERRLEN. */
            snprintf(err, DBT_ERRLEN, "%.170s:%d: %.320s", shown, lineno, why);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

#define MAX_FILE_BYTES (1 << 20)

static bool read_file(const char *path, char **out, char *err)
{
    char shown[256];
    dbt_escape(path, 160, false, shown, sizeof shown);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG: cannot read %s: %s", shown, strerror(errno));
        return false;
    }
    /* Read one byte more than allowed to tell "exactly 1 MiB" from "larger". */
    char *buf = malloc(MAX_FILE_BYTES + 1);
    size_t n = 0;
    int read_errno = 0;
    if (buf) {
        n = fread(buf, 1, MAX_FILE_BYTES + 1, f);
        if (ferror(f))
            read_errno = errno ? errno : EIO; /* a directory gives EISDIR here */
    }
    fclose(f);
    const char *why = !buf                   ? "out of memory"
                      : read_errno           ? strerror(read_errno)
                      : n > MAX_FILE_BYTES   ? "larger than 1 MiB"
                      : memchr(buf, '\0', n) ? "contains a NUL byte"
                                             : NULL;
    if (why) {
        free(buf);
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG: cannot read %s: %s", shown, why);
        return false;
    }
    buf[n] = '\0';
    *out = buf;
    return true;
}

/* The DBTHROTTLE_CONFIG entry of envp (the last one, as getenv-style overrides go), or NULL. */
static const char *config_file_of(char *const *envp)
{
    static const char var[] = "DBTHROTTLE_CONFIG=";
    const char *file = NULL;
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, var, sizeof var - 1) == 0)
            file = *e + sizeof var - 1;
    return file;
}

bool dbt_config_load(dbt_config *cfg, char *const *envp, char *err)
{
    dbt_config_defaults(cfg);
    const char *file = config_file_of(envp);
    if (file) {
        /* Recorded first, so a caller reporting a file error can name the file. */
        if (!dbt_config_set(cfg, "DBTHROTTLE_CONFIG", file, DBT_SRC_ENV, err))
            return false;
        char *text = NULL;
        if (!read_file(file, &text, err))
            return false;
        bool ok = dbt_config_parse_text(cfg, file, text, err);
        free(text);
        if (!ok)
            return false;
    }
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "DBTHROTTLE_", PREFIX_LEN) != 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char key[128];
        size_t klen = (size_t)(eq - *e);
        if (klen >= sizeof key)
            klen = sizeof key - 1;
        memcpy(key, *e, klen);
        key[klen] = '\0';
        if (!dbt_config_set(cfg, key, eq + 1, DBT_SRC_ENV, err))
            return false;
    }
    return true;
}

const char *dbt_source_name(dbt_source s)
{
    return s == DBT_SRC_FILE ? "file" : s == DBT_SRC_ENV ? "environment" : "default";
}
