/* config_values.c - parsers for setting values: durations, limits, booleans, Redis URLs.
 * Pure functions: no I/O, no global state; each error is one line naming the setting and value. */
#include "config.h"
#include "log.h"

#include <ctype.h>
#include <fnmatch.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* Values are shown cut at this many bytes, so a message stays short whatever it quotes. */
#define SHOWN_MAX 64

bool dbt_bad_value(const char *setting, const char *text, const char *expected, char *err)
{
    char shown[SHOWN_MAX * 4 + 16];
    dbt_escape(text, SHOWN_MAX, true, shown, sizeof shown);
    snprintf(err, DBT_ERRLEN, "%s: bad value %s: %s", setting, shown, expected);
    return false;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Narrows [*s, *end) to the text without surrounding blanks. */
static void trim_span(const char *text, const char **s, const char **end)
{
    const char *b = text, *e = text + strlen(text);
    while (is_blank(*b))
        b++;
    while (e > b && is_blank(e[-1]))
        e--;
    *s = b;
    *end = e;
}

static bool span_is(const char *s, const char *end, const char *word)
{
    size_t n = strlen(word);
    return (size_t)(end - s) == n && strncasecmp(s, word, n) == 0;
}

/* Parses a whole non-negative decimal number between s and end; false on anything else,
 * including a value above max (so overflow never happens). */
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

/* Milliseconds per unit, 0 for an unknown unit. Units are lower case only: "5M" could mean
 * months to someone, so it is better refused than guessed. */
static long long unit_ms(const char *u, const char *end)
{
    static const struct {
        const char *name;
        long long ms;
    } units[] = {{"ms", 1}, {"s", 1000}, {"m", 60 * 1000}, {"h", 3600 * 1000}};
    for (size_t i = 0; i < sizeof units / sizeof *units; i++) {
        size_t n = strlen(units[i].name);
        if ((size_t)(end - u) == n && strncmp(u, units[i].name, n) == 0)
            return units[i].ms;
    }
    return 0;
}

bool dbt_parse_duration(const char *setting, const char *text, bool allow_zero, bool allow_forever,
                        int64_t *out_ms, char *err)
{
    static const char expected[] = "expected a duration such as 500ms, 5s or 2m";
    const long long day_ms = 24LL * 3600 * 1000;
    const char *s, *end;
    trim_span(text, &s, &end);
    if (span_is(s, end, "infinite") || span_is(s, end, "forever") || span_is(s, end, "none")) {
        if (!allow_forever)
            return dbt_bad_value(setting, text, "must be a finite duration such as 5s", err);
        *out_ms = DBT_FOREVER;
        return true;
    }
    const char *unit = s;
    while (unit < end && *unit >= '0' && *unit <= '9')
        unit++;
    if (unit == s)
        return dbt_bad_value(setting, text, expected, err);
    long long n;
    /* Only digits so far: a failure here is a number too large for any unit. */
    if (!whole_number(s, unit, day_ms, &n))
        return dbt_bad_value(setting, text, "more than 24h", err);
    if (n == 0 && !allow_zero)
        return dbt_bad_value(setting, text, "must be more than 0", err);
    if (unit == end) {
        /* A bare 0 is the same in every unit; any other bare number is ambiguous. */
        if (n == 0) {
            *out_ms = 0;
            return true;
        }
        return dbt_bad_value(setting, text, "needs a unit: ms, s, m or h", err);
    }
    if (*unit == '.' || *unit == ',')
        return dbt_bad_value(setting, text, "whole numbers only: use a smaller unit (1500ms)", err);
    long long mult = unit_ms(unit, end);
    if (mult == 0)
        return dbt_bad_value(setting, text, "unknown unit: use ms, s, m or h", err);
    if (n > day_ms / mult)
        return dbt_bad_value(setting, text, "more than 24h", err);
    *out_ms = n * mult;
    return true;
}

bool dbt_parse_limit(const char *setting, const char *text, int *out, char *err)
{
    const char *s, *end;
    trim_span(text, &s, &end);
    long long v;
    _Static_assert(DBT_LIMIT_MAX == 100000, "the message below says it");
    if (!whole_number(s, end, DBT_LIMIT_MAX, &v) || v < 1)
        return dbt_bad_value(setting, text, "expected a whole number from 1 to 100000", err);
    *out = (int)v;
    return true;
}

bool dbt_parse_bool(const char *setting, const char *text, bool *out, char *err)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    const char *s, *end;
    trim_span(text, &s, &end);
    for (size_t i = 0; i < sizeof yes / sizeof *yes; i++) {
        if (span_is(s, end, yes[i])) {
            *out = true;
            return true;
        }
        if (span_is(s, end, no[i])) {
            *out = false;
            return true;
        }
    }
    return dbt_bad_value(setting, text, "expected on or off (true/false, yes/no, 1/0)", err);
}

void dbt_redis_url_free(dbt_redis_url *u)
{
    free(u->host);
    free(u->path);
    free(u->user);
    free(u->password);
    free(u->master_name);
    dbt_host_list_free(u->sentinels, &u->nsentinels);
    dbt_host_list_free(u->seeds, &u->nseeds);
    memset(u, 0, sizeof *u);
}

static bool has_prefix(const char *s, const char *prefix)
{
    return strncasecmp(s, prefix, strlen(prefix)) == 0; /* URL schemes are case-insensitive */
}

static int hex_digit(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    c = (char)tolower((unsigned char)c);
    return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Percent-decodes [s, end) into a new string in *out. Returns why it failed, or NULL. %00 is
 * refused: it would silently cut the password short. */
static const char *pct_decode(const char *s, const char *end, char **out)
{
    char *buf = malloc((size_t)(end - s) + 1), *o = buf;
    if (!buf)
        return "out of memory";
    for (const char *p = s; p < end; p++) {
        if (*p != '%') {
            *o++ = *p;
            continue;
        }
        int hi = end - p > 2 ? hex_digit(p[1]) : -1, lo = end - p > 2 ? hex_digit(p[2]) : -1;
        if (hi < 0 || lo < 0 || (hi == 0 && lo == 0)) {
            free(buf);
            return "bad %-escape in the user or password";
        }
        *o++ = (char)(hi * 16 + lo);
        p += 2;
    }
    *o = '\0';
    *out = buf;
    return NULL;
}

static bool host_char(char c, bool bracketed)
{
    if (isalnum((unsigned char)c) || c == '-' || c == '.' || c == '_')
        return true;
    return bracketed && (c == ':' || c == '%'); /* IPv6 and its zone (fe80::1%eth0) */
}

static const char *parse_db(const char *s, const char *end, int *db)
{
    long long v;
    if (!whole_number(s, end, 99999, &v))
        return "bad db number: expected 0 to 99999";
    *db = (int)v;
    return NULL;
}

/* unix:///path[?db=N] or unix:/path[?db=N]; rest starts at the path. */
static const char *parse_unix(const char *rest, dbt_redis_url *u)
{
    const char *q = strchr(rest, '?');
    const char *end = q ? q : rest + strlen(rest);
    if (end == rest || *rest != '/')
        return "expected unix:///path/to/redis.sock[?db=N]";
    u->is_unix = true;
    if (!(u->path = strndup(rest, (size_t)(end - rest))))
        return "out of memory";
    if (q && strncmp(q, "?db=", 4) != 0)
        return "expected ?db=N after the socket path";
    return q ? parse_db(q + 4, q + strlen(q), &u->db) : NULL;
}

/* Reads [[user]:password@] from the start of p into u (the last '@' ends it, so a password
 * holding an unescaped '@' or '/' still parses: dbt_redact_url splits the same way, so it is
 * masked in messages too; a '?' never reaches here, see query_of). *rest: what follows. */
static const char *parse_userinfo(const char *p, dbt_redis_url *u, const char **rest)
{
    const char *why;
    const char *at = strrchr(p, '@');
    *rest = p;
    if (!at)
        return NULL;
    const char *colon = memchr(p, ':', (size_t)(at - p));
    if (!colon)
        return "a user needs a password (redis://user:password@host or "
               "redis://:password@host)";
    if (colon > p && (why = pct_decode(p, colon, &u->user)))
        return why;
    if ((why = pct_decode(colon + 1, at, &u->password)))
        return why;
    if (!u->password[0])
        return "empty password";
    *rest = at + 1;
    return NULL;
}

/* host[:port] or [v6]host[:port] from *pp, up to `end` or the first of `stops` after it; *pp
 * moves past it. The port stays as it was when none is given. */
static const char *parse_host_port(const char **pp, const char *end, const char *stops,
                                   char **host_out, int *port)
{
    const char *p = *pp, *host = p, *host_end;
    bool bracketed = *p == '[';
    if (bracketed) {
        host++;
        host_end = memchr(host, ']', (size_t)(end - host));
        if (!host_end)
            return "unclosed [ in the host";
        p = host_end + 1;
    } else {
        host_end = host;
        while (host_end < end && *host_end != ':' && !strchr(stops, *host_end))
            host_end++;
        p = host_end;
    }
    if (host_end == host)
        return "no host";
    for (const char *h = host; h < host_end; h++)
        if (!host_char(*h, bracketed))
            return "bad character in the host";
    if (p < end && *p == ':') {
        const char *port_end = p + 1;
        while (port_end < end && !strchr(stops, *port_end))
            port_end++;
        long long v;
        if (!whole_number(p + 1, port_end, 65535, &v) || v < 1)
            return "bad port: expected 1 to 65535";
        *port = (int)v;
        p = port_end;
    }
    if (!(*host_out = strndup(host, (size_t)(host_end - host))))
        return "out of memory";
    *pp = p;
    return NULL;
}

/* [[user]:password@]host[:port][/db]; p starts after "redis://" or "rediss://". */
static const char *parse_tcp(const char *p, dbt_redis_url *u)
{
    const char *why = parse_userinfo(p, u, &p);
    const char *end = p + strlen(p);
    if (why || (why = parse_host_port(&p, end, "/", &u->host, &u->port)))
        return why;
    if (*p == '/')
        return p[1] ? parse_db(p + 1, end, &u->db) : NULL;
    return *p ? "unexpected text after the host" : NULL;
}

void dbt_host_list_free(dbt_host_port *hosts, int *n)
{
    for (int i = 0; i < *n; i++) {
        free(hosts[i].host);
        hosts[i].host = NULL;
    }
    *n = 0;
}

const char *dbt_parse_host_list(const char *text, const char *end, int default_port,
                                dbt_host_port *hosts, int *n)
{
    dbt_host_port got[DBT_MAX_HOSTS];
    int count = 0;
    const char *p = text, *why = NULL;
    for (;;) {
        if (count == DBT_MAX_HOSTS) {
            why = "more than 16 hosts";
            break;
        }
        got[count].port = default_port;
        if ((why = parse_host_port(&p, end, ",", &got[count].host, &got[count].port)))
            break;
        count++;
        if (p == end)
            break;
        if (*p != ',') {
            why = "unexpected text after a host";
            break;
        }
        p++;
    }
    if (why) {
        dbt_host_list_free(got, &count);
        return why;
    }
    memcpy(hosts, got, (size_t)count * sizeof *got);
    *n = count;
    return NULL;
}

/* A Sentinel's name for a master: what `sentinel monitor NAME` takes in practice. */
static bool master_name_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

/* [[user]:password@]host1[:port1],host2[:port2],.../MASTERNAME[/db]; p starts after
 * "redis-sentinel://". */
static const char *parse_sentinel(const char *p, dbt_redis_url *u)
{
    const char *why = parse_userinfo(p, u, &p);
    if (why)
        return why;
    const char *slash = strchr(p, '/');
    if (!slash)
        return "no master name: expected redis-sentinel://host1[:port1],host2[:port2],.../"
               "MASTERNAME[/db]";
    if ((why = dbt_parse_host_list(p, slash, 26379, u->sentinels, &u->nsentinels)))
        return why;
    const char *name = slash + 1, *name_end = name + strcspn(name, "/");
    if (name_end == name)
        return "no master name after the sentinels";
    for (const char *c = name; c < name_end; c++)
        if (!master_name_char(*c))
            return "bad character in the master name";
    if (!(u->master_name = strndup(name, (size_t)(name_end - name))))
        return "out of memory";
    if (*name_end == '/' && name_end[1])
        return parse_db(name_end + 1, name_end + strlen(name_end), &u->db);
    return NULL;
}

/* [user:password@]host1[:port1],host2[:port2],...[/0]; p starts after "redis-cluster://" or
 * "rediss-cluster://". A cluster has database 0 only. The first seed is also the URL's host. */
static const char *parse_cluster(const char *p, dbt_redis_url *u)
{
    const char *why = parse_userinfo(p, u, &p);
    if (why)
        return why;
    const char *slash = p + strcspn(p, "/");
    if ((why = dbt_parse_host_list(p, slash, 6379, u->seeds, &u->nseeds)))
        return why;
    if (*slash == '/' && slash[1]) {
        if ((why = parse_db(slash + 1, slash + strlen(slash), &u->db)))
            return why;
        if (u->db != 0)
            return "a Redis Cluster has database 0 only: remove the /N";
    }
    u->cluster = true;
    u->port = u->seeds[0].port;
    return (u->host = strdup(u->seeds[0].host)) ? NULL : "out of memory";
}

/* The message for a URL that did not parse, echoed as dbt_redact_url copies it: the password
 * the parser would read masked, and also what a malformed URL may hold as one without meaning
 * to (no '@': "redis://:pw"; no scheme: masked whole). */
static bool bad_url(const char *setting, const char *text, const char *why, char *err)
{
    size_t cap = strlen(text) + DBT_REDACT_ROOM;
    char *shown = malloc(cap);
    if (!shown) {
        snprintf(err, DBT_ERRLEN, "%s: bad value (not shown): %s", setting, why);
        return false;
    }
    dbt_redact_url(text, shown, cap);
    dbt_bad_value(setting, shown, why, err);
    free(shown);
    return false;
}

/* Where a query string starts ("?password=..."), or NULL: the first '?' anywhere. Where the
 * userinfo ends cannot be told from where a query starts ("redis://h:1/0?password=a@b" reads as
 * the user "h" with the password "1/0?password=a" at the host "b"), so no '?' is taken for part
 * of a password: one is written %3F. The one exception is a unix socket's documented "?db=N",
 * digits to the end. */
static const char *query_of(const char *text)
{
    const char *q = strchr(text, '?');
    if (q && has_prefix(text, "unix:") && strncmp(q, "?db=", 4) == 0 && q[4] &&
        strspn(q + 4, "0123456789") == strlen(q + 4))
        return NULL;
    return q;
}

/* A URL with a query string is refused without echoing any of it past the scheme: the query is
 * where other clients take a password from (?password=), and since it may also hold an '@', no
 * part of the rest can be trusted not to be a piece of a secret. */
static bool query_refused(const char *setting, const char *text, const char *q, char *err)
{
    const char *sep = strstr(text, "://");
    size_t scheme =
        sep && sep < q && strspn(text, "abcdefghijklmnopqrstuvwxyz") == (size_t)(sep - text)
            ? (size_t)(sep - text) + 3
            : 0;
    snprintf(err, DBT_ERRLEN,
             "%s: a query string is not supported (\"%.*s...?...\", the rest not shown: it may "
             "hold a secret): give the password as redis://[user]:password@host[:port][/db], "
             "a '?' in it written %%3F",
             setting, (int)scheme, text);
    return false;
}

bool dbt_parse_redis_url(const char *setting, const char *text, dbt_redis_url *out, char *err)
{
    const char *q = query_of(text);
    if (q)
        return query_refused(setting, text, q, err);
    dbt_redis_url u = {.port = 6379};
    const char *why;
    if (has_prefix(text, "unix://"))
        why = parse_unix(text + 7, &u);
    else if (has_prefix(text, "unix:"))
        why = parse_unix(text + 5, &u);
    else if (has_prefix(text, "redis://"))
        why = parse_tcp(text + 8, &u);
    else if ((u.tls = has_prefix(text, "rediss://")))
        why = parse_tcp(text + 9, &u);
    else if (has_prefix(text, "redis-sentinel://"))
        why = parse_sentinel(text + 17, &u);
    else if ((u.tls = has_prefix(text, "rediss-sentinel://")))
        why = parse_sentinel(text + 18, &u);
    else if (has_prefix(text, "redis-cluster://"))
        why = parse_cluster(text + 16, &u);
    else if ((u.tls = has_prefix(text, "rediss-cluster://")))
        why = parse_cluster(text + 17, &u);
    else
        why = "expected redis://[[user]:password@]host[:port][/db], rediss://... (TLS), "
              "unix:///path, redis-sentinel://host1[:port1],.../MASTERNAME[/db] or "
              "redis-cluster://host1[:port1],host2[:port2],...";
    if (why) {
        dbt_redis_url_free(&u);
        return bad_url(setting, text, why, err);
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

const char *dbt_exempt_match(const dbt_exempt_rule *rules, int n, const char *const values[3])
{
    for (int i = 0; i < n; i++) {
        const char *v = values[rules[i].field];
        if (v && fnmatch(rules[i].pattern, v, 0) == 0)
            return rules[i].pattern;
    }
    return NULL;
}

bool dbt_parse_exempt(const char *setting, const char *text, dbt_exempt_rule *rules, int *n,
                      char *err)
{
    if (strcmp(text, "none") == 0) {
        dbt_exempt_free(rules, *n);
        *n = 0;
        return true;
    }
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
            return dbt_bad_value(setting, rule,
                                 count == DBT_MAX_EXEMPT
                                     ? "at most 16 rules"
                                     : "expected application_name=GLOB, user=GLOB or database=GLOB",
                                 err);
        }
        got[count].field = (dbt_exempt_field)f;
        got[count].pattern = strndup(eq + 1, (size_t)(end - eq - 1));
        if (!got[count].pattern) {
            dbt_exempt_free(got, count);
            return dbt_bad_value(setting, text, "out of memory", err);
        }
        count++;
        p = *end ? end + 1 : end;
    }
    if (count == 0)
        return dbt_bad_value(setting, text, "expected at least one rule", err);
    dbt_exempt_free(rules, *n);
    memcpy(rules, got, sizeof got);
    *n = count;
    return true;
}
