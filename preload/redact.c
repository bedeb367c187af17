/* redact.c - copies of URLs and conninfo strings with every password replaced by "***". */
#include "log.h"

#include <ctype.h>
#include <stdbool.h>
#include <string.h>
#include <strings.h>

/* Appends n bytes to out (cap bytes, always NUL-terminated). */
static void put(char *out, size_t cap, size_t *o, const char *s, size_t n)
{
    while (n-- && *o + 1 < cap)
        out[(*o)++] = *s++;
    out[*o < cap ? *o : cap - 1] = '\0';
}

/* scheme://user:password@host... -> scheme://user:***@host... (any scheme). */
/* whole_rest: the userinfo may run to the last '@' of the whole text, as our Redis URL parser
 * reads it (a password may contain '/'); otherwise it ends before the first '/', '?' or '#', as
 * libpq reads a postgresql:// URI. Either way the masked span is the one the parser would use. */
static size_t redact_userinfo(const char *url, bool whole_rest, char *out, size_t cap, size_t *o)
{
    const char *scheme = strstr(url, "://");
    if (!scheme)
        return 0;
    const char *auth = scheme + 3;
    const char *end = whole_rest ? auth + strlen(auth) : auth + strcspn(auth, "/?#");
    const char *at = NULL;
    for (const char *p = auth; p < end; p++) /* the last @ ends the userinfo */
        if (*p == '@')
            at = p;
    if (!at)
        return 0;
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (!colon)
        return 0;
    put(out, cap, o, url, (size_t)(colon + 1 - url));
    put(out, cap, o, "***", 3);
    return (size_t)(at - url);
}

void dbt_redact_url(const char *url, char *out, size_t cap)
{
    if (cap == 0)
        return;
    size_t o = 0;
    out[0] = '\0';
    size_t from = redact_userinfo(url, true, out, cap, &o);
    put(out, cap, &o, url + from, strlen(url + from));
}

/* Redacts password=VALUE in a URI's query string. */
static void redact_query(const char *s, char *out, size_t cap, size_t *o)
{
    while (*s) {
        size_t seg = strcspn(s, "&");
        const char *eq = memchr(s, '=', seg);
        if (eq && (size_t)(eq - s) == 8 && strncasecmp(s, "password", 8) == 0) {
            put(out, cap, o, s, 9);
            put(out, cap, o, "***", 3);
        } else {
            put(out, cap, o, s, seg);
        }
        s += seg;
        if (*s == '&')
            put(out, cap, o, s++, 1);
    }
}

void dbt_redact_conninfo(const char *ci, char *out, size_t cap)
{
    if (cap == 0)
        return;
    size_t o = 0;
    out[0] = '\0';
    if (strncmp(ci, "postgresql://", 13) == 0 || strncmp(ci, "postgres://", 11) == 0) {
        size_t from = redact_userinfo(ci, false, out, cap, &o);
        const char *rest = ci + from;
        const char *q = strchr(rest, '?');
        if (!q) {
            put(out, cap, &o, rest, strlen(rest));
            return;
        }
        put(out, cap, &o, rest, (size_t)(q + 1 - rest));
        redact_query(q + 1, out, cap, &o);
        return;
    }
    /* keyword = value pairs; values may be 'quoted' with \' and \\ escapes. */
    const char *p = ci;
    while (*p) {
        const char *start = p;
        while (*p && isspace((unsigned char)*p))
            p++;
        const char *kw = p;
        while (*p && *p != '=' && !isspace((unsigned char)*p))
            p++;
        size_t kwlen = (size_t)(p - kw);
        while (*p && isspace((unsigned char)*p))
            p++;
        if (*p != '=') { /* not key=value: copy the rest as it is */
            put(out, cap, &o, start, strlen(start));
            return;
        }
        p++;
        while (*p && isspace((unsigned char)*p))
            p++;
        const char *val = p;
        if (*p == '\'') {
            for (p++; *p && *p != '\''; p++)
                if (*p == '\\' && p[1])
                    p++;
            if (*p == '\'')
                p++;
        } else {
            while (*p && !isspace((unsigned char)*p))
                p++;
        }
        bool secret = kwlen == 8 && strncasecmp(kw, "password", 8) == 0;
        put(out, cap, &o, start, (size_t)(val - start));
        if (secret)
            put(out, cap, &o, "***", 3);
        else
            put(out, cap, &o, val, (size_t)(p - val));
    }
}
