/* server_name.c - the name of the PostgreSQL server a connection reaches, however it was spelled.
 *
 * The default pool is "<server>/<dbname>". A pool named by the connection string's host as typed
 * split one database into as many limits as it had spellings (localhost, 127.0.0.1, the Unix
 * socket, a service file's name...): each spelling its own full limit. The server is therefore
 * named by where libpq really goes:
 *   - TCP to an address that is not loopback: that address and port ("10.1.2.3:5432",
 *     "[2001:db8::5]:5432"): every host name, service entry or PG* variable that resolves to it
 *     names the same server;
 *   - a Unix socket or a loopback address: this machine's server on that port
 *     ("localhost@<hostname>:5432"): the socket and the loopback TCP address beside it are one
 *     server, and the same spelling on another machine is another server.
 * Once the connection is made, the address is the one libpq connected to (PQhostaddr). Before
 * (a connection permit is taken before the socket opens), the first host of the connection's
 * list is named the way libpq is about to reach it: its hostaddr= if given, else the first
 * address getaddrinfo returns for its name.
 *
 * What this cannot unify (docs/configuration.md, "Pools"): the same server reached through
 * different addresses (NAT, a proxy, another interface of the database host, a client on the
 * database host using the socket while others use its network address). DBTHROTTLE_POOL names
 * the pool explicitly for those. */
#include "server_name.h"

#include "real.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

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

/* "addr:port" or "[addr6]:port" for a numeric address, in its canonical text (so that
 * "2001:db8::0:5" and "2001:db8::5" agree). False when addr is not numeric. */
static bool name_numeric(const char *addr, const char *port, char *out, size_t cap)
{
    unsigned char buf[sizeof(struct in6_addr)];
    char text[INET6_ADDRSTRLEN];
    int family = inet_pton(AF_INET, addr, buf) == 1    ? AF_INET
                 : inet_pton(AF_INET6, addr, buf) == 1 ? AF_INET6
                                                       : 0;
    if (!family || !inet_ntop(family, buf, text, sizeof text))
        return false;
    snprintf(out, cap, family == AF_INET6 ? "[%s]:%s" : "%s:%s", text, port);
    return true;
}

static bool numeric_is_loopback(const char *addr)
{
    unsigned char buf[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, addr, buf) == 1)
        return is_loopback(AF_INET, buf);
    if (inet_pton(AF_INET6, addr, buf) == 1)
        return is_loopback(AF_INET6, buf);
    return false;
}

static void name_local(const char *port, char *out, size_t cap)
{
    char me[256] = "";
    if (gethostname(me, sizeof me - 1) != 0 || !*me)
        snprintf(me, sizeof me, "unknown");
    snprintf(out, cap, "localhost@%s:%s", me, port);
}

/* The first element of a conninfo option's comma-separated list ("" when unset). */
static void first_of(PQconninfoOption *opts, const char *keyword, char *out, size_t cap)
{
    *out = '\0';
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, keyword) == 0 && o->val)
            snprintf(out, cap, "%.*s", (int)strcspn(o->val, ","), o->val);
}

/* The first address libpq would try for host (AF_UNSPEC, stream, as libpq asks), as text. */
static bool resolve_first(const char *host, const char *port, char *out, size_t cap)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
        return false;
    const void *a = res->ai_family == AF_INET
                        ? (const void *)&((struct sockaddr_in *)res->ai_addr)->sin_addr
                        : (const void *)&((struct sockaddr_in6 *)res->ai_addr)->sin6_addr;
    bool ok = (res->ai_family == AF_INET || res->ai_family == AF_INET6) &&
              inet_ntop(res->ai_family, a, out, cap);
    freeaddrinfo(res);
    return ok;
}

void dbt_server_name(PGconn *conn, char *out, size_t cap)
{
    char host[256], addr[256], port[32];
    if (DBT_REAL(PQstatus)(conn) == CONNECTION_OK) {
        /* libpq's index of the host it connected to is valid: ask it */
        __typeof__(&PQhostaddr) hostaddr_of = DBT_REAL(PQhostaddr);
        const char *h = DBT_REAL(PQhost)(conn), *p = DBT_REAL(PQport)(conn);
        const char *a = hostaddr_of ? hostaddr_of(conn) : NULL;
        snprintf(host, sizeof host, "%s", h ? h : "");
        snprintf(addr, sizeof addr, "%s", a ? a : "");
        snprintf(port, sizeof port, "%s", p ? p : "");
    } else {
        /* Before the socket opens libpq has not chosen a host yet (PQhost and PQport would read
         * its index of -1): the first of each list, which it tries first, from the options it
         * resolved (service file, PG* variables and defaults applied). */
        PQconninfoOption *opts = DBT_REAL(PQconninfo)(conn);
        first_of(opts, "host", host, sizeof host);
        first_of(opts, "hostaddr", addr, sizeof addr);
        first_of(opts, "port", port, sizeof port);
        if (opts)
            DBT_REAL(PQconninfoFree)(opts);
    }
    if (!*port)
        snprintf(port, sizeof port, "5432");
    if (!*addr) {
        if (!*host || host[0] == '/' || host[0] == '@') {
            name_local(port, out, cap); /* a Unix socket (libpq's default without a host) */
            return;
        }
        if (!resolve_first(host, port, addr, sizeof addr))
            snprintf(addr, sizeof addr, "%s", host); /* libpq will fail to resolve it too */
    }
    if (numeric_is_loopback(addr))
        name_local(port, out, cap);
    else if (!name_numeric(addr, port, out, cap))
        snprintf(out, cap, "%s:%s", addr, port);
}
