/* redis_errors.c - telling a configuration error from an outage by what Redis (or the resolver)
 * said. Messages are parsed by their structure, never searched: a needle found anywhere could
 * match the host name of the "redis HOST:PORT" prefix or the text a Lua error quotes. */
#include "redis_errors.h"

#include <stdio.h>
#include <string.h>

typedef enum {
    CODE,           /* a Redis error reply whose code (the word that starts it) is `text` */
    REPLY,          /* a Redis error reply that starts with `text` (ERR is too general a code) */
    HIREDIS,        /* hiredis' (or the resolver's) own message: exactly `text` */
    HIREDIS_PREFIX, /* hiredis' own message, which starts with `text` and goes on with data */
    OWN,            /* a message dbt_redis_connect wrote itself (no prefix): starts with `text` */
} match_kind;

typedef struct {
    match_kind kind;
    const char *text;
    bool first_connect_only; /* permanent only while the pool has never reached Redis */
    const char *why;         /* the cause, and the setting or server setting to fix; NULL: the
                              * message itself says it */
} permanent_error;

static const permanent_error permanent[] = {
    {CODE, "WRONGPASS", false,
     "Redis refused the user or password (WRONGPASS): fix the credentials in "
     "DBTHROTTLE_REDIS_URL (or DBTHROTTLE_REDIS_PASSWORD_FILE)"},
    /* Redis before 6 */
    {REPLY, "ERR invalid password", false,
     "Redis refused the password: fix it in DBTHROTTLE_REDIS_URL (or "
     "DBTHROTTLE_REDIS_PASSWORD_FILE)"},
    {CODE, "NOAUTH", false,
     "Redis requires a password and DBTHROTTLE_REDIS_URL gives none (NOAUTH): add it, "
     "redis://[user]:password@host, or in a file named by DBTHROTTLE_REDIS_PASSWORD_FILE"},
    {REPLY, "ERR AUTH <password> called without any password configured", false,
     "DBTHROTTLE_REDIS_URL gives a password but Redis has none configured: remove it from "
     "DBTHROTTLE_REDIS_URL or set one in Redis"},
    /* Redis before 6 */
    {REPLY, "ERR Client sent AUTH, but no password is set", false,
     "DBTHROTTLE_REDIS_URL gives a password but Redis has none configured: remove it from "
     "DBTHROTTLE_REDIS_URL or set one in Redis"},
    {CODE, "NOPERM", false,
     "the Redis user of DBTHROTTLE_REDIS_URL lacks a permission the scripts need (NOPERM): "
     "grant the worker ACL of docs/operations.md"},
    {REPLY, "ERR The user executing the script can't", false,
     "the Redis user of DBTHROTTLE_REDIS_URL may not run a command or key the scripts use: "
     "grant the worker ACL of docs/operations.md"},
    {REPLY, "ERR DB index is out of range", false,
     "the database number in DBTHROTTLE_REDIS_URL does not exist in Redis (its `databases` "
     "setting): fix DBTHROTTLE_REDIS_URL"},
    {REPLY, "ERR invalid DB index", false,
     "the database number in DBTHROTTLE_REDIS_URL is not valid in this Redis: fix "
     "DBTHROTTLE_REDIS_URL"},
    {REPLY, "ERR SELECT is not allowed in cluster mode", false,
     "DBTHROTTLE_REDIS_URL selects a database but Redis runs in cluster mode, which only has "
     "database 0: remove the /N from DBTHROTTLE_REDIS_URL"},
    /* Redis Cluster's redirections (MOVED, ASK, TRYAGAIN, CLUSTERDOWN) are followed
     * (cluster.c): transient. A pool's keys all share its {pool} hash tag, so CROSSSLOT is a
     * proxy or server that hashes keys otherwise, which no retry changes. */
    {CODE, "CROSSSLOT", false,
     "Redis of DBTHROTTLE_REDIS_URL spreads a script's keys over cluster slots (CROSSSLOT) "
     "although they share one hash tag: point DBTHROTTLE_REDIS_URL at the cluster itself "
     "(redis-cluster://) rather than at a proxy that hashes keys otherwise"},
    /* Every dbthrottle key has one type; another type under its name is another program's. */
    {CODE, "WRONGTYPE", false,
     "a key under DBTHROTTLE_KEY_PREFIX holds another type of value (WRONGTYPE): the prefix "
     "collides with another application's keys; set DBTHROTTLE_KEY_PREFIX to a prefix of its "
     "own"},
    {REPLY, "ERR unknown command", false,
     "the server of DBTHROTTLE_REDIS_URL is not Redis, or too old for the scripts (Redis 7.0 "
     "or newer): fix DBTHROTTLE_REDIS_URL or upgrade"},
    /* getaddrinfo's EAI_NONAME and EAI_NODATA, which hiredis passes on as gai_strerror says
     * them (EAI_AGAIN, "Temporary failure in name resolution", is a resolver that may come
     * back: transient). A name that resolved once in this process and no longer does is a
     * restart behind Docker's or Kubernetes' DNS (NXDOMAIN while the container is away): an
     * outage, not a typo. */
    {HIREDIS, "Name or service not known", true,
     "the host name in DBTHROTTLE_REDIS_URL does not resolve: fix DBTHROTTLE_REDIS_URL"},
    {HIREDIS, "No address associated with hostname", true,
     "the host name in DBTHROTTLE_REDIS_URL has no address: fix DBTHROTTLE_REDIS_URL"},
    {HIREDIS_PREFIX, "Protocol error, got ", false,
     "the server of DBTHROTTLE_REDIS_URL does not speak the Redis protocol: fix "
     "DBTHROTTLE_REDIS_URL"},
    /* rediss://: transport.c's words for a certificate that does not verify, or a server that
     * refuses ours. Each stays wrong until a certificate or a setting changes. (A TLS connection
     * that closes, resets or times out keeps the plain socket's words: an outage.) */
    {HIREDIS_PREFIX, "TLS: certificate verify failed: unable to get local issuer certificate",
     false,
     "TLS: certificate verify failed: unable to get local issuer certificate: Redis' certificate "
     "is not signed by a CA we trust: set DBTHROTTLE_REDIS_CA to the CA that signed it"},
    {HIREDIS_PREFIX, "TLS: certificate verify failed: self-signed certificate", false,
     "TLS: certificate verify failed: self-signed certificate: Redis' certificate is not signed "
     "by a CA we trust: set DBTHROTTLE_REDIS_CA to the CA that signed it"},
    {HIREDIS_PREFIX, "TLS: certificate verify failed: certificate has expired", false,
     "TLS: certificate verify failed: certificate has expired: renew Redis' certificate "
     "(tls-cert-file), signed by the CA of DBTHROTTLE_REDIS_CA"},
    {HIREDIS_PREFIX, "TLS: certificate verify failed: certificate is not yet valid", false,
     "TLS: certificate verify failed: certificate is not yet valid: check Redis' certificate "
     "(tls-cert-file) and this host's clock"},
    {HIREDIS_PREFIX, "TLS: certificate verify failed: hostname mismatch", false,
     "TLS: certificate verify failed: hostname mismatch: Redis' certificate is not for the host "
     "of DBTHROTTLE_REDIS_URL: use a name the certificate gives, or fix tls-cert-file in Redis"},
    {HIREDIS_PREFIX, "TLS: certificate verify failed: IP address mismatch", false,
     "TLS: certificate verify failed: IP address mismatch: Redis' certificate is not for the "
     "address of DBTHROTTLE_REDIS_URL: use a name or address the certificate gives, or fix "
     "tls-cert-file in Redis"},
    {HIREDIS_PREFIX, "TLS: certificate verify failed: ", false,
     "TLS: Redis' certificate does not verify: check DBTHROTTLE_REDIS_CA and Redis' "
     "tls-cert-file"},
    {HIREDIS_PREFIX, "TLS: the server requires a client certificate", false,
     "TLS: Redis requires a client certificate (tls-auth-clients): set DBTHROTTLE_REDIS_CERT "
     "and DBTHROTTLE_REDIS_KEY"},
    {HIREDIS_PREFIX, "TLS: the server refused our client certificate", false,
     "TLS: Redis refused our client certificate: set DBTHROTTLE_REDIS_CERT and "
     "DBTHROTTLE_REDIS_KEY to a certificate signed by a CA of Redis' tls-ca-cert-file"},
    {HIREDIS_PREFIX, "TLS: the server does not speak TLS on this port", false,
     "TLS: the server of DBTHROTTLE_REDIS_URL does not speak TLS on that port: use redis:// or "
     "Redis' tls-port"},
    /* redis:// at a TLS-only port: transport.c's words once a TLS record was answered. */
    {HIREDIS_PREFIX, "TLS: the server speaks TLS on this port", false,
     "TLS: the server of DBTHROTTLE_REDIS_URL speaks TLS on that port: use rediss:// (and "
     "DBTHROTTLE_REDIS_CA for the CA of its certificate), or Redis' plain port"},
    {HIREDIS_PREFIX, "TLS: cannot ", false, NULL}, /* a CA, certificate or key not loaded */
    {HIREDIS_PREFIX, "TLS: DBTHROTTLE_REDIS_CERT and DBTHROTTLE_REDIS_KEY", false, NULL},
    /* sentinel.c's configuration errors: the master name unknown to every sentinel that
     * answered, the sentinels' credentials refused (its message names the setting). */
    {OWN, "Redis Sentinel ", false, NULL},
    /* What dbt_redis_connect found in INFO (its message says it all). */
    {OWN, "Redis' maxmemory-policy is ", false, NULL},
    {OWN, "Redis ", false, NULL}, /* "Redis V is older than 7.0, ..." (checked below) */
};

/* After a prefix that dbt_redis_* adds: "redis: ", "redis HOST:PORT: " or "redis unix:PATH: "
 * (redis_conn.c's set_err; a unix path with ": " in it is not parsed), then at connect the step
 * that failed, "AUTH failed: " or "SELECT N failed: ", and the step's own "redis: " (a connect
 * wraps the message of the command it ran). What follows is a Redis error reply, or hiredis' own
 * message. NULL when err has no such prefix. */
const char *dbt_redis_error_reply(const char *err)
{
    if (!err || strncmp(err, "redis", 5) != 0)
        return NULL;
    const char *p = err + 5;
    if (*p == ' ')
        p = strstr(p, ": ");
    if (!p || p[0] != ':' || p[1] != ' ')
        return NULL;
    p += 2;
    if (strncmp(p, "AUTH failed: ", 13) == 0) {
        p += 13;
    } else if (strncmp(p, "SELECT ", 7) == 0) {
        const char *q = p + 7;
        while (*q >= '0' && *q <= '9')
            q++;
        if (q > p + 7 && strncmp(q, " failed: ", 9) == 0)
            p = q + 9;
    }
    /* The step's own message, as read_reply wrote it, has its "redis: " too. */
    if (strncmp(p, "redis: ", 7) == 0)
        p += 7;
    return p;
}

/* The code that starts a Redis error reply: capitals up to a space or the end (0: none). */
static size_t code_len(const char *reply)
{
    size_t n = 0;
    while (reply[n] >= 'A' && reply[n] <= 'Z')
        n++;
    return n >= 2 && (reply[n] == ' ' || reply[n] == '\0') ? n : 0;
}

static bool matches(const permanent_error *e, const char *err, const char *reply)
{
    size_t n = strlen(e->text);
    switch (e->kind) {
    case CODE:
        return reply && code_len(reply) == n && strncmp(reply, e->text, n) == 0;
    case REPLY:
        return reply && strncmp(reply, e->text, n) == 0;
    case HIREDIS:
        return reply && strcmp(reply, e->text) == 0;
    case HIREDIS_PREFIX:
        return reply && strncmp(reply, e->text, n) == 0;
    case OWN:
        if (strncmp(err, e->text, n) != 0)
            return false;
        return strcmp(e->text, "Redis ") != 0 || strstr(err + n, " is older than 7.0") != NULL;
    }
    return false;
}

bool dbt_redis_error_permanent(const char *err, bool reached_before, char *why, size_t cap)
{
    if (!err)
        return false;
    const char *reply = dbt_redis_error_reply(err);
    for (size_t i = 0; i < sizeof permanent / sizeof *permanent; i++) {
        const permanent_error *e = &permanent[i];
        if (!matches(e, err, reply) || (e->first_connect_only && reached_before))
            continue;
        snprintf(why, cap, "%s", e->why ? e->why : err);
        return true;
    }
    return false;
}
