/* fuzz_values.c - libFuzzer target: the value parsers (durations, limits, booleans, Redis URLs,
 * exemption rules) and the redaction of URLs and conninfo strings. Besides not crashing, it
 * checks what they promise: a password the URL parser found never appears in the redacted URL
 * (judged where it occurs once in the input), and errors are single lines. */
#include "config.h"
#include "log.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    char *text = malloc(size);
    if (!text)
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    char err[DBT_ERRLEN] = "";
    bool ok = true;
    switch (data[0] % 6) {
    case 0: {
        int64_t ms;
        ok = dbt_parse_duration("DBTHROTTLE_LEASE", text, data[0] & 8, data[0] & 16, &ms, err);
        break;
    }
    case 1: {
        int n;
        ok = dbt_parse_limit("DBTHROTTLE_MAX_QUERIES", text, &n, err);
        if (ok && n < 0)
            abort();
        break;
    }
    case 2: {
        bool b;
        ok = dbt_parse_bool("DBTHROTTLE_LOG_QUERY", text, &b, err);
        break;
    }
    case 3: {
        dbt_redis_url u;
        memset(&u, 0, sizeof u);
        ok = dbt_parse_redis_url("DBTHROTTLE_REDIS_URL", text, &u, err);
        /* Only a password that occurs once in the input can be judged (text elsewhere in the
         * URL, a host "ho3cret" for the password "3cret", is not the password and stays), and
         * only on either side of the mask (the user "h:" and the mask make "h:***", which holds
         * the password "h:*"). The mask is the "***" right before the last '@', where the
         * userinfo ends: a user may hold "***" of its own. */
        /* And only a password spelt as it is in the input: a percent-encoded one ("p%40ss") is
         * another text once decoded ("p@ss"), which may stand elsewhere, in the user "up@ss". */
        bool verbatim = !strchr(text, '%');
        const char *first =
            ok && verbatim && u.password && *u.password ? strstr(text, u.password) : NULL;
        if (first && !strstr(first + 1, u.password)) {
            char red[4096];
            dbt_redact_url(text, red, sizeof red);
            char *at = strrchr(red, '@');
            char *mask = at && at - red >= 3 ? at - 3 : NULL;
            if (!mask || memcmp(mask, "***", 3) != 0)
                abort();  /* a password, and nothing masked where it was */
            *mask = '\0'; /* what lies wholly left or right of the mask must not hold it */
            if (strstr(red, u.password) || strstr(mask + 3, u.password))
                abort(); /* the password survived redaction */
        }
        if (!ok && u.password)
            abort(); /* a refused URL must leave *out untouched */
        dbt_redis_url_free(&u);
        break;
    }
    case 4: {
        dbt_exempt_rule rules[DBT_MAX_EXEMPT];
        int n = 0;
        ok = dbt_parse_exempt("DBTHROTTLE_EXEMPT", text, rules, &n, err);
        if (ok)
            dbt_exempt_free(rules, n);
        break;
    }
    case 5: {
        char out[4096];
        dbt_redact_conninfo(text, out, sizeof out);
        dbt_redact_url(text, out, sizeof out);
        break;
    }
    }
    if (!ok && (err[0] == '\0' || strchr(err, '\n')))
        abort(); /* a refusal says why, in one line */
    free(text);
    return 0;
}
