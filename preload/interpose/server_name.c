/* server_name.c - the name of the PostgreSQL server a connection reaches, however it was spelled.
 *
 * The default pool is "<server>/<dbname>". A pool named by the connection string's host as typed
 * split one database into as many limits as it had spellings (localhost, 127.0.0.1, the Unix
 * socket, a service file's name...): each spelling its own full limit. The server is therefore
 * named by where libpq goes, and where that is uncertain the name errs towards one limit for
 * more clients (too strict), never towards several limits for one server (no limit at all):
 *   - a Unix socket or a loopback address: "localhost:<port>". The socket and the loopback
 *     address beside it are one server. It carries no machine name: clients on many machines
 *     that reach one database through a local proxy, tunnel or sidecar (cloud-sql-proxy,
 *     PgBouncer beside each pod) share one limit, as they did when pools were named as typed;
 *   - a host name: resolved, and named by the lowest of all its addresses (IPv4 before IPv6), not
 *     by the one libpq happened to connect to: a round-robin name, a load balancer with an address
 *     per zone, a dual-stack host stay one pool. A name with any loopback address is local;
 *   - an address (hostaddr=, or a numeric host): itself, in canonical text ("10.1.2.3:5432",
 *     "[2001:db8::5]:5432").
 * The name is made from the connection's options (the first host of its list: the one libpq tries
 * first), the same before the socket opens (a connection permit) and after (a query permit), so
 * that one connection never names two pools. Resolutions are remembered for a minute, and the last
 * good one is used when the resolver fails meanwhile: a DNS hiccup must not move a connection to
 * another pool.
 *
 * What this cannot unify (docs/configuration.md, "Pools"): one server reached through addresses
 * the client cannot relate (NAT, a proxy, two of the database host's interfaces, its socket on the
 * database host and its network address elsewhere). DBTHROTTLE_POOL names the pool for those. */
#include "server_name.h"

#include "real.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define LOCAL_SERVER "localhost"

static bool is_loopback(int family, const void *addr)
{
    if (family == AF_INET)
        return (ntohl(((const struct in_addr *)addr)->s_addr) >> 24) == 127;
    const struct in6_addr *a6 = addr;
    if (IN6_IS_ADDR_LOOPBACK(a6))
        return true;
    if (IN6_IS_ADDR_V4MAPPED(a6))
        return a6->s6_addr[12] == 127;
    return false;
}

/* One address of a resolution, comparable: IPv4 before IPv6, then by bytes. */
typedef struct {
    int family;
    unsigned char bytes[sizeof(struct in6_addr)];
} address;

static int address_cmp(const address *a, const address *b)
{
    if (a->family != b->family)
        return a->family == AF_INET ? -1 : 1;
    return memcmp(a->bytes, b->bytes, a->family == AF_INET ? 4 : 16);
}

/* "<addr>:<port>", "[<addr6>]:<port>", or LOCAL_SERVER ":<port>" for a loopback address. */
static void name_address(const address *a, const char *port, char *out, size_t cap)
{
    char text[INET6_ADDRSTRLEN] = "?";
    if (is_loopback(a->family, a->bytes)) {
        snprintf(out, cap, "%s:%s", LOCAL_SERVER, port);
        return;
    }
    inet_ntop(a->family, a->bytes, text, sizeof text);
    snprintf(out, cap, a->family == AF_INET6 ? "[%s]:%s" : "%s:%s", text, port);
}

static bool parse_numeric(const char *text, address *a)
{
    memset(a, 0, sizeof *a);
    if (inet_pton(AF_INET, text, a->bytes) == 1)
        a->family = AF_INET;
    else if (inet_pton(AF_INET6, text, a->bytes) == 1)
        a->family = AF_INET6;
    return a->family != 0;
}

/* The address a host name stands for: a loopback one if it has any, else its lowest. */
static bool resolve(const char *host, address *out)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, NULL, &hints, &res) != 0)
        return false;
    bool found = false;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        address a = {.family = ai->ai_family};
        if (ai->ai_family == AF_INET)
            memcpy(a.bytes, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, 4);
        else if (ai->ai_family == AF_INET6)
            memcpy(a.bytes, &((struct sockaddr_in6 *)ai->ai_addr)->sin6_addr, 16);
        else
            continue;
        bool loop = is_loopback(a.family, a.bytes);
        if (!found || loop || (!is_loopback(out->family, out->bytes) && address_cmp(&a, out) < 0))
            *out = a;
        found = true;
        if (loop)
            break;
    }
    freeaddrinfo(res);
    return found;
}

/* ---- resolutions remembered: one lookup a minute per name, and the last good one through a
 * resolver failure ---------------------------------------------------------------------------- */

#define REMEMBERED  16
#define REMEMBER_NS (INT64_C(60) * 1000000000)

static struct {
    char host[256];
    address addr;
    int64_t until_ns;
    int64_t used_ns;
} remembered[REMEMBERED];
static pthread_mutex_t remembered_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t remembered_once = PTHREAD_ONCE_INIT;

/* A child of fork() may have been forked while another thread held the lock (for a few
 * instructions: never across a lookup): it starts with a fresh one. */
static void remembered_child(void)
{
    pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;
    remembered_mu = fresh;
}

static void remembered_init(void)
{
    pthread_atfork(NULL, NULL, remembered_child);
}

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The entry of host, or -1. remembered_mu held. */
static int find(const char *host)
{
    for (int i = 0; i < REMEMBERED; i++)
        if (remembered[i].host[0] && strcmp(remembered[i].host, host) == 0)
            return i;
    return -1;
}

static bool lookup(const char *host, address *out)
{
    pthread_once(&remembered_once, remembered_init);
    int64_t now = mono_ns();
    pthread_mutex_lock(&remembered_mu);
    int i = find(host);
    bool fresh = i >= 0 && remembered[i].until_ns > now;
    if (i >= 0) {
        *out = remembered[i].addr;
        remembered[i].used_ns = now;
    }
    pthread_mutex_unlock(&remembered_mu);
    if (fresh)
        return true;
    address a;
    if (!resolve(host, &a)) /* the resolver failed: the last good answer, if there was one */
        return i >= 0;
    *out = a;
    if (strlen(host) >= sizeof remembered[0].host)
        return true;
    pthread_mutex_lock(&remembered_mu);
    if ((i = find(host)) < 0) { /* a free entry, or the least recently used */
        i = 0;
        for (int k = 1; k < REMEMBERED; k++)
            if (remembered[k].used_ns < remembered[i].used_ns)
                i = k;
        snprintf(remembered[i].host, sizeof remembered[i].host, "%s", host);
    }
    remembered[i].addr = a;
    remembered[i].until_ns = now + REMEMBER_NS;
    remembered[i].used_ns = now;
    pthread_mutex_unlock(&remembered_mu);
    return true;
}

/* ---- the connection's options -----------------------------------------------------------------
 */

/* The first element of a conninfo option's comma-separated list ("" when unset). */
static void first_of(PQconninfoOption *opts, const char *keyword, char *out, size_t cap)
{
    *out = '\0';
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, keyword) == 0 && o->val)
            snprintf(out, cap, "%.*s", (int)strcspn(o->val, ","), o->val);
}

void dbt_server_name(PGconn *conn, char *out, size_t cap)
{
    /* From the options libpq resolved (service file, PG* variables and defaults applied), never
     * PQhost/PQport: before the socket opens libpq has not chosen a host yet, and they would read
     * its index of -1. */
    char host[256], hostaddr[256], port[32];
    PQconninfoOption *opts = DBT_REAL(PQconninfo)(conn);
    first_of(opts, "host", host, sizeof host);
    first_of(opts, "hostaddr", hostaddr, sizeof hostaddr);
    first_of(opts, "port", port, sizeof port);
    if (opts)
        DBT_REAL(PQconninfoFree)(opts);
    if (!*port)
        snprintf(port, sizeof port, "5432");
    address a;
    if ((*hostaddr && parse_numeric(hostaddr, &a)) || (*host && parse_numeric(host, &a))) {
        name_address(&a, port, out, cap);
    } else if (!*host || host[0] == '/' || host[0] == '@') {
        snprintf(out, cap, "%s:%s", LOCAL_SERVER, port); /* a Unix socket (libpq's default) */
    } else if (lookup(host, &a)) {
        name_address(&a, port, out, cap);
    } else {
        snprintf(out, cap, "%s:%s", host, port); /* never resolved: libpq cannot connect either */
    }
}
