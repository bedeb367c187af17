/* fuzz_redact.c - libFuzzer target for the setting value parsers (preload/base/config_values.c) and
 * the redaction of URLs and conninfo strings (preload/base/redact.c, declared in log.h).
 *
 * The low 4 bits of the first input byte pick what is fuzzed, the high 4 bits are flags; the
 * rest of the input is the text. Besides memory and UB errors, it checks what config.h, log.h and
 * docs/configuration.md promise:
 *   - every parser: on failure *out is left untouched and err is one NUL-terminated line (within
 *     DBT_ERRLEN) naming the setting; on success the value is in its documented range, and for
 *     durations, limits and booleans equals what a small independent reading of the grammar gives;
 *   - dbt_parse_redis_url: an earlier result is replaced (ASan sees a leak or double free
 *     otherwise); a TCP URL redacted with dbt_redact_url parses again to the same host, port, db
 *     and user with the password "***"; "a password never appears in a message": a secret planted
 *     just before the URL's last '@' (where the parser reads the password, or a lone user that
 *     some clients read as one) never shows in err nor in the redacted URL; a URL with a query
 *     string holding an '@' then a secret ("?password=x@SECRET", where the userinfo seemed to
 *     end) is refused, the secret not in err; with no '@' at all, a secret planted after the
 *     first host's ':' (or after an added ':' at the hosts' end), where a forgotten "@host"
 *     leaves a password, never shows in err nor in the redacted URL;
 *   - dbt_parse_exempt: the rules, joined back with ',', give the text again;
 *   - dbt_redact_url / dbt_redact_conninfo: a small buffer gets a prefix of the whole copy (so
 *     truncation cannot uncover a password), the buffer sizes config.c uses are large enough, and
 *     no password libpq's own parser reads in the conninfo (PQconninfoParse, also inside a
 *     keyword dbname that holds a connection string) is read again from the redacted copy;
 *   - dbt_escape: the copy fits cap, holds no control byte, and (quoted, uncut) decodes back.
 */
#include "config.h"
#include "log.h"

#include <libpq-fe.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            __builtin_trap();                                                                      \
    } while (0)

/* Only alphanumerics: inserting it never changes how a URL splits. */
#define SECRET "Zq7SECRETq7Z"

static const char *const setting = "DBTHROTTLE_SETTING";

static char *new_err(void)
{
    char *err = malloc(DBT_ERRLEN); /* exact size: ASan sees a write past it */
    CHECK(err);
    memset(err, 0x55, DBT_ERRLEN);
    return err;
}

static void check_err(const char *err)
{
    CHECK(memchr(err, '\0', DBT_ERRLEN) != NULL);
    CHECK(strchr(err, '\n') == NULL && strchr(err, '\r') == NULL);
    CHECK(strstr(err, setting) != NULL);
}

static size_t count_of(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p++)
        n++;
    return n;
}

/* ---- durations, limits, booleans, checked against a plain reading of the grammar ---- */

static void trim(const char *text, const char **s, const char **e)
{
    *s = text;
    *e = text + strlen(text);
    while (**s == ' ' || **s == '\t')
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t'))
        (*e)--;
}

static bool word_is(const char *s, const char *e, const char *w)
{
    return (size_t)(e - s) == strlen(w) && strncasecmp(s, w, strlen(w)) == 0;
}

/* Digits in [s, e) as a number, saturated above 10^12; -1 when not all digits or empty. */
static long long digits(const char *s, const char *e)
{
    if (s == e)
        return -1;
    long long v = 0;
    for (; s < e; s++) {
        if (*s < '0' || *s > '9')
            return -1;
        v = v > 1000000000000LL ? v : v * 10 + (*s - '0');
    }
    return v;
}

static void fuzz_duration(unsigned flags, const char *text)
{
    bool allow_zero = flags & 1, allow_forever = flags & 2;
    char *err = new_err();
    int64_t ms = 12345;
    bool ok = dbt_parse_duration(setting, text, allow_zero, allow_forever, &ms, err);

    const char *s, *e;
    trim(text, &s, &e);
    bool want;
    int64_t want_ms = 0;
    if (word_is(s, e, "infinite") || word_is(s, e, "forever") || word_is(s, e, "none")) {
        want = allow_forever;
        want_ms = DBT_FOREVER;
    } else {
        const char *u = s;
        while (u < e && *u >= '0' && *u <= '9')
            u++;
        long long n = digits(s, u), mult = 0;
        static const char *const units[] = {"ms", "s", "m", "h"};
        static const long long mults[] = {1, 1000, 60000, 3600000};
        for (int i = 0; i < 4; i++)
            if ((size_t)(e - u) == strlen(units[i]) && strncmp(u, units[i], strlen(units[i])) == 0)
                mult = mults[i];
        if (u == e) /* a bare number: only 0 has no unit */
            want = n == 0 && allow_zero;
        else
            want = n >= 0 && mult > 0 && n <= 86400000 / mult && (n > 0 || allow_zero);
        want_ms = want && u != e ? n * mult : 0;
    }
    CHECK(ok == want);
    if (ok)
        CHECK(ms == want_ms);
    else
        CHECK(ms == 12345);
    if (!ok)
        check_err(err);
    free(err);
}

static void fuzz_limit(const char *text)
{
    char *err = new_err();
    int v = -7;
    bool ok = dbt_parse_limit(setting, text, &v, err);
    const char *s, *e;
    trim(text, &s, &e);
    long long n = digits(s, e);
    CHECK(ok == (n >= 1 && n <= 100000));
    CHECK(ok ? v == n : v == -7);
    if (!ok)
        check_err(err);
    free(err);
}

static void fuzz_bool(const char *text)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};
    char *err = new_err();
    bool v = true, v2 = false;
    bool ok = dbt_parse_bool(setting, text, &v, err);
    bool ok2 = dbt_parse_bool(setting, text, &v2, err);
    const char *s, *e;
    trim(text, &s, &e);
    int want = -1;
    for (int i = 0; i < 4; i++) {
        if (word_is(s, e, yes[i]))
            want = 1;
        if (word_is(s, e, no[i]))
            want = 0;
    }
    CHECK(ok == (want >= 0) && ok2 == ok);
    if (ok)
        CHECK(v == (want == 1) && v2 == v);
    else
        CHECK(v == true && v2 == false);
    if (!ok)
        check_err(err);
    free(err);
}

/* ---- Redis URLs ---- */

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

/* The copy config.c keeps for logs: its buffer is strlen + DBT_REDACT_ROOM, said to always be
 * enough. */
static char *redact_as_config(const char *url)
{
    size_t cap = strlen(url) + DBT_REDACT_ROOM, big = 2 * strlen(url) + 16;
    char *out = malloc(cap), *full = malloc(big);
    CHECK(out && full);
    dbt_redact_url(url, out, cap);
    dbt_redact_url(url, full, big);
    CHECK(strlen(full) + 1 < big);
    CHECK(strcmp(out, full) == 0); /* not cut */
    free(full);
    return out;
}

static void check_url(const dbt_redis_url *u)
{
    if (u->is_unix) {
        CHECK(u->path && u->path[0] == '/' && !u->host && !u->user && !u->password);
    } else if (u->nsentinels > 0) {
        CHECK(!u->host && !u->path && u->master_name && u->master_name[0]);
        CHECK(u->nsentinels <= DBT_MAX_HOSTS);
        for (int i = 0; i < u->nsentinels; i++)
            CHECK(u->sentinels[i].host && u->sentinels[i].host[0] && u->sentinels[i].port >= 1 &&
                  u->sentinels[i].port <= 65535);
        CHECK(!u->user || u->password);
    } else {
        CHECK(u->host && u->host[0] && !u->path);
        CHECK(u->port >= 1 && u->port <= 65535);
        CHECK(!u->user || u->password);
    }
    CHECK(u->db >= 0 && u->db <= 99999);
    CHECK(!u->password || u->password[0]);
}

/* An earlier result, to see that a failure leaves it and a success frees it. */
static void earlier_url(dbt_redis_url *u)
{
    char err[DBT_ERRLEN];
    memset(u, 0, sizeof *u);
    CHECK(dbt_parse_redis_url(setting, "redis://keep:kpw@keephost:1234/7", u, err));
}

static bool is_earlier_url(const dbt_redis_url *u)
{
    return !u->is_unix && same_str(u->host, "keephost") && u->port == 1234 && u->db == 7 &&
           same_str(u->user, "keep") && same_str(u->password, "kpw") && !u->path;
}

static void fuzz_redis_url(const char *text)
{
    char *err = new_err();
    dbt_redis_url u;
    earlier_url(&u);
    bool ok = dbt_parse_redis_url(setting, text, &u, err);
    char *red = redact_as_config(text);
    if (!ok) {
        CHECK(is_earlier_url(&u));
        check_err(err);
    } else {
        check_url(&u);
        if (!u.is_unix) {
            /* The redacted copy is the same URL with "***" for the password. */
            dbt_redis_url r = {0};
            CHECK(dbt_parse_redis_url(setting, red, &r, err));
            CHECK(!r.is_unix && same_str(r.host, u.host) && r.port == u.port && r.db == u.db);
            CHECK(r.nsentinels == u.nsentinels && same_str(r.master_name, u.master_name));
            for (int i = 0; i < u.nsentinels; i++)
                CHECK(same_str(r.sentinels[i].host, u.sentinels[i].host) &&
                      r.sentinels[i].port == u.sentinels[i].port);
            CHECK(same_str(r.user, u.user));
            CHECK(u.password ? same_str(r.password, "***") : !r.password && !strcmp(red, text));
            dbt_redis_url_free(&r);
        }
    }
    free(red);
    dbt_redis_url_free(&u);
    free(err);
}

/* SECRET goes right before the last '@' (or, with none, "SECRET@" is appended): whatever the
 * rest, that is inside what the parser would take as the password, or a lone user. */
static void fuzz_redis_url_secret(const char *text)
{
    size_t n = strlen(text), ls = strlen(SECRET);
    const char *at = strrchr(text, '@');
    size_t cut = at ? (size_t)(at - text) : n;
    char *url = malloc(n + ls + 2);
    CHECK(url);
    memcpy(url, text, cut);
    memcpy(url + cut, SECRET, ls);
    strcpy(url + cut + ls, at ? at : "@");
    if (count_of(url, SECRET) != 1) { /* the fuzzer wrote it elsewhere too: not ours to judge */
        free(url);
        return;
    }
    char *err = new_err();
    dbt_redis_url u = {0};
    if (dbt_parse_redis_url(setting, url, &u, err)) {
        check_url(&u);
        if (!u.is_unix) {
            CHECK(u.password && strstr(u.password, SECRET));
            char *red = redact_as_config(url);
            CHECK(!strstr(red, SECRET));
            free(red);
        }
    } else {
        check_err(err);
        CHECK(!strstr(err, SECRET));
    }
    dbt_redis_url_free(&u);
    free(err);
    free(url);
}

/* No '@' anywhere ("redis://:pw", "redis://user:pw": an "@host" forgotten): SECRET goes right
 * after the first ':' among the hosts (before any '/', '?' or '['), or after a ':' added at the
 * hosts' end. The parser reads it as a port (refused: it has letters); no message and no
 * redacted copy may show it. */
static void fuzz_redis_url_no_at_secret(const char *text)
{
    const char *sep = strstr(text, "://");
    /* Only where "://" ends a scheme: in "unix:/a://b:c" it is part of a socket's path. */
    if (strchr(text, '@') || strchr(text, '?') || !sep || sep == text ||
        strspn(text, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+-.") !=
            (size_t)(sep - text))
        return;
    const char *hosts = sep + 3;
    size_t region = strcspn(hosts, "/?[");
    const char *colon = memchr(hosts, ':', region);
    size_t cut = colon ? (size_t)(colon + 1 - text) : (size_t)(hosts + region - text);
    size_t n = strlen(text), ls = strlen(SECRET);
    char *url = malloc(n + ls + 2);
    CHECK(url);
    memcpy(url, text, cut);
    sprintf(url + cut, "%s%s%s", colon ? "" : ":", SECRET, text + cut);
    if (count_of(url, SECRET) == 1) {
        char *err = new_err();
        dbt_redis_url u = {0};
        if (dbt_parse_redis_url(setting, url, &u, err)) {
            check_url(&u);
        } else {
            check_err(err);
            CHECK(!strstr(err, SECRET));
        }
        char *red = redact_as_config(url);
        CHECK(!strstr(red, SECRET));
        free(red);
        dbt_redis_url_free(&u);
        free(err);
    }
    free(url);
}

/* Whatever comes before it, a query string is refused and none of it shown: its '@' is not
 * where a userinfo ends. */
static void fuzz_redis_url_query_secret(const char *text)
{
    static const char query[] = "?password=x@" SECRET;
    size_t n = strcspn(text, "?");
    char *url = malloc(n + sizeof query);
    CHECK(url);
    memcpy(url, text, n);
    memcpy(url + n, query, sizeof query);
    if (count_of(url, SECRET) == 1) {
        char *err = new_err();
        dbt_redis_url u = {0};
        CHECK(!dbt_parse_redis_url(setting, url, &u, err));
        check_err(err);
        CHECK(!strstr(err, SECRET));
        dbt_redis_url_free(&u);
        free(err);
    }
    free(url);
}

/* ---- DBTHROTTLE_EXEMPT ---- */

static void fuzz_exempt(const char *text)
{
    static const char *const fields[] = {"application_name", "user", "database"};
    char *err = new_err();
    dbt_exempt_rule rules[DBT_MAX_EXEMPT] = {{0}};
    int n = 0;
    CHECK(dbt_parse_exempt(setting, "user=keep", rules, &n, err));
    bool ok = dbt_parse_exempt(setting, text, rules, &n, err);
    if (!ok) {
        CHECK(n == 1 && rules[0].field == DBT_EXEMPT_USER && same_str(rules[0].pattern, "keep"));
        check_err(err);
    } else if (strcmp(text, "none") == 0) {
        CHECK(n == 0); /* no rule: the word a live value lifts the workers' own with */
    } else {
        CHECK(n >= 1 && n <= DBT_MAX_EXEMPT);
        size_t len = strlen(text);
        char *joined = malloc(len + 2), *o = joined;
        CHECK(joined);
        for (int i = 0; i < n; i++) {
            CHECK((unsigned)rules[i].field < 3 && rules[i].pattern && rules[i].pattern[0]);
            CHECK(!strchr(rules[i].pattern, ','));
            const char *f = fields[rules[i].field];
            size_t need = strlen(f) + 1 + strlen(rules[i].pattern) + (i > 0);
            CHECK((size_t)(o - joined) + need <= len);
            o += sprintf(o, "%s%s=%s", i > 0 ? "," : "", f, rules[i].pattern);
        }
        /* A single trailing comma is tolerated. */
        CHECK(
            strcmp(joined, text) == 0 ||
            (strlen(joined) + 1 == len && !strncmp(joined, text, len - 1) && text[len - 1] == ','));
        free(joined);
    }
    dbt_exempt_free(rules, n);
    free(err);
}

/* ---- redaction ---- */

typedef void (*redactor)(const char *, char *, size_t);

/* A buffer of every size in caps gets a NUL-terminated prefix of the whole copy, no more. */
static void check_truncation(redactor f, const char *text, const char *full, const uint8_t *caps,
                             size_t ncaps)
{
    size_t flen = strlen(full);
    f(text, NULL, 0); /* cap 0 writes nothing */
    for (size_t i = 0; i <= ncaps; i++) {
        size_t cap = i < ncaps ? (size_t)caps[i] % (flen + 8) + 1 : 1;
        char *out = malloc(cap); /* exact size: ASan sees a byte past it */
        CHECK(out);
        f(text, out, cap);
        size_t olen = strnlen(out, cap);
        CHECK(olen < cap);
        CHECK(olen == (flen < cap - 1 ? flen : cap - 1) && memcmp(out, full, olen) == 0);
        free(out);
    }
}

static void fuzz_redact_url(const char *text, const uint8_t *caps, size_t ncaps)
{
    char *full = redact_as_config(text);
    check_truncation(dbt_redact_url, text, full, caps, ncaps);
    /* bad_url's buffer: strlen + DBT_REDACT_ROOM too */
    size_t cap = strlen(text) + DBT_REDACT_ROOM;
    char *out = malloc(cap);
    CHECK(out);
    dbt_redact_url(text, out, cap);
    CHECK(strcmp(out, full) == 0);
    free(out);
    free(full);
}

static bool is_uri(const char *s)
{
    return strncmp(s, "postgresql://", 13) == 0 || strncmp(s, "postgres://", 11) == 0;
}

/* The passwords libpq reads in ci: [0] its own, [1] that of a dbname holding a connection
 * string (each strdup'd, or NULL). libpq expands such a dbname once, and only when it is given
 * as a keyword (PQconnectdbParams with expand_dbname, which a "key=value" copy stands for): a
 * URI's own path or ?dbname= is never expanded, nor is the expanded string's dbname. */
static void libpq_passwords(const char *ci, bool expand, char *pw[2])
{
    pw[0] = pw[1] = NULL;
    char *errmsg = NULL;
    PQconninfoOption *opts = PQconninfoParse(ci, &errmsg);
    PQfreemem(errmsg);
    if (!opts)
        return;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val)
            continue;
        if (strcmp(o->keyword, "password") == 0) {
            pw[0] = strdup(o->val);
        } else if (strcmp(o->keyword, "dbname") == 0 && expand &&
                   (strchr(o->val, '=') || is_uri(o->val))) {
            char *inner[2];
            libpq_passwords(o->val, false, inner);
            pw[1] = inner[0];
        }
    }
    PQconninfoFree(opts);
}

static void fuzz_redact_conninfo(const char *text, const uint8_t *caps, size_t ncaps)
{
    size_t big = 2 * strlen(text) + 16;
    char *full = malloc(big);
    CHECK(full);
    dbt_redact_conninfo(text, full, big);
    CHECK(strlen(full) + 1 < big); /* room to spare: the copy is whole */
    check_truncation(dbt_redact_conninfo, text, full, caps, ncaps);

    char *before[2], *after[2];
    libpq_passwords(text, !is_uri(text), before);
    libpq_passwords(full, !is_uri(full), after);
    for (int i = 0; i < 2; i++) {
        if (!before[i] || !before[i][0] || strcmp(before[i], "***") == 0)
            continue;
        for (int j = 0; j < 2; j++)
            CHECK(!after[j] || strcmp(after[j], before[i]) != 0); /* a password shows */
    }
    for (int i = 0; i < 2; i++) {
        free(before[i]);
        free(after[i]);
    }
    free(full);
}

/* ---- dbt_escape ---- */

static void fuzz_escape(unsigned flags, const uint8_t *data, size_t size)
{
    if (size < 2)
        return;
    size_t max = data[0], cap = (size_t)data[1] * 4;
    char *text = malloc(size - 1);
    CHECK(text);
    memcpy(text, data + 2, size - 2);
    text[size - 2] = '\0';
    bool quoted = flags & 1;
    char *out = malloc(cap ? cap : 1);
    CHECK(out);
    out[0] = 'X';
    dbt_escape(text, max, quoted, out, cap);
    if (cap == 0) {
        CHECK(out[0] == 'X');
    } else {
        size_t olen = strnlen(out, cap);
        CHECK(olen < cap);
        for (size_t i = 0; i < olen; i++)
            CHECK((unsigned char)out[i] >= 0x20 && out[i] != 0x7f);
        size_t tlen = strlen(text);
        if (cap >= 16 && tlen > max) /* "cut after max bytes with ..." */
            CHECK(olen >= 3 + quoted && !memcmp(out + olen - 3 - quoted, "...", 3));
        if (cap >= 4 * tlen + 16 && tlen <= max) {
            /* Uncut: it decodes back (quoted form only: bare, '\\' is not escaped). */
            CHECK(!strstr(out, "...") || strstr(text, "..."));
            if (quoted) {
                CHECK(olen >= 2 && out[0] == '"' && out[olen - 1] == '"');
                size_t t = 0;
                for (size_t i = 1; i + 1 < olen; t++) {
                    char c = out[i++];
                    if (c == '\\') {
                        char k = out[i++];
                        if (k == 'x') {
                            char hex[3] = {out[i], out[i + 1], '\0'};
                            c = (char)strtol(hex, NULL, 16);
                            i += 2;
                        } else {
                            c = k == 'n' ? '\n' : k == 't' ? '\t' : k == 'r' ? '\r' : k;
                        }
                    }
                    CHECK(t < tlen && text[t] == c);
                }
                CHECK(t == tlen);
            }
        }
    }
    free(out);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    unsigned which = data[0] & 15, flags = data[0] >> 4;
    char *text = malloc(size);
    CHECK(text);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0'; /* an inner NUL only ends the text early */
    const uint8_t *caps = data + 1;
    size_t ncaps = size - 1 < 4 ? size - 1 : 4;
    switch (which % 9) {
    case 0:
        fuzz_duration(flags, text);
        break;
    case 1:
        fuzz_limit(text);
        break;
    case 2:
        fuzz_bool(text);
        break;
    case 3:
        fuzz_redis_url(text);
        break;
    case 4:
        fuzz_redis_url_secret(text);
        fuzz_redis_url_query_secret(text);
        fuzz_redis_url_no_at_secret(text);
        break;
    case 5:
        fuzz_exempt(text);
        break;
    case 6:
        fuzz_redact_url(text, caps, ncaps);
        break;
    case 7:
        fuzz_redact_conninfo(text, caps, ncaps);
        break;
    case 8:
        fuzz_escape(flags, data + 1, size - 1);
        break;
    }
    free(text);
    return 0;
}
