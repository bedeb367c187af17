/* keys.c - Redis key names of a pool. */
#include "keys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_plain(unsigned char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '_' || c == ':' || c == '/' || c == '@' || c == '-';
}

char *dbt_key_escape(const char *text)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        n += is_plain(*p) ? 1 : 3;
    char *out = malloc(n + 1);
    if (!out)
        return NULL;
    char *o = out;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (is_plain(*p)) {
            *o++ = (char)*p;
        } else {
            *o++ = '%';
            *o++ = hex[*p >> 4];
            *o++ = hex[*p & 15];
        }
    }
    *o = '\0';
    return out;
}

static char *join(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    char *s = malloc(la + lb + 1);
    if (s) {
        memcpy(s, a, la);
        memcpy(s + la, b, lb + 1);
    }
    return s;
}

bool dbt_keys_init(dbt_keys *k, const char *prefix, const char *pool)
{
    static const char *const suffix[] = DBT_KEY_SUFFIXES; /* lua/protocol/keys.def */
    _Static_assert(sizeof suffix / sizeof *suffix == DBT_NKEYS, "a name for each key");
    memset(k, 0, sizeof *k);
    char *ep = dbt_key_escape(prefix), *en = dbt_key_escape(pool);
    if (ep && en) {
        size_t len = strlen(ep) + strlen(en) + 3;
        k->base = malloc(len);
        if (k->base)
            snprintf(k->base, len, "%s{%s}", ep, en);
    }
    free(ep);
    free(en);
    if (!k->base)
        return false;
    k->wake_prefix = join(k->base, ":wake:");
    k->procs = join(k->base, ":procs");
    k->procinfo = join(k->base, ":procinfo");
    k->settings = join(k->base, ":settings");
    if (!k->wake_prefix || !k->procs || !k->procinfo || !k->settings)
        goto fail;
    for (int kind = 0; kind < DBT_NKINDS; kind++) {
        char letter[4];
        snprintf(letter, sizeof letter, ":%s", dbt_kind_letter((dbt_kind)kind));
        char *kb = join(k->base, letter);
        if (!kb)
            goto fail;
        for (int i = 0; i < DBT_NKEYS; i++) {
            k->keys[kind][i] = join(kb, suffix[i]);
            if (!k->keys[kind][i]) {
                free(kb);
                goto fail;
            }
        }
        free(kb);
    }
    return true;
fail:
    dbt_keys_free(k);
    return false;
}

void dbt_keys_free(dbt_keys *k)
{
    free(k->base);
    free(k->wake_prefix);
    free(k->procs);
    free(k->procinfo);
    free(k->settings);
    for (int kind = 0; kind < DBT_NKINDS; kind++)
        for (int i = 0; i < DBT_NKEYS; i++)
            free(k->keys[kind][i]);
    memset(k, 0, sizeof *k);
}

/* lua/protocol/keys.def's kinds, in order */
static const char *const kind_letters[] = DBT_KIND_LETTERS;
static const char *const kind_words[] = DBT_KIND_WORDS;
_Static_assert(sizeof kind_letters / sizeof *kind_letters == DBT_NKINDS &&
                   sizeof kind_words / sizeof *kind_words == DBT_NKINDS,
               "a letter and a word per kind");

const char *dbt_kind_name(dbt_kind kind)
{
    return (unsigned)kind < DBT_NKINDS ? kind_words[kind] : "?";
}

const char *dbt_kind_letter(dbt_kind kind)
{
    return (unsigned)kind < DBT_NKINDS ? kind_letters[kind] : "?";
}

bool dbt_kind_of_letter(char letter, dbt_kind *out)
{
    for (int k = 0; k < DBT_NKINDS; k++)
        if (letter && kind_letters[k][0] == letter) {
            *out = (dbt_kind)k;
            return true;
        }
    return false;
}
