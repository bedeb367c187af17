/* adapt_log.c - dbthrottle adapt's logged limit changes read back (adapt_log.h). */
#include "adapt_log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The next key=value of a logfmt line from *p: key and value (unescaped, NUL-ended, cut to fit:
 * *cut says so, as it does for a value the log cut itself: "...\""). False at the line's end or
 * on a pair that is not logfmt. */
static bool next_pair(const char **p, char *key, size_t kcap, char *val, size_t vcap, bool *cut)
{
    const char *s = *p;
    while (*s == ' ')
        s++;
    if (!*s || *s == '\n' || *s == '\r')
        return false;
    size_t k = 0;
    while (*s && *s != '=' && *s != ' ' && *s != '\n') {
        if (k + 1 < kcap)
            key[k++] = *s;
        s++;
    }
    key[k] = '\0';
    if (*s != '=' || k == 0)
        return false;
    s++;
    size_t v = 0;
    *cut = false;
    if (*s != '"') {
        while (*s && *s != ' ' && *s != '\n' && *s != '\r') {
            if (v + 1 < vcap)
                val[v++] = *s;
            else
                *cut = true;
            s++;
        }
    } else {
        s++;
        for (;;) {
            char c = *s;
            if (!c || c == '\n')
                return false; /* (no closing quote) */
            s++;
            if (c == '"')
                break;
            if (c == '\\') {
                char e = *s++;
                switch (e) {
                case 'n':
                    c = '\n';
                    break;
                case 't':
                    c = '\t';
                    break;
                case 'r':
                    c = '\r';
                    break;
                case 'x': {
                    char hex[3] = {s[0], s[0] ? s[1] : '\0', '\0'};
                    char *end = NULL;
                    long b = strtol(hex, &end, 16);
                    if (end != hex + 2)
                        return false;
                    c = (char)b;
                    s += 2;
                    break;
                }
                case '"':
                case '\\':
                    c = e;
                    break;
                default:
                    return false;
                }
            } else if (c == '.' && strncmp(s, "..\"", 3) == 0) {
                *cut = true; /* the log cut it: "...\"" ends it */
            }
            if (v + 1 < vcap)
                val[v++] = c;
            else
                *cut = true;
        }
    }
    val[v] = '\0';
    *p = s;
    return true;
}

/* "2026-12-03T06:15:19.144841Z" (UTC, up to microseconds) into us since the epoch. */
static bool parse_ts(const char *t, int64_t *out)
{
    int y, mo, d, h, mi, sec, used = 0;
    if (sscanf(t, "%4d-%2d-%2dT%2d:%2d:%2d%n", &y, &mo, &d, &h, &mi, &sec, &used) != 6)
        return false;
    struct tm tm = {.tm_year = y - 1900,
                    .tm_mon = mo - 1,
                    .tm_mday = d,
                    .tm_hour = h,
                    .tm_min = mi,
                    .tm_sec = sec};
    int64_t us = 0;
    const char *f = t + used;
    if (*f == '.') {
        int digits = 0;
        for (f++; *f >= '0' && *f <= '9'; f++)
            if (digits < 6) {
                us = us * 10 + (*f - '0');
                digits++;
            }
        for (; digits < 6; digits++)
            us *= 10;
    }
    if (strcmp(f, "Z") != 0)
        return false;
    time_t s = timegm(&tm);
    if (s == (time_t)-1)
        return false;
    *out = (int64_t)s * 1000000 + us;
    return true;
}

/* A whole number from `least` to 100000 (a limit; 0: the controller did not know the one in
 * force), else -1. */
static int limit_of(const char *v, int least)
{
    char *end = NULL;
    long n = strtol(v, &end, 10);
    return end != v && !*end && n >= least && n <= 100000 ? (int)n : -1;
}

bool dbt_adapt_log_change(const char *line, const char *pool, const char *kind,
                          dbt_adapt_change *out)
{
    char key[32], val[1024];
    bool cut, is_change = false, pool_ok = false, kind_ok = false, ts_ok = false;
    dbt_adapt_change c = {.from = -1, .to = -1};
    for (const char *p = line; next_pair(&p, key, sizeof key, val, sizeof val, &cut);) {
        if (strcmp(key, "event") == 0)
            is_change = strcmp(val, "adapt_change") == 0;
        else if (strcmp(key, "pool") == 0)
            pool_ok = !cut && strcmp(val, pool) == 0;
        else if (strcmp(key, "kind") == 0)
            kind_ok = strcmp(val, kind) == 0;
        else if (strcmp(key, "ts") == 0)
            ts_ok = parse_ts(val, &c.at_us);
        else if (strcmp(key, "from") == 0)
            c.from = limit_of(val, 0);
        else if (strcmp(key, "to") == 0)
            c.to = limit_of(val, 1);
        else if (strcmp(key, "dry_run") == 0)
            c.dry_run = strcmp(val, "true") == 0;
        else if (strcmp(key, "reason") == 0) {
            size_t l = strlen(val) < sizeof c.reason ? strlen(val) : sizeof c.reason - 1;
            memcpy(c.reason, val, l); /* (cut to fit: it is only shown) */
            c.reason[l] = '\0';
        }
    }
    if (!is_change || !pool_ok || !kind_ok || !ts_ok || c.from < 0 || c.to < 1)
        return false;
    *out = c;
    return true;
}
