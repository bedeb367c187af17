/* rediss:// failures: a certificate that does not verify or a client certificate Redis wants
 * is a configuration error naming the setting that fixes it; a TLS connection that breaks is an
 * outage. The messages are transport.c's, as dbt_redis_connect prefixes them. */
#include "config.h"
#include "config_load.h"
#include "redis_errors.h"

#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

Test(tls_errors, certificates_that_do_not_verify_are_permanent_and_name_the_fix)
{
    struct {
        const char *err, *cause, *fix;
    } cases[] = {
        {"redis 127.0.0.1:6380: TLS: certificate verify failed: unable to get local issuer "
         "certificate",
         "not signed by a CA we trust", "DBTHROTTLE_REDIS_CA"},
        {"redis h:6380: TLS: certificate verify failed: self-signed certificate in certificate "
         "chain",
         "not signed by a CA we trust", "DBTHROTTLE_REDIS_CA"},
        {"redis 127.0.0.1:6380: TLS: certificate verify failed: certificate has expired",
         "certificate has expired", "DBTHROTTLE_REDIS_CA"},
        {"redis localhost:6380: TLS: certificate verify failed: hostname mismatch",
         "hostname mismatch", "DBTHROTTLE_REDIS_URL"},
        {"redis 127.0.0.1:6380: TLS: certificate verify failed: IP address mismatch",
         "IP address mismatch", "DBTHROTTLE_REDIS_URL"},
        {"redis 127.0.0.1:6380: TLS: certificate verify failed: certificate revoked",
         "does not verify", "DBTHROTTLE_REDIS_CA"},
        /* TLS 1.3: the server's alert comes with the first reply, read by the connect's INFO */
        {"redis 127.0.0.1:6380: redis: TLS: the server requires a client certificate (alert "
         "certificate required)",
         "requires a client certificate", "DBTHROTTLE_REDIS_CERT"},
        {"redis 127.0.0.1:6380: AUTH failed: redis: TLS: the server refused our client "
         "certificate (tlsv1 alert unknown ca)",
         "refused our client certificate", "DBTHROTTLE_REDIS_KEY"},
        {"redis 127.0.0.1:6379: TLS: the server does not speak TLS on this port (wrong version "
         "number)",
         "does not speak TLS", "redis://"},
        {"redis 127.0.0.1:6380: TLS: cannot load DBTHROTTLE_REDIS_CA /nope/ca.pem: no such file",
         "cannot load", "DBTHROTTLE_REDIS_CA"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[DBT_MISCONFIG_LEN] = "";
        cr_expect(dbt_redis_error_permanent(cases[i].err, true, why, sizeof why), "transient: %s",
                  cases[i].err);
        cr_expect(strstr(why, cases[i].cause) != NULL, "%s -> %s", cases[i].err, why);
        cr_expect(strstr(why, cases[i].fix) != NULL, "%s -> %s", cases[i].err, why);
        cr_expect(strlen(why) < sizeof why - 1, "cut: %s", why);
    }
}

Test(tls_errors, a_tls_connection_that_breaks_is_an_outage)
{
    const char *cases[] = {
        "redis 127.0.0.1:6380: Connection refused",
        "redis 127.0.0.1:6380: TLS: handshake timed out",
        "redis: Server closed the connection",
        "redis: timed out waiting for a reply",
        "redis: timed out sending a command",
        "redis: Connection reset by peer",
        "redis: TLS: decryption failed or bad record mac",
        /* a host name inside the address never counts */
        "redis TLS: certificate verify failed:6380: Connection refused",
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char why[DBT_MISCONFIG_LEN] = "untouched";
        cr_expect(!dbt_redis_error_permanent(cases[i], true, why, sizeof why), "permanent: %s",
                  cases[i]);
        cr_expect_str_eq(why, "untouched");
    }
}

Test(tls_errors, a_client_certificate_needs_its_key)
{
    char *env[] = {"DBTHROTTLE_REDIS_URL=rediss://127.0.0.1:6380",
                   "DBTHROTTLE_REDIS_CERT=/etc/dbt/client.pem", NULL};
    dbt_config c;
    char err[DBT_ERRLEN] = "";
    cr_expect(!test_config_load(&c, env, err));
    cr_expect(strstr(err, "DBTHROTTLE_REDIS_CERT is set without DBTHROTTLE_REDIS_KEY") == err, "%s",
              err);
    cr_expect(!dbt_config_value_ok(&c, "DBTHROTTLE_REDIS_CERT"));
    cr_expect(c.redis.tls);
    dbt_config_free(&c);
    char *both[] = {
        "DBTHROTTLE_REDIS_URL=rediss://127.0.0.1:6380", "DBTHROTTLE_REDIS_CERT=/etc/dbt/client.pem",
        "DBTHROTTLE_REDIS_KEY=/etc/dbt/client.key", "DBTHROTTLE_REDIS_CA=/etc/dbt/ca", NULL};
    cr_expect(test_config_load(&c, both, err), "%s", err);
    cr_expect_str_eq(c.redis_ca, "/etc/dbt/ca");
    cr_expect_str_eq(c.redis_key, "/etc/dbt/client.key");
    dbt_config_free(&c);
}
