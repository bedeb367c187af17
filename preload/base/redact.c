/* redact.c - copies of URLs and conninfo strings with every password replaced by "***".
 *
 * The rule throughout: when in doubt, mask more. A copy that hides a little too much only makes a
 * log line less useful; one that shows a password cannot be taken back. */
#include "log.h"

#include <ctype.h>
#include <string.h>
#include <strings.h>

/* A bounded output buffer: writes past cap are dropped, so a long input is truncated. */
typedef struct {
    char *buf;
    size_t cap, len;
} writer;

static void put(writer *w, const char *s, size_t n)
{
    while (n-- && w->len + 1 < w->cap)
        w->buf[w->len++] = *s++;
    w->buf[w->len] = '\0';
}

static void put_span(writer *w, const char *s, const char *end)
{
    put(w, s, (size_t)(end - s));
}

static const char *find_last(const char *s, const char *end, char c)
{
    const char *found = NULL;
    for (const char *p = s; p < end; p++)
        if (*p == c)
            found = p;
    return found;
}

/* Copies scheme://userinfo@... with the password after the first ':' of the userinfo masked.
 * The userinfo is what lies before the last '@' in [auth, auth_end). When the userinfo has no
 * ':' it is masked whole if mask_lone_user (some Redis clients read redis://secret@host as a
 * password). Returns where the caller should carry on copying. */
static const char *put_userinfo(writer *w, const char *url, const char *auth, const char *auth_end,
                                bool mask_lone_user)
{
    const char *at = find_last(auth, auth_end, '@');
    if (!at)
        return url;
    const char *colon = memchr(auth, ':', (size_t)(at - auth));
    if (colon) {
        put_span(w, url, colon + 1);
    } else if (mask_lone_user) {
        put_span(w, url, auth);
    } else {
        return url;
    }
    put(w, "***", 3);
    return at;
}

static bool writer_init(writer *w, char *out, size_t cap)
{
    *w = (writer){.buf = out, .cap = cap, .len = 0};
    if (cap)
        out[0] = '\0';
    return cap > 0;
}

/* Whether [s, end) looks like a port, one the parser takes or not: digits, their value at most
 * 99999 (leading zeros are allowed; "0" and "65536" are shown in the message that refuses
 * them). Whatever else follows a host's ':' may be a password. */
static bool is_port(const char *s, const char *end)
{
    long v = 0;
    for (const char *p = s; p < end; p++) {
        if (*p < '0' || *p > '9')
            return false;
        v = v * 10 + (*p - '0');
        if (v > 99999)
            return false;
    }
    return s < end;
}

/* What may stand between [ and ]: an IPv6 address and its zone, as the parser allows. */
static bool is_bracketed_host(const char *s, const char *end)
{
    for (const char *p = s; p < end; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-._:%", *p))
            return false;
    return true;
}

static bool has_prefix_ci(const char *s, const char *end, const char *prefix)
{
    size_t n = strlen(prefix);
    return (size_t)(end - s) >= n && strncasecmp(s, prefix, n) == 0;
}

/* The rest after the userinfo: host[:port][,host[:port]...] then [/path] then [?query]. Without
 * an '@' a password may still be here: "redis://:pw" (an "@host" forgotten) reads as an empty
 * host and the port "pw", "redis://user:pw" as the host "user" and the port "pw". So whatever
 * follows a ':' that is not a port the parser would take, or a ':' after an empty host, is
 * masked to the end (the password may hold '/' or ','), as is a bracketed host that does not
 * look like an address, and any query string except unix's "?db=N" (other clients take a
 * ?password= there). A valid URL comes out as it went in. */
static void put_hosts(writer *w, const char *p, const char *end, bool is_unix)
{
    for (;;) {
        const char *seg = p;
        if (p < end && *p == '[') {
            const char *close = memchr(p, ']', (size_t)(end - p));
            if (!close || !is_bracketed_host(p + 1, close)) {
                put(w, "***", 3);
                return;
            }
            p = close + 1;
        } else {
            while (p < end && !strchr(":,/?", *p))
                p++;
        }
        if (p < end && *p == ':') {
            const char *port = p + 1, *port_end = port;
            while (port_end < end && !strchr(",/?", *port_end))
                port_end++;
            if (p == seg || !is_port(port, port_end)) {
                put_span(w, seg, port);
                put(w, "***", 3);
                return;
            }
            p = port_end;
        }
        put_span(w, seg, p);
        if (p == end || *p != ',')
            break;
        put(w, p++, 1);
    }
    const char *q = memchr(p, '?', (size_t)(end - p));
    put_span(w, p, q ? q : end);
    if (!q)
        return;
    if (is_unix && has_prefix_ci(q, end, "?db=") && q + 4 < end &&
        strspn(q + 4, "0123456789") == (size_t)(end - q - 4))
        put_span(w, q, end);
    else
        put(w, "?***", 4);
}

/* A scheme as RFC 3986 spells it: a letter, then letters, digits, '+', '-' or '.'. */
static bool is_scheme(const char *s, const char *end)
{
    if (s == end || !isalpha((unsigned char)*s))
        return false;
    for (const char *p = s; p < end; p++)
        if (!isalnum((unsigned char)*p) && !strchr("+-.", *p))
            return false;
    return true;
}

void dbt_redact_url(const char *url, char *out, size_t cap)
{
    writer w;
    if (!writer_init(&w, out, cap))
        return;
    const char *sep = strstr(url, "://");
    const char *end = url + strlen(url);
    if (!sep || !is_scheme(url, sep)) {
        /* "unix:/path" is the one spelling the parser takes without "://". Anything else is not a
         * URL at all, and nothing tells where in it a password might be ("redis:/:pw@h", a
         * password pasted alone): masked whole. */
        if (has_prefix_ci(url, end, "unix:/")) {
            put(&w, url, 5);
            put_hosts(&w, url + 5, end, true);
        } else if (*url) {
            put(&w, "***", 3);
        }
        return;
    }
    /* The whole rest counts as the authority: dbt_parse_redis_url also takes the last '@' as
     * the end of the userinfo (a password may hold '/' or '@'), so whatever it would read as the
     * password is masked here. */
    const char *from = put_userinfo(&w, url, sep + 3, end, true);
    if (from == url) {
        put_span(&w, url, sep + 3);
        from = sep + 3;
    } else {
        put(&w, "@", 1);
        from++;
    }
    put_hosts(&w, from, end, sep - url == 4 && strncasecmp(url, "unix", 4) == 0);
}

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Whether [s, end), percent-decoded, is "password" in any case (libpq decodes URI keywords). */
static bool is_password_key(const char *s, const char *end)
{
    static const char word[] = "password";
    size_t i = 0;
    for (const char *p = s; p < end; p++, i++) {
        char c = *p;
        if (c == '%' && end - p > 2 && hex_value(p[1]) >= 0 && hex_value(p[2]) >= 0) {
            c = (char)(hex_value(p[1]) * 16 + hex_value(p[2]));
            p += 2;
        }
        if (i >= sizeof word - 1 || tolower((unsigned char)c) != word[i])
            return false;
    }
    return i == sizeof word - 1;
}

/* A dbname may hold a whole connection string, which may hold a dbname...: past this depth the
 * value is masked whole rather than followed (bounded stack whatever the input). */
#define MAX_DEPTH 4

static void put_conninfo(writer *w, const char *s, const char *end, int depth);

/* postgresql://[userinfo@]host[:port][/dbname][?param=value&...]. libpq reads the userinfo up
 * to the first '@' met before any '/' (so a password may hold '?'); a password holding an
 * unescaped '/' would then show. So the userinfo is taken to end at the later of the last '@'
 * before the first '/' and the last '@' before the first '?': at least what libpq would read. */
static void put_uri(writer *w, const char *s, const char *end, int depth)
{
    const char *auth = strstr(s, "://") + 3;
    const char *slash = memchr(auth, '/', (size_t)(end - auth));
    const char *first_q = memchr(auth, '?', (size_t)(end - auth));
    const char *a1 = find_last(auth, slash ? slash : end, '@');
    const char *a2 = find_last(auth, first_q ? first_q : end, '@');
    const char *at = !a1 ? a2 : !a2 || a1 > a2 ? a1 : a2;
    const char *p = at ? put_userinfo(w, s, auth, at + 1, false) : s;
    const char *query = memchr(at ? at : auth, '?', (size_t)(end - (at ? at : auth)));
    if (!query) {
        put_span(w, p, end);
        return;
    }
    put_span(w, p, query + 1);
    for (p = query + 1; p < end;) {
        const char *seg_end = memchr(p, '&', (size_t)(end - p));
        if (!seg_end)
            seg_end = end;
        const char *eq = memchr(p, '=', (size_t)(seg_end - p));
        if (eq && is_password_key(p, eq)) {
            put_span(w, p, eq + 1);
            put(w, "***", 3);
        } else if (eq && eq - p == 6 && strncasecmp(p, "dbname", 6) == 0) {
            put_span(w, p, eq + 1); /* dbname may itself be a connection string */
            if (memchr(eq + 1, '%', (size_t)(seg_end - eq - 1)))
                put(w, "***", 3); /* libpq decodes it first: too clever to follow, masked */
            else
                put_conninfo(w, eq + 1, seg_end, depth + 1);
        } else {
            put_span(w, p, seg_end);
        }
        p = seg_end;
        if (p < end)
            put(w, p++, 1);
    }
}

static bool is_space(char c)
{
    return isspace((unsigned char)c) != 0;
}

/* Ends a keyword value the way libpq reads it: 'quoted' with backslash escapes, or bare up to
 * a blank with backslash escapes too ("se\ cret" is one value). */
static const char *value_end(const char *p, const char *end)
{
    if (p < end && *p == '\'') {
        for (p++; p < end && *p != '\''; p++)
            if (*p == '\\' && p + 1 < end)
                p++;
        return p < end ? p + 1 : end;
    }
    for (; p < end && !is_space(*p); p++)
        if (*p == '\\' && p + 1 < end)
            p++;
    return p;
}

/* keyword = value pairs separated by blanks. */
static void put_keywords(writer *w, const char *s, const char *end, int depth)
{
    const char *p = s;
    while (p < end) {
        const char *start = p;
        while (p < end && is_space(*p))
            p++;
        const char *kw = p;
        while (p < end && *p != '=' && !is_space(*p))
            p++;
        const char *kw_end = p;
        while (p < end && is_space(*p))
            p++;
        if (p == end || *p != '=') {
            /* Not a pair: copy the word alone and keep looking, so a stray word never lets a
             * later password through. */
            put_span(w, start, kw_end);
            p = kw_end;
            continue;
        }
        p++;
        while (p < end && is_space(*p))
            p++;
        const char *val = p;
        p = value_end(p, end);
        put_span(w, start, val);
        if (is_password_key(kw, kw_end)) {
            put(w, "***", 3);
        } else if (kw_end - kw == 6 && strncasecmp(kw, "dbname", 6) == 0) {
            /* libpq expands a dbname holding '=' or a URI into a whole connection string. */
            bool quoted = val < p && *val == '\'';
            const char *in = quoted ? val + 1 : val;
            const char *in_end = quoted && p > in && p[-1] == '\'' ? p - 1 : p;
            if (quoted)
                put(w, "'", 1);
            if (memchr(in, '\\', (size_t)(in_end - in)))
                put(w, "***", 3); /* libpq unescapes it before reading it: masked whole */
            else
                put_conninfo(w, in, in_end, depth + 1);
            if (in_end < p)
                put(w, "'", 1);
        } else {
            put_span(w, val, p);
        }
    }
}

static bool is_uri(const char *s, const char *end)
{
    size_t n = (size_t)(end - s);
    return (n >= 13 && strncasecmp(s, "postgresql://", 13) == 0) ||
           (n >= 11 && strncasecmp(s, "postgres://", 11) == 0);
}

static void put_conninfo(writer *w, const char *s, const char *end, int depth)
{
    if (depth > MAX_DEPTH) {
        put(w, "***", 3);
        return;
    }
    const char *p = s;
    while (p < end && is_space(*p))
        p++;
    if (is_uri(p, end)) {
        put_span(w, s, p);
        put_uri(w, p, end, depth);
    } else {
        put_keywords(w, s, end, depth);
    }
}

void dbt_redact_conninfo(const char *conninfo, char *out, size_t cap)
{
    writer w;
    if (!writer_init(&w, out, cap))
        return;
    put_conninfo(&w, conninfo, conninfo + strlen(conninfo), 0);
}
