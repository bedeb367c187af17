/* Logging: logfmt and JSON escaping, truncation, the log file, concurrent writers, redaction.
 *
 * Lines are checked by parsing them back (a small logfmt reader and a strict JSON reader below),
 * not by looking for substrings: a value must come back byte for byte. */
#include "log.h"

#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char TS[] = "2026-11-22T11:39:45.123456Z";

static char *line(dbt_log_format fmt, const dbt_field *f, size_t n)
{
    static char buf[8192];
    size_t len = dbt_log_format_line(buf, sizeof buf, fmt, TS, DBT_LOG_INFO, "grant", f, n);
    cr_assert_eq(len, strlen(buf), "returned length %zu, line is %zu", len, strlen(buf));
    return buf;
}

/* ---- a logfmt reader: key=value pairs separated by one space, the line ends with '\n' ---- */

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Decodes the value of `key` into out; false if the line is malformed or has no such key. */
static bool logfmt_get(const char *l, const char *key, char *out, size_t cap)
{
    const char *p = l;
    bool found = false;
    for (;;) {
        const char *k = p;
        while (*p && *p != '=' && *p != ' ' && *p != '\n')
            p++;
        if (*p != '=' || p == k)
            return false;
        bool want = (size_t)(p - k) == strlen(key) && strncmp(k, key, (size_t)(p - k)) == 0;
        p++;
        size_t o = 0;
        if (*p == '"') {
            for (p++; *p != '"'; p++) {
                char c = *p;
                if ((unsigned char)c < 0x20 || c == 0x7f)
                    return false; /* raw control bytes are never allowed inside quotes */
                if (c == '\\') {
                    p++;
                    if (*p == 'n' || *p == 't' || *p == 'r' || *p == '"' || *p == '\\') {
                        c = *p == 'n' ? '\n' : *p == 't' ? '\t' : *p == 'r' ? '\r' : *p;
                    } else if (*p == 'x' && hexval(p[1]) >= 0 && hexval(p[2]) >= 0) {
                        c = (char)(hexval(p[1]) * 16 + hexval(p[2]));
                        p += 2;
                    } else {
                        return false;
                    }
                }
                if (want && o + 1 < cap)
                    out[o++] = c;
            }
            p++;
        } else {
            if (*p == ' ' || *p == '\n' || !*p)
                return false; /* an empty value must be quoted */
            for (; *p && *p != ' ' && *p != '\n'; p++) {
                if ((unsigned char)*p <= ' ' || *p == '"' || *p == '=' || *p == '\\')
                    return false;
                if (want && o + 1 < cap)
                    out[o++] = *p;
            }
        }
        if (want) {
            out[o] = '\0';
            found = true;
        }
        if (*p == '\n')
            return p[1] == '\0' && found;
        if (*p != ' ')
            return false;
        p++;
    }
}

/* ---- a strict JSON reader for one flat object: string keys, string/number/null values ---- */

/* Length of a valid UTF-8 sequence at p, 0 if invalid. */
static size_t utf8_seq(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    size_t n = (p[0] & 0xe0) == 0xc0   ? 2
               : (p[0] & 0xf0) == 0xe0 ? 3
               : (p[0] & 0xf8) == 0xf0 ? 4
                                       : 0;
    uint32_t cp = n == 2 ? p[0] & 0x1fu : n == 3 ? p[0] & 0x0fu : p[0] & 0x07u;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xc0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3fu);
    }
    uint32_t min = n == 2 ? 0x80 : n == 3 ? 0x800 : 0x10000;
    if (n == 0 || cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return n;
}

static void put_utf8(uint32_t cp, char *out, size_t *o, size_t cap)
{
    char b[4];
    size_t n;
    if (cp < 0x80) {
        b[0] = (char)cp, n = 1;
    } else if (cp < 0x800) {
        b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), n = 2;
    } else {
        b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        b[2] = (char)(0x80 | (cp & 0x3f)), n = 3;
    }
    for (size_t i = 0; i < n; i++)
        if (out && *o + 1 < cap)
            out[(*o)++] = b[i];
}

/* Reads a JSON string at p, decoding it into out (may be NULL); returns the end or NULL. */
static const char *json_str(const char *p, char *out, size_t cap)
{
    size_t o = 0;
    if (*p++ != '"')
        return NULL;
    while (*p != '"') {
        unsigned char c = (unsigned char)*p;
        if (c < 0x20)
            return NULL;
        if (c == '\\') {
            p++;
            const char *simple = strchr("\"\\/bfnrt", *p);
            if (*p && simple) {
                static const char map[] = "\"\\/\b\f\n\r\t";
                put_utf8((unsigned char)map[simple - "\"\\/bfnrt"], out, &o, cap);
                p++;
            } else if (*p == 'u') {
                uint32_t cp = 0;
                for (int i = 1; i <= 4; i++) {
                    int h = hexval((char)(p[i] | 0x20));
                    if (h < 0 || !p[i])
                        return NULL;
                    cp = cp * 16 + (uint32_t)h;
                }
                if (cp >= 0xd800 && cp <= 0xdfff)
                    return NULL; /* we never write surrogate pairs */
                put_utf8(cp, out, &o, cap);
                p += 5;
            } else {
                return NULL;
            }
        } else {
            size_t n = utf8_seq((const unsigned char *)p);
            if (n == 0)
                return NULL;
            for (size_t i = 0; i < n; i++)
                if (out && o + 1 < cap)
                    out[o++] = p[i];
            p += n;
        }
    }
    if (out)
        out[o] = '\0';
    return p + 1;
}

/* -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)? */
static const char *json_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return p;
}

/* Validates a whole line `{...}\n`; when key is given, decodes its value (a string's text, or a
 * number's or null's spelling) into out. Duplicate keys are invalid. */
static bool json_line(const char *l, const char *key, char *out, size_t cap)
{
    const char *p = l;
    bool found = false;
    char keys[64][256];
    int nkeys = 0;
    if (*p++ != '{')
        return false;
    if (*p == '}')
        return p[1] == '\n' && p[2] == '\0' && !key;
    for (;;) {
        char k[256];
        p = json_str(p, k, sizeof k);
        if (!p || *p++ != ':')
            return false;
        for (int i = 0; i < nkeys; i++)
            if (strcmp(keys[i], k) == 0)
                return false;
        if (nkeys < 64)
            snprintf(keys[nkeys++], sizeof keys[0], "%s", k);
        bool want = key && strcmp(k, key) == 0;
        const char *v = p;
        if (*p == '"') {
            p = json_str(p, want ? out : NULL, cap);
        } else if (strncmp(p, "null", 4) == 0) {
            p += 4;
        } else {
            p = json_number(p);
        }
        if (!p)
            return false;
        if (want && *v != '"')
            snprintf(out, cap, "%.*s", (int)(p - v), v);
        found |= want;
        if (*p == ',') {
            p++;
            continue;
        }
        return p[0] == '}' && p[1] == '\n' && p[2] == '\0' && (found || !key);
    }
}

/* Whether the whole of s is valid UTF-8 holding no C1 control (what a terminal may act on). */
static bool clean_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        size_t n = utf8_seq(p);
        if (n == 0 || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0))
            return false;
        p += n;
    }
    return true;
}

static size_t count_in(const char *hay, const char *needle)
{
    size_t n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- logfmt ---- */

Test(logfmt, the_exact_line)
{
    dbt_field f[] = {DBT_S("pool", "db:5432/app"), DBT_I("holders", 3),
                     DBT_MS("waited_ms", 12.3456), DBT_S("sp", "a b"),
                     DBT_S("q", "say \"hi\"\\"),   DBT_S("nl", "x\ny\tz\x01\r\x7f"),
                     DBT_S("empty", ""),           DBT_S("eq", "a=b")};
    cr_expect_str_eq(line(DBT_FMT_LOGFMT, f, 8),
                     "ts=2026-11-22T11:39:45.123456Z level=info event=grant pool=db:5432/app "
                     "holders=3 waited_ms=12.346 sp=\"a b\" q=\"say \\\"hi\\\"\\\\\" "
                     "nl=\"x\\ny\\tz\\x01\\r\\x7f\" empty=\"\" eq=\"a=b\"\n");
}

Test(logfmt, every_byte_comes_back)
{
    /* Every byte value 1..255 in one value: the reader must get exactly it back. */
    char all[256];
    for (int i = 1; i < 256; i++)
        all[i - 1] = (char)i;
    all[255] = '\0';
    dbt_field f[] = {DBT_S("all", all), DBT_S("null", NULL), DBT_I("min", INT64_MIN),
                     DBT_S("utf8", "caf\xc3\xa9")};
    char *l = line(DBT_FMT_LOGFMT, f, 4);
    char got[1024];
    cr_assert(logfmt_get(l, "all", got, sizeof got), "unreadable: %s", l);
    cr_expect_str_eq(got, all);
    cr_assert(logfmt_get(l, "null", got, sizeof got));
    cr_expect_str_eq(got, "");
    cr_assert(logfmt_get(l, "min", got, sizeof got));
    cr_expect_str_eq(got, "-9223372036854775808");
    cr_assert(logfmt_get(l, "utf8", got, sizeof got));
    cr_expect_str_eq(got, "caf\xc3\xa9");
    cr_expect(strstr(l, " utf8=caf\xc3\xa9") != NULL, "UTF-8 alone needs no quotes: %s", l);
    cr_expect_eq(strchr(l, '\n'), l + strlen(l) - 1, "not one line");
    cr_expect(clean_utf8(l), "bytes 0x80..0xff written raw: %s", l);
}

/* Issue 29: a pool name ending in a cut character was written raw; JSON replaced it. Each byte of
 * no valid UTF-8 sequence is written \xNN (where JSON writes one U+FFFD), so the line is valid
 * UTF-8 and the value reads back exactly. */
Test(logfmt, invalid_utf8_is_escaped_where_json_replaces_it)
{
    static const struct {
        const char *v;
        size_t bad; /* bytes of no valid sequence: JSON's U+FFFD count */
    } cases[] = {
        {"app\xc3", 1},          /* truncated 2-byte */
        {"ok\xe2\x82", 2},       /* truncated 3-byte */
        {"\xf0\x9f\x98", 3},     /* truncated 4-byte */
        {"\xc0\xaf", 2},         /* overlong '/' */
        {"\xe0\x80\xaf", 3},     /* overlong, 3 bytes */
        {"\xed\xa0\x80", 3},     /* a surrogate, U+D800 */
        {"\xed\xbf\xbf", 3},     /* a surrogate, U+DFFF */
        {"\xf4\x90\x80\x80", 4}, /* past U+10FFFF */
        {"a\x80"
         "b\xbf",
         2},                         /* lone continuation bytes */
        {"\xff\xfe", 2},             /* never in UTF-8 */
        {"caf\xc3\xa9\xc3", 1},      /* valid then cut */
        {"\xe2\x82\xac\xe2\x82", 2}, /* a euro sign, then half of one */
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        dbt_field f[] = {DBT_S("pool", cases[i].v), DBT_S("k", "v")};
        char *l = line(DBT_FMT_LOGFMT, f, 2);
        char got[64];
        cr_expect(clean_utf8(l), "case %zu: not valid UTF-8: %s", i, l);
        cr_assert(logfmt_get(l, "pool", got, sizeof got), "case %zu: unreadable: %s", i, l);
        cr_expect_str_eq(got, cases[i].v, "case %zu", i);
        cr_expect(logfmt_get(l, "k", got, sizeof got), "case %zu: the next field: %s", i, l);
        size_t escaped = 0;
        for (const char *p = l; (p = strstr(p, "\\x")); p += 2)
            escaped += hexval(p[2]) >= 8;
        char *j = line(DBT_FMT_JSON, f, 2);
        cr_expect(json_line(j, "pool", got, sizeof got), "case %zu: invalid JSON: %s", i, j);
        cr_expect_eq(escaped, cases[i].bad, "case %zu: %zu escaped: %s", i, escaped, l);
        cr_expect_eq(count_in(j, "\\ufffd"), cases[i].bad, "case %zu: %s", i, j);
    }
    dbt_field f[] = {DBT_S("pool", "app\xc3")};
    cr_expect(strstr(line(DBT_FMT_LOGFMT, f, 1), " pool=\"app\\xc3\"\n") != NULL);
}

/* C1 controls are valid UTF-8, but U+009B is a terminal's CSI: both formats escape them. */
Test(logfmt, c1_controls_are_escaped_in_both_formats)
{
    dbt_field f[] = {DBT_S("v", "a\xc2\x9b"
                                "31mb\xc2\x85\xc2\xa0")};
    char *l = line(DBT_FMT_LOGFMT, f, 1);
    cr_expect(strstr(l, " v=\"a\\xc2\\x9b31mb\\xc2\\x85\xc2\xa0\"\n") != NULL, "%s", l);
    cr_expect(clean_utf8(l), "%s", l);
    char got[64];
    cr_assert(logfmt_get(l, "v", got, sizeof got));
    cr_expect_str_eq(got, "a\xc2\x9b"
                          "31mb\xc2\x85\xc2\xa0");
    char *j = line(DBT_FMT_JSON, f, 1);
    cr_expect(strstr(j, "\"v\":\"a\\u009b31mb\\u0085\xc2\xa0\"") != NULL, "%s", j);
    cr_expect(clean_utf8(j), "%s", j);
    cr_assert(json_line(j, "v", got, sizeof got));
    cr_expect_str_eq(got, "a\xc2\x9b"
                          "31mb\xc2\x85\xc2\xa0");
}

Test(logfmt, odd_keys_and_null_event_keep_the_shape)
{
    dbt_field f[] = {DBT_S("a key=\"x\"", "v"), DBT_S(NULL, "w"), DBT_S("k", "v")};
    char buf[512];
    dbt_log_format_line(buf, sizeof buf, DBT_FMT_LOGFMT, TS, DBT_LOG_WARN, NULL, f, 3);
    char got[64];
    cr_expect(logfmt_get(buf, "k", got, sizeof got), "malformed: %s", buf);
    cr_expect(logfmt_get(buf, "event", got, sizeof got));
    cr_expect_str_eq(got, "");
    cr_expect(logfmt_get(buf, "level", got, sizeof got));
    cr_expect_str_eq(got, "warn");
}

/* ---- JSON ---- */

Test(json, values_come_back_exactly)
{
    const char *values[] = {
        "a\"b\\c", "\x01\x1f\n\r\t\x7f", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", "",
        "/slash/", "{\"nested\": [1]}"};
    dbt_field f[6];
    char keys[6][16];
    for (int i = 0; i < 6; i++) {
        snprintf(keys[i], sizeof keys[i], "k%d", i);
        f[i] = DBT_S(keys[i], values[i]);
    }
    char *l = line(DBT_FMT_JSON, f, 6);
    char got[256];
    for (int i = 0; i < 6; i++) {
        cr_assert(json_line(l, keys[i], got, sizeof got), "invalid JSON or no %s: %s", keys[i], l);
        cr_expect_str_eq(got, values[i]);
    }
    cr_expect(strstr(l, "\\u0001\\u001f\\n\\r\\t\\u007f") != NULL, "control bytes: %s", l);
    static const char start[] =
        "{\"ts\":\"2026-11-22T11:39:45.123456Z\",\"level\":\"info\",\"event\":\"grant\",\"k0\":";
    cr_expect(strncmp(l, start, sizeof start - 1) == 0, "%s", l);
}

Test(json, invalid_utf8_becomes_replacement_characters)
{
    const char *bad[] = {"x\xff\xfey",
                         "\xc3",
                         "\xc0\xaf" /* overlong '/' */,
                         "\xed\xa0\x80" /* surrogate */,
                         "\xf4\x90\x80\x80" /* > U+10FFFF */,
                         "ok\xe2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        dbt_field f[] = {DBT_S("v", bad[i])};
        char *l = line(DBT_FMT_JSON, f, 1);
        char got[64];
        cr_assert(json_line(l, "v", got, sizeof got), "invalid JSON for case %zu: %s", i, l);
        cr_expect(strstr(got, "\xef\xbf\xbd") != NULL, "no U+FFFD for case %zu", i);
    }
    dbt_field f[] = {DBT_S("v", "x\xff\xfey")};
    char got[64];
    cr_assert(json_line(line(DBT_FMT_JSON, f, 1), "v", got, sizeof got));
    cr_expect_str_eq(got, "x\xef\xbf\xbd\xef\xbf\xbdy");
}

Test(json, numbers)
{
    dbt_field f[] = {DBT_I("n", -7),         DBT_MS("ms", 0.25),      DBT_MS("big", 1e300),
                     DBT_MS("nan", NAN),     DBT_MS("inf", INFINITY), DBT_I("max", INT64_MAX),
                     DBT_MS("neg", -12.3456)};
    char *l = line(DBT_FMT_JSON, f, 7);
    char got[64];
    struct {
        const char *key, *text;
    } want[] = {{"n", "-7"},
                {"ms", "0.250"},
                {"nan", "null"},
                {"inf", "null"},
                {"max", "9223372036854775807"},
                {"neg", "-12.346"}};
    for (size_t i = 0; i < sizeof want / sizeof *want; i++) {
        cr_assert(json_line(l, want[i].key, got, sizeof got), "invalid: %s", l);
        cr_expect_str_eq(got, want[i].text);
    }
    cr_assert(json_line(l, "big", got, sizeof got), "invalid: %s", l);
    cr_expect_eq(strtod(got, NULL), 1e300);
}

/* ---- truncation ---- */

Test(truncation, a_10kb_value_is_cut_at_1024_bytes)
{
    char *big = malloc(10241);
    memset(big, '{', 10240);
    big[10240] = '\0';
    dbt_field f[] = {DBT_S("pool", big), DBT_S("kind", "query")};
    char got[2048];
    char *l = line(DBT_FMT_LOGFMT, f, 2);
    cr_assert(logfmt_get(l, "pool", got, sizeof got), "%s", l);
    cr_expect_eq(strlen(got), 1027);
    cr_expect(strncmp(got, big, 1024) == 0 && strcmp(got + 1024, "...") == 0);
    cr_assert(logfmt_get(l, "kind", got, sizeof got), "the field after the long one is lost");
    cr_expect_str_eq(got, "query");

    l = line(DBT_FMT_JSON, f, 2);
    cr_assert(json_line(l, "pool", got, sizeof got), "%s", l);
    cr_expect_eq(strlen(got), 1027);
    cr_assert(json_line(l, "kind", got, sizeof got));
    cr_expect_str_eq(got, "query");
    free(big);
}

Test(truncation, a_cut_never_splits_a_utf8_character)
{
    char *big = malloc(3001);
    for (int i = 0; i < 3000; i += 3)
        memcpy(big + i, "\xe2\x82\xac", 3); /* the euro sign, 3 bytes: 1024 falls inside one */
    big[3000] = '\0';
    dbt_field f[] = {DBT_S("v", big)};
    char got[2048];
    cr_assert(json_line(line(DBT_FMT_JSON, f, 1), "v", got, sizeof got));
    cr_expect(strstr(got, "\xef\xbf\xbd") == NULL, "a cut character became U+FFFD");
    cr_expect_eq(strlen(got), 1023 + 3, "cut at %zu", strlen(got));
    cr_assert(logfmt_get(line(DBT_FMT_LOGFMT, f, 1), "v", got, sizeof got));
    cr_expect_eq(strlen(got), 1023 + 3);
    free(big);
}

Test(truncation, a_full_line_drops_whole_fields_and_stays_valid)
{
    char *big = malloc(10241);
    memset(big, '\x01', 10240); /* escapes to 4 (logfmt) or 6 (JSON) bytes each */
    big[10240] = '\0';
    dbt_field many[21];
    for (int i = 0; i < 20; i++)
        many[i] = DBT_S("f", big);
    many[20] = DBT_I("last", 42);
    for (int fmt = 0; fmt < 2; fmt++) {
        char *l = line((dbt_log_format)fmt, many, 21);
        size_t n = strlen(l);
        cr_expect_leq(n, 8191);
        cr_expect_eq(strchr(l, '\n'), l + n - 1, "not one line");
        char got[64];
        if (fmt == DBT_FMT_JSON) {
            cr_expect(json_line(l, NULL, NULL, 0), "cut JSON is invalid");
            cr_expect(json_line(l, "last", got, sizeof got), "a small last field was lost");
        } else {
            cr_expect(logfmt_get(l, "last", got, sizeof got), "cut logfmt is malformed");
        }
    }
    free(big);
}

Test(truncation, every_buffer_size_gives_a_whole_line)
{
    dbt_field f[] = {DBT_S("pool", "a \"b\" \xff"), DBT_I("n", 12345), DBT_MS("ms", 1.5)};
    for (size_t cap = 4; cap < 260; cap++) {
        for (int fmt = 0; fmt < 2; fmt++) {
            char *buf = malloc(cap); /* exact size: ASan catches any byte past it */
            size_t len =
                dbt_log_format_line(buf, cap, (dbt_log_format)fmt, TS, DBT_LOG_ERROR, "e", f, 3);
            cr_assert_lt(len, cap);
            cr_assert_eq(buf[len], '\0');
            cr_assert_eq(buf[len - 1], '\n', "cap %zu", cap);
            if (fmt == DBT_FMT_JSON)
                cr_assert(json_line(buf, NULL, NULL, 0), "cap %zu: %s", cap, buf);
            free(buf);
        }
    }
    char tiny[3] = "xx";
    cr_expect_eq(
        dbt_log_format_line(tiny, sizeof tiny, DBT_FMT_JSON, TS, DBT_LOG_ERROR, "e", NULL, 0), 0);
    cr_expect_eq(tiny[0], '\0');
}

/* ---- levels ---- */

Test(levels, default_is_warn_and_off_never_writes)
{
    dbt_log_close(); /* back to the defaults */
    cr_expect(dbt_log_enabled(DBT_LOG_ERROR));
    cr_expect(dbt_log_enabled(DBT_LOG_WARN));
    cr_expect(!dbt_log_enabled(DBT_LOG_INFO));
    cr_expect(!dbt_log_enabled(DBT_LOG_DEBUG));
    cr_expect(!dbt_log_enabled(DBT_LOG_OFF));
    dbt_config c;
    dbt_config_defaults(&c);
    char err[DBT_ERRLEN];
    c.log_level = DBT_LOG_OFF;
    cr_assert(dbt_log_open(&c, err));
    cr_expect(!dbt_log_enabled(DBT_LOG_ERROR));
    c.log_level = DBT_LOG_DEBUG;
    cr_assert(dbt_log_open(&c, err));
    cr_expect(dbt_log_enabled(DBT_LOG_DEBUG));
    cr_expect(!dbt_log_enabled(DBT_LOG_OFF));
    dbt_log_close();
    dbt_config_free(&c);
}

/* ---- the log file ---- */

static char *read_all(const char *path)
{
    FILE *fp = fopen(path, "r");
    cr_assert_not_null(fp, "%s: %s", path, strerror(errno));
    char *buf = malloc(4 << 20);
    size_t n = fread(buf, 1, (4 << 20) - 1, fp);
    buf[n] = '\0';
    fclose(fp);
    return buf;
}

static void open_log(dbt_config *c, const char *path, dbt_log_format fmt)
{
    dbt_config_defaults(c);
    c->log_path = path ? strdup(path) : NULL;
    c->log_level = DBT_LOG_INFO;
    c->log_format = fmt;
    char err[DBT_ERRLEN];
    cr_assert(dbt_log_open(c, err), "%s", err);
}

Test(log_file, created_0600_whatever_the_umask)
{
    char dir[] = "/tmp/dbt-logdir-XXXXXX";
    cr_assert(mkdtemp(dir));
    char path[300];
    snprintf(path, sizeof path, "%s/trace.log", dir);
    mode_t old = umask(0);
    dbt_config c;
    open_log(&c, path, DBT_FMT_LOGFMT);
    umask(old);
    dbt_field f[] = {DBT_S("pool", "p")};
    dbt_log(DBT_LOG_INFO, "grant", f, 1);
    dbt_log(DBT_LOG_DEBUG, "hidden", f, 1); /* below the level */
    dbt_log(DBT_LOG_OFF, "hidden", f, 1);   /* OFF is never a level to write at */
    dbt_log(DBT_LOG_ERROR, "nofields", NULL, 0);
    dbt_log_close();
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0600, "mode %o", st.st_mode & 0777);
    char *text = read_all(path);
    char first[512], second[512];
    cr_assert_eq(sscanf(text, "%511[^\n]\n%511[^\n]\n", first, second), 2, "%s", text);
    strcat(first, "\n");
    char got[64];
    cr_expect(logfmt_get(first, "event", got, sizeof got), "%s", first);
    cr_expect_str_eq(got, "grant");
    cr_expect(logfmt_get(first, "pid", got, sizeof got));
    cr_expect_eq(atol(got), (long)getpid());
    cr_expect(strstr(first, " pool=p host=") != NULL && strstr(first, " prog=") != NULL,
              "host, prog, pid and tid end the line: %s", first);
    cr_expect(strstr(second, "level=error event=nofields host=") != NULL, "%s", second);
    cr_expect(strstr(text, "hidden") == NULL, "a line below the level was written");
    free(text);
    unlink(path);
    rmdir(dir);
    dbt_config_free(&c);
}

Test(log_file, an_existing_file_keeps_its_mode_and_is_appended_to)
{
    char path[] = "/tmp/dbt-log-XXXXXX";
    int fd = mkstemp(path);
    cr_assert(write(fd, "before\n", 7) == 7);
    fchmod(fd, 0640);
    close(fd);
    dbt_config c;
    open_log(&c, path, DBT_FMT_JSON);
    dbt_log(DBT_LOG_WARN, "w", NULL, 0);
    dbt_log_close();
    struct stat st;
    cr_assert_eq(stat(path, &st), 0);
    cr_expect_eq(st.st_mode & 0777, 0640);
    char *text = read_all(path);
    cr_assert(strncmp(text, "before\n{", 8) == 0, "%s", text);
    cr_expect(json_line(text + 7, "event", (char[8]){0}, 8), "%s", text + 7);
    free(text);
    unlink(path);
    dbt_config_free(&c);
}

Test(log_file, reopening_switches_files)
{
    char a[] = "/tmp/dbt-log-a-XXXXXX", b[] = "/tmp/dbt-log-b-XXXXXX";
    close(mkstemp(a));
    close(mkstemp(b));
    dbt_config ca, cb;
    open_log(&ca, a, DBT_FMT_LOGFMT);
    dbt_log(DBT_LOG_WARN, "one", NULL, 0);
    open_log(&cb, b, DBT_FMT_LOGFMT);
    dbt_log(DBT_LOG_WARN, "two", NULL, 0);
    dbt_log_close();
    char *ta = read_all(a), *tb = read_all(b);
    cr_expect(strstr(ta, "event=one") && !strstr(ta, "event=two"), "a: %s", ta);
    cr_expect(strstr(tb, "event=two") && !strstr(tb, "event=one"), "b: %s", tb);
    free(ta);
    free(tb);
    unlink(a);
    unlink(b);
    dbt_config_free(&ca);
    dbt_config_free(&cb);
}

/* Runs fn with fd 1 and fd 2 captured in files; returns what went to each. */
static void capture(void (*fn)(void *), void *arg, char **out, char **errout)
{
    char po[] = "/tmp/dbt-out-XXXXXX", pe[] = "/tmp/dbt-err-XXXXXX";
    int fo = mkstemp(po), fe = mkstemp(pe);
    fflush(stdout);
    fflush(stderr);
    int save1 = dup(1), save2 = dup(2);
    dup2(fo, 1);
    dup2(fe, 2);
    fn(arg);
    dup2(save1, 1);
    dup2(save2, 2);
    close(save1);
    close(save2);
    close(fo);
    close(fe);
    *out = read_all(po);
    *errout = read_all(pe);
    unlink(po);
    unlink(pe);
}

static void open_missing_and_log(void *err)
{
    dbt_config c;
    dbt_config_defaults(&c);
    c.log_path = strdup("/nonexistent-dir/sub\ndir/trace.log");
    c.log_level = DBT_LOG_INFO;
    cr_expect(!dbt_log_open(&c, err));
    dbt_log(DBT_LOG_INFO, "after_failure", NULL, 0);
    dbt_log_close();
    dbt_config_free(&c);
}

Test(log_file, an_unopenable_file_falls_back_to_stderr_never_stdout)
{
    char err[DBT_ERRLEN] = "";
    char *out, *errout;
    capture(open_missing_and_log, err, &out, &errout);
    cr_expect_str_eq(out, "", "wrote to stdout: %s", out);
    cr_expect(strstr(errout, "event=after_failure") != NULL, "stderr: %s", errout);
    cr_expect(strstr(err, "DBTHROTTLE_LOG: cannot open /nonexistent-dir/sub\\ndir/trace.log") ==
                  err,
              "%s", err);
    cr_expect(strchr(err, '\n') == NULL, "not one line: %s", err);
    free(out);
    free(errout);
}

#define WRITERS 8
#define LINES   500

static void *writer(void *arg)
{
    char tag[16];
    snprintf(tag, sizeof tag, "w%ld", (long)(intptr_t)arg);
    char pad[300];
    memset(pad, 'x', sizeof pad - 1);
    pad[sizeof pad - 1] = '\0';
    for (int i = 0; i < LINES; i++) {
        dbt_field f[] = {DBT_S("writer", tag), DBT_I("i", i), DBT_S("pad", pad),
                         DBT_S("end", "END")};
        dbt_log(DBT_LOG_INFO, "grant", f, 4);
    }
    return NULL;
}

static void concurrent_lines(dbt_log_format fmt)
{
    char path[] = "/tmp/dbt-log-XXXXXX";
    close(mkstemp(path));
    dbt_config c;
    open_log(&c, path, fmt);
    pthread_t t[WRITERS];
    for (long i = 0; i < WRITERS; i++)
        cr_assert_eq(pthread_create(&t[i], NULL, writer, (void *)i), 0);
    for (int i = 0; i < WRITERS; i++)
        pthread_join(t[i], NULL);
    dbt_log_close();

    /* Every (writer, i) exactly once, every line complete and parseable. */
    static bool seen[WRITERS][LINES];
    memset(seen, 0, sizeof seen);
    char *text = read_all(path);
    int lines = 0, intact = 0;
    for (char *l = text; *l;) {
        char *nl = strchr(l, '\n');
        cr_assert_not_null(nl, "the last line has no newline");
        char save = nl[1];
        nl[1] = '\0';
        lines++;
        char w[16], i[16], pad[400], end[8];
        bool ok = fmt == DBT_FMT_JSON
                      ? json_line(l, "writer", w, sizeof w) && json_line(l, "i", i, sizeof i) &&
                            json_line(l, "pad", pad, sizeof pad) &&
                            json_line(l, "end", end, sizeof end)
                      : logfmt_get(l, "writer", w, sizeof w) && logfmt_get(l, "i", i, sizeof i) &&
                            logfmt_get(l, "pad", pad, sizeof pad) &&
                            logfmt_get(l, "end", end, sizeof end);
        int wi = atoi(w + 1), ii = atoi(i);
        if (ok && strlen(pad) == 299 && strcmp(end, "END") == 0 && wi >= 0 && wi < WRITERS &&
            ii >= 0 && ii < LINES && !seen[wi][ii]) {
            seen[wi][ii] = true;
            intact++;
        }
        nl[1] = save;
        l = nl + 1;
    }
    cr_expect_eq(lines, WRITERS * LINES);
    cr_expect_eq(intact, WRITERS * LINES);
    free(text);
    unlink(path);
    dbt_config_free(&c);
}

Test(log_file, concurrent_logfmt_lines_never_interleave)
{
    concurrent_lines(DBT_FMT_LOGFMT);
}

Test(log_file, concurrent_json_lines_never_interleave)
{
    concurrent_lines(DBT_FMT_JSON);
}

/* ---- redaction ---- */

static const char *redact_url(const char *in)
{
    static char out[512];
    dbt_redact_url(in, out, sizeof out);
    return out;
}

static const char *redact_ci(const char *in)
{
    static char out[512];
    dbt_redact_conninfo(in, out, sizeof out);
    return out;
}

Test(redact, urls)
{
    cr_expect_str_eq(redact_url("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
    cr_expect_str_eq(redact_url("redis://:secret@h"), "redis://:***@h");
    cr_expect_str_eq(redact_url("redis://:se@cret@h/2"), "redis://:***@h/2");
    /* As the parser reads it: the last '@' ends the userinfo, '/' and all. */
    cr_expect_str_eq(redact_url("redis://app:s3cr/et@10.0.0.5:6379/0"),
                     "redis://app:***@10.0.0.5:6379/0");
    cr_expect_str_eq(redact_url("redis://:se/cr@t@h:x"), "redis://:***@h:***");
    cr_expect_str_eq(redact_url("redis://lonesecret@h"), "redis://***@h");
    cr_expect_str_eq(redact_url("redis://h:6379"), "redis://h:6379");
    cr_expect_str_eq(redact_url("unix:///run/r.sock"), "unix:///run/r.sock");
    cr_expect_str_eq(redact_url("redis://[::1]:6379/0"), "redis://[::1]:6379/0");
    cr_expect_str_eq(redact_url("redis-sentinel://app:pw@a:1,b:2/mm/1"),
                     "redis-sentinel://app:***@a:1,b:2/mm/1");
    cr_expect_str_eq(redact_url("unix:///run/r:1.sock?db=2"), "unix:///run/r:1.sock?db=2");
    cr_expect_str_eq(redact_url("unix:/run/r.sock"), "unix:/run/r.sock");
    /* Not a URL: nothing tells where a password may be in it. */
    cr_expect_str_eq(redact_url("not a url: x@y"), "***");
    cr_expect_str_eq(redact_url(""), "");
}

/* Malformed URLs, where a password stands where the parser reads none (issue 29: the value of
 * DBTHROTTLE_REDIS_URL='redis://:S3cret' was echoed whole in every message). */
Test(redact, a_password_in_a_url_without_its_at_is_masked)
{
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"redis://:S3cret", "redis://:***"},
        {"redis://user:S3cret", "redis://user:***"},
        {"rediss://:S3cret/", "rediss://:***"},
        {"rediss://:S3/cret", "rediss://:***"},
        {"redis-sentinel://:S3cret", "redis-sentinel://:***"},
        {"redis-sentinel://a:1,:S3cret,b/mm", "redis-sentinel://a:1,:***"},
        {"redis-cluster://a:1,b:S3cret", "redis-cluster://a:1,b:***"},
        {"REDIS://:S3cret", "REDIS://:***"},
        {"Rediss://u:S3cret@h", "Rediss://u:***@h"},
        {"unix://:S3cret@", "unix://:***@"},
        {"unix://:S3cret", "unix://:***"},
        {"redis://h:6379/0?password=S3cret", "redis://h:6379/0?***"},
        {"redis://h?auth=S3cret&db=1", "redis://h?***"},
        {"unix:///r.sock?password=S3cret", "unix:///r.sock?***"},
        {"redis://:pw@h:S3cret", "redis://:***@h:***"},
        {"redis://h:70000", "redis://h:70000"}, /* a bad port, shown in its message */
        {"redis://h:000123", "redis://h:000123"},
        {"redis://h:123456", "redis://h:***"},
        {"redis://h:", "redis://h:***"},
        {"redis://[S3cret", "redis://***"},
        {"redis://[::1]:S3cret", "redis://[::1]:***"},
        {"redis://[a b]", "redis://***"},
        {"redis:/:S3cret@h", "***"},
        {"redis:S3cret", "***"},
        {"S3cret", "***"},
        {":S3cret", "***"},
        {"re dis://:S3cret", "***"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        cr_expect_str_eq(redact_url(cases[i].in), cases[i].out, "%s", cases[i].in);
}

/* What strlen + DBT_REDACT_ROOM must hold: a masked empty password and a masked empty port. */
Test(redact, the_room_promised_is_enough)
{
    const char *in = "redis://:@h:";
    char out[64];
    dbt_redact_url(in, out, sizeof out);
    cr_expect_str_eq(out, "redis://:***@h:***");
    cr_expect_leq(strlen(out) + 1, strlen(in) + DBT_REDACT_ROOM);
}

Test(redact, truncation_never_overflows_or_leaks)
{
    const char *in = "redis://user:secretsecret@host.example:6379/0";
    for (size_t cap = 1; cap < strlen(in) + 4; cap++) {
        char *out = malloc(cap); /* exact size: ASan catches any byte past it */
        dbt_redact_url(in, out, cap);
        cr_assert_lt(strlen(out), cap);
        cr_assert(strstr(out, "secret") == NULL, "cap %zu: %s", cap, out);
        dbt_redact_conninfo("host=x password=secretsecret dbname=y", out, cap);
        cr_assert_lt(strlen(out), cap);
        cr_assert(strstr(out, "secret") == NULL, "cap %zu: %s", cap, out);
        free(out);
    }
    dbt_redact_url(in, NULL, 0); /* cap 0 writes nothing */
}

Test(redact, conninfo_keywords)
{
    cr_expect_str_eq(redact_ci("host=db password=s3cret dbname=app"),
                     "host=db password=*** dbname=app");
    cr_expect_str_eq(redact_ci("host=db PASSWORD = 'se cr\\'et' user=x"),
                     "host=db PASSWORD = *** user=x");
    cr_expect_str_eq(redact_ci("PassWord='a\\\\' user=x"), "PassWord=*** user=x");
    cr_expect_str_eq(redact_ci("password=se\\ cret dbname=y"), "password=*** dbname=y");
    cr_expect_str_eq(redact_ci("host=x junk password=secret"), "host=x junk password=***");
    cr_expect_str_eq(redact_ci("password='unterminated secret"), "password=***");
    cr_expect_str_eq(redact_ci("passfile=/p user=x"), "passfile=/p user=x");
    cr_expect_str_eq(redact_ci("dbname=app"), "dbname=app");
    cr_expect_str_eq(redact_ci("  host=a\tpassword=b  "), "  host=a\tpassword=***  ");
    /* libpq expands a dbname holding a connection string: its password is masked too. */
    cr_expect_str_eq(redact_ci("dbname='host=h password=secret' user=u"),
                     "dbname='host=h password=***' user=u");
    cr_expect_str_eq(redact_ci("dbname=postgresql://u:secret@h/db"),
                     "dbname=postgresql://u:***@h/db");
}

Test(redact, conninfo_uris)
{
    cr_expect_str_eq(redact_ci("postgresql://u:s3cret@db:5432/app?sslmode=require&password=two"),
                     "postgresql://u:***@db:5432/app?sslmode=require&password=***");
    cr_expect_str_eq(redact_ci("postgres://u:p@ss@db/app"), "postgres://u:***@db/app");
    cr_expect_str_eq(redact_ci("postgres://u:p/ss@db/app"), "postgres://u:***@db/app");
    cr_expect_str_eq(redact_ci("postgres://u@db/app"), "postgres://u@db/app");
    cr_expect_str_eq(redact_ci("postgres://db/app"), "postgres://db/app");
    cr_expect_str_eq(redact_ci("POSTGRESQL://u:x@h"), "POSTGRESQL://u:***@h");
    cr_expect_str_eq(redact_ci("postgresql:///app?PASSWORD=x&user=me@corp"),
                     "postgresql:///app?PASSWORD=***&user=me@corp");
    cr_expect_str_eq(redact_ci("postgresql://h/db?pass%77ord=secret"),
                     "postgresql://h/db?pass%77ord=***");
    cr_expect_str_eq(redact_ci("postgresql://h/db?dbname=postgres://a:secret@b"),
                     "postgresql://h/db?dbname=postgres://a:***@b");
    /* libpq reads the userinfo up to the first '@' before a '/': a '?' may be in the password
     * (found by fuzzing). */
    cr_expect_str_eq(redact_ci("postgresql://u:se?cret@h/db"), "postgresql://u:***@h/db");
    cr_expect_str_eq(redact_ci("postgresql://u:se?cr@et@h/db?password=x"),
                     "postgresql://u:***@h/db?password=***");
    cr_expect_str_eq(redact_ci("postgresql://h/db?dbname=host%3Dh%20password%3Dsecret"),
                     "postgresql://h/db?dbname=***");
}

Test(redact, nested_dbname_with_escapes_is_masked_whole)
{
    /* libpq unescapes a dbname before it reads it as a connection string (found by fuzzing). */
    cr_expect_str_eq(redact_ci("dbname=host=h\\ password=secret user=u"), "dbname=*** user=u");
    cr_expect_str_eq(redact_ci("dbname='host=h password=\\'se cret\\'' user=u"),
                     "dbname='***' user=u");
}

Test(redact, deep_nesting_is_masked_not_followed)
{
    char in[4096] = "";
    for (int i = 0; i < 400; i++)
        strcat(in, "dbname=");
    strcat(in, "'password=secret'");
    char *out = malloc(8192);
    dbt_redact_conninfo(in, out, 8192);
    cr_expect(strstr(out, "secret") == NULL);
    free(out);
}
