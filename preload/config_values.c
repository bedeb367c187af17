/* config_values.c - parsers for setting values: durations, limits, booleans, Redis URLs.
 * Pure functions: no I/O, no global state; each error is one line naming the setting and value. */
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Quotes a value for a message: control bytes escaped, cut at 64 bytes, so the message stays
 * one line and short. */
static void quote(const char *text, char *out, size_t cap)
{
    size_t o = 0;
    out[o++] = '"';
    for (size_t i = 0; text[i] && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i >= 64) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
}

static bool bad(char *err, const char *setting, const char *text, const char *expected)
{
    char q[300];
    quote(text, q, sizeof q);
    snprintf(err, DBT_ERRLEN, "%s: bad value %s: %s", setting, q, expected);
    return false;
}

static const char *skip_space(const char *s)
{
    while (*s == ' ' || *s == '\t')
        s++;
    return s;
}

/* Parses a whole non-negative decimal number between s and end; false on anything else. */
static bool whole_number(const char *s, const char *end, long long max, long long *out)
{
    if (s == end)
        return false;
    long long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        if (v > (max - (*p - '0')) / 10)
            return false;
        v = v * 10 + (*p - '0');
    }
    *out = v;
    return true;
}

bool dbt_parse_duration(const char *setting, const char *text, bool allow_zero, bool allow_forever,
                        int64_t *out_ms, char *err)
{
    static const char expected[] = "expected a duration such as 500ms, 5s or 2m";
    const char *s = skip_space(text);
    const char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    size_t len = (size_t)(end - s);
    if (allow_forever) {
        static const char *const forever[] = {"infinite", "forever", "none"};
        for (size_t i = 0; i < 3; i++)
            if (len == strlen(forever[i]) && strncasecmp(s, forever[i], len) == 0) {
                *out_ms = DBT_FOREVER;
                return true;
            }
    }
    const char *unit = s;
    while (unit < end && *unit >= '0' && *unit <= '9')
        unit++;
    long long n;
    const long long day_ms = 24LL * 3600 * 1000;
    if (!whole_number(s, unit, day_ms, &n))
        return bad(err, setting, text, expected);
    size_t ulen = (size_t)(end - unit);
    long long mult;
    if (ulen == 0) {
        if (n == 0 && allow_zero) {
            *out_ms = 0;
            return true;
        }
        return bad(err, setting, text, "needs a unit: ms, s, m or h");
    } else if (ulen == 2 && strncmp(unit, "ms", 2) == 0) {
        mult = 1;
    } else if (ulen == 1 && *unit == 's') {
        mult = 1000;
    } else if (ulen == 1 && *unit == 'm') {
        mult = 60 * 1000;
    } else if (ulen == 1 && *unit == 'h') {
        mult = 3600 * 1000;
    } else {
        return bad(err, setting, text, "unknown unit: use ms, s, m or h");
    }
    if (n > day_ms / mult)
        return bad(err, setting, text, "more than 24h");
    if (n == 0 && !allow_zero)
        return bad(err, setting, text, "must be more than 0");
    *out_ms = n * mult;
    return true;
}

bool dbt_parse_limit(const char *setting, const char *text, int *out, char *err)
{
    const char *s = skip_space(text);
    const char *end = s + strlen(s);
    while (end > s && (end[-1] == ' ' || end[-1] == '\t'))
        end--;
    long long v;
    if (!whole_number(s, end, 1000000000, &v) || v < 1 || v > 100000)
        return bad(err, setting, text, "expected a whole number from 1 to 100000");
    *out = (int)v;
    return true;
}

bool dbt_parse_bool(const char *setting, const char *text, bool *out, char *err)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    for (size_t i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *out = true;
            return true;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *out = false;
            return true;
        }
    }
    return bad(err, setting, text, "expected on or off");
}

/* Percent-decodes [s, end) into a new string; NULL when malformed or out of memory. */
static char *pct_decode(const char *s, const char *end)
{
    char *out = malloc((size_t)(end - s) + 1), *o = out;
    if (!out)
        return NULL;
    for (const char *p = s; p < end; p++) {
        if (*p == '%') {
            if (end - p < 3 || !isxdigit((unsigned char)p[1]) || !isxdigit((unsigned char)p[2])) {
                free(out);
                return NULL;
            }
            char hex[3] = {p[1], p[2], 0};
            *o++ = (char)strtol(hex, NULL, 16);
            p += 2;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

void dbt_redis_url_free(dbt_redis_url *u)
{
    free(u->host);
    free(u->path);
    free(u->user);
    free(u->password);
    memset(u, 0, sizeof *u);
}

/* Error for a malformed URL: the URL is shown with its password masked. */
/* Error for a malformed URL. A malformed URL cannot be trusted to show where its password is, so
 * one with an '@' is not echoed at all. */
static bool bad_url(char *err, const char *setting, const char *text, const char *why)
{
    if (strchr(text, '@')) {
        snprintf(err, DBT_ERRLEN, "%s: bad value (not shown: it may hold a password): %s", setting,
                 why);
        return false;
    }
    return bad(err, setting, text, why);
}

static bool parse_db(const char *s, const char *end, int *db)
{
    long long v;
    if (!whole_number(s, end, 99999, &v))
        return false;
    *db = (int)v;
    return true;
}

static bool parse_unix(const char *setting, const char *text, const char *rest, dbt_redis_url *u,
                       char *err)
{
    const char *q = strchr(rest, '?');
    const char *end = q ? q : rest + strlen(rest);
    if (end == rest || *rest != '/')
        return bad_url(err, setting, text, "expected unix:///path/to/redis.sock[?db=N]");
    u->is_unix = true;
    u->path = strndup(rest, (size_t)(end - rest));
    if (q) {
        if (strncmp(q, "?db=", 4) != 0 || !parse_db(q + 4, q + strlen(q), &u->db))
            return bad_url(err, setting, text, "expected ?db=N (0 to 99999) after the path");
    }
    return u->path != NULL || bad_url(err, setting, text, "out of memory");
}

bool dbt_parse_redis_url(const char *setting, const char *text, dbt_redis_url *out, char *err)
{
    dbt_redis_url u = {.port = 6379};
    bool ok = false;
    if (strncmp(text, "rediss://", 9) == 0) {
        snprintf(err, DBT_ERRLEN,
                 "%s: rediss:// (TLS) is not supported by this build (hiredis 0.14 has no TLS)",
                 setting);
        return false;
    }
    if (strncmp(text, "unix://", 7) == 0) {
        ok = parse_unix(setting, text, text + 7, &u, err);
    } else if (strncmp(text, "unix:", 5) == 0) {
        ok = parse_unix(setting, text, text + 5, &u, err);
    } else if (strncmp(text, "redis://", 8) != 0) {
        ok = bad_url(err, setting, text,
                     "expected redis://[user:password@]host[:port][/db] or unix:///path");
    } else {
        const char *p = text + 8;
        const char *at = strrchr(p, '@');
        if (at) {
            const char *colon = memchr(p, ':', (size_t)(at - p));
            if (!colon) {
                ok = bad_url(err, setting, text,
                             "a user needs a password (redis://user:password@host)");
                goto done;
            }
            if (colon > p && !(u.user = pct_decode(p, colon))) {
                ok = bad_url(err, setting, text, "bad %-escape in the user");
                goto done;
            }
            if (!(u.password = pct_decode(colon + 1, at))) {
                ok = bad_url(err, setting, text, "bad %-escape in the password");
                goto done;
            }
            if (!u.password[0]) {
                ok = bad_url(err, setting, text, "empty password");
                goto done;
            }
            p = at + 1;
        }
        const char *host_end;
        if (*p == '[') {
            host_end = strchr(p, ']');
            if (!host_end) {
                ok = bad_url(err, setting, text, "unclosed [ in the host");
                goto done;
            }
            u.host = strndup(p + 1, (size_t)(host_end - p - 1));
            host_end++;
        } else {
            host_end = p + strcspn(p, ":/");
            u.host = strndup(p, (size_t)(host_end - p));
        }
        if (!u.host || !u.host[0]) {
            ok = bad_url(err, setting, text, "no host");
            goto done;
        }
        p = host_end;
        if (*p == ':') {
            const char *pe = p + 1 + strcspn(p + 1, "/");
            long long port;
            if (!whole_number(p + 1, pe, 65535, &port) || port < 1) {
                ok = bad_url(err, setting, text, "bad port: expected 1 to 65535");
                goto done;
            }
            u.port = (int)port;
            p = pe;
        }
        if (*p == '/' && p[1]) {
            if (!parse_db(p + 1, p + strlen(p), &u.db)) {
                ok = bad_url(err, setting, text, "bad db number: expected 0 to 99999");
                goto done;
            }
        } else if (*p && strcmp(p, "/") != 0) {
            ok = bad_url(err, setting, text, "unexpected text after the host");
            goto done;
        }
        ok = true;
    }
done:
    if (!ok) {
        dbt_redis_url_free(&u);
        return false;
    }
    dbt_redis_url_free(out);
    *out = u;
    return true;
}

void dbt_exempt_free(dbt_exempt_rule *rules, int n)
{
    for (int i = 0; i < n; i++) {
        free(rules[i].pattern);
        rules[i].pattern = NULL;
    }
}

bool dbt_parse_exempt(const char *setting, const char *text, dbt_exempt_rule *rules, int *n,
                      char *err)
{
    static const char *const fields[] = {"application_name", "user", "database"};
    dbt_exempt_rule got[DBT_MAX_EXEMPT] = {{0}};
    int count = 0;
    const char *p = text;
    while (*p) {
        const char *end = p + strcspn(p, ",");
        const char *eq = memchr(p, '=', (size_t)(end - p));
        char rule[300];
        snprintf(rule, sizeof rule, "%.*s", (int)(end - p), p);
        int f = -1;
        if (eq) {
            for (int i = 0; i < 3; i++)
                if ((size_t)(eq - p) == strlen(fields[i]) &&
                    strncmp(p, fields[i], (size_t)(eq - p)) == 0)
                    f = i;
        }
        if (f < 0 || eq + 1 == end || count == DBT_MAX_EXEMPT) {
            dbt_exempt_free(got, count);
            return bad(err, setting, rule,
                       count == DBT_MAX_EXEMPT
                           ? "at most 16 rules"
                           : "expected application_name=GLOB, user=GLOB or database=GLOB");
        }
        got[count].field = (dbt_exempt_field)f;
        got[count].pattern = strndup(eq + 1, (size_t)(end - eq - 1));
        if (!got[count].pattern) {
            dbt_exempt_free(got, count);
            return bad(err, setting, text, "out of memory");
        }
        count++;
        p = *end ? end + 1 : end;
    }
    if (count == 0)
        return bad(err, setting, text, "expected at least one rule");
    dbt_exempt_free(rules, *n);
    memcpy(rules, got, sizeof got);
    *n = count;
    return true;
}
