/* text.c - names as an operator sees them: a pool name is any bytes (the library takes whatever
 * DBTHROTTLE_POOL holds), but a terminal, a JSON document and a Prometheus label want UTF-8. */
#include "cli.h"

#include <string.h>

int cli_utf8_len(const unsigned char *s)
{
    int n = s[0] < 0x80             ? 1
            : (s[0] & 0xE0) == 0xC0 ? 2
            : (s[0] & 0xF0) == 0xE0 ? 3
            : (s[0] & 0xF8) == 0xF0 ? 4
                                    : 0;
    if (n == 2 && s[0] < 0xC2)
        return 0; /* an overlong form of an ASCII byte */
    for (int i = 1; i < n; i++)
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
        } else if (quoted && (*p == '"' || *p == '\\')) {
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
