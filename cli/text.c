/* text.c - names and numbers as an operator sees them: a pool name is any bytes (the library takes
 * whatever DBTHROTTLE_POOL holds), but a terminal, a JSON document and a Prometheus label want
 * UTF-8; a sample value is printed without float noise. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* RFC 3629 section 4 exactly: no lead byte C0, C1 or F5-FF, no overlong form (E0 80-9F, F0
 * 80-8F), no surrogate (ED A0-BF), nothing above U+10FFFF (F4 90-BF). */
int cli_utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80)
        return 1;
    int n;
    unsigned char lo = 0x80, hi = 0xBF; /* the range of the second byte */
    if (s[0] >= 0xC2 && s[0] <= 0xDF)
        n = 2;
    else if (s[0] >= 0xE0 && s[0] <= 0xEF)
        n = 3, lo = s[0] == 0xE0 ? 0xA0 : 0x80, hi = s[0] == 0xED ? 0x9F : 0xBF;
    else if (s[0] >= 0xF0 && s[0] <= 0xF4)
        n = 4, lo = s[0] == 0xF0 ? 0x90 : 0x80, hi = s[0] == 0xF4 ? 0x8F : 0xBF;
    else
        return 0;
    if (s[1] < lo || s[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if ((s[i] & 0xC0) != 0x80)
            return 0;
    return n;
}

bool cli_utf8_valid(const char *s)
{
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = cli_utf8_len(p);
        if (n == 0)
            return false;
        p += n;
    }
    return true;
}

void cli_escape_name(const char *text, size_t max, bool quoted, char *out, size_t cap)
{
    if (cap < 16) {
        if (cap)
            out[0] = '\0';
        return;
    }
    /* Room for one escape (4 bytes) or sequence, "...", the closing quote and the NUL. */
    size_t o = 0, room = cap - 9;
    if (quoted)
        out[o++] = '"';
    for (const unsigned char *p = (const unsigned char *)text; *p;) {
        int n = cli_utf8_len(p);
        if ((size_t)(p - (const unsigned char *)text) >= max || o + 4 > room) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (*p == '\n' || *p == '\t' || *p == '\r') {
            out[o++] = '\\';
            out[o++] = *p == '\n' ? 'n' : *p == '\t' ? 't' : 'r';
        } else if (n == 0 || *p < 0x20 || *p == 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", *p);
            n = 1;
        } else if (*p == '\\' || (quoted && *p == '"')) {
            /* A backslash doubled, quoted or not: \xNN then only ever stands for a byte, and
             * a name of the four characters a\xff does not show as the byte name a<ff>. */
            out[o++] = '\\';
            out[o++] = (char)*p;
        } else {
            memcpy(out + o, p, (size_t)n);
            o += (size_t)n;
        }
        p += n;
    }
    if (quoted)
        out[o++] = '"';
    out[o] = '\0';
}

void cli_hex(const char *text, char *out, size_t cap)
{
    static const char digits[] = "0123456789abcdef";
    size_t o = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p && o + 3 <= cap; p++) {
        out[o++] = digits[*p >> 4];
        out[o++] = digits[*p & 15];
    }
    if (cap)
        out[o < cap ? o : cap - 1] = '\0';
}

void cli_prom_number(double v, char *out, size_t cap)
{
    if (v != v) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (v > 1e308 || v < -1e308) {
        snprintf(out, cap, "%sInf", v > 0 ? "+" : "-");
        return;
    }
    /* Counters are integers: no exponent up to 2^53, where doubles stop being exact. */
    if (v > -9007199254740992.0 && v < 9007199254740992.0 && (double)(long long)v == v) {
        snprintf(out, cap, "%lld", (long long)v);
        return;
    }
    /* Else the shortest text that reads back as the same double: 1.061, not
     * 1.0609999999999999 (what %.17g prints for 1061 / 1000.0). */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(out, cap, "%.*g", prec, v);
        if (strtod(out, NULL) == v)
            return;
    }
}

void cli_json_str(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p;) {
        int n = cli_utf8_len(p);
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else if (n > 0)
            fwrite(p, 1, (size_t)n, out);
        else
            fputs("\\ufffd", out);
        p += n > 0 ? n : 1;
    }
    fputc('"', out);
}

void cli_put_padded(FILE *out, const char *s, int width)
{
    int cols = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        cols += (*p & 0xC0) != 0x80; /* not a continuation byte */
    fputs(s, out);
    for (; cols < width; cols++)
        fputc(' ', out);
}
