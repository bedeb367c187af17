/* cmd_exporter.c - dbthrottle exporter: serves /metrics for Prometheus, reading Redis afresh for
 * each scrape. HTTP is libmicrohttpd's; what it serves is status --prometheus's text. */
#include "cli.h"
#include "log.h"

#include <errno.h>
#include <getopt.h>
#include <microhttpd.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

static const char usage[] =
    "usage: dbthrottle exporter [--listen ADDRESS] [--timeout T] [--pool NAME]...\n"
    "                           [--idle-after T] [--redis URL] [--key-prefix P]\n"
    "\n"
    "Serves http://ADDRESS/metrics in Prometheus' text format: what dbthrottle status\n"
    "--prometheus prints, read from Redis afresh for each scrape (every pool under the key\n"
    "prefix, or the --pool ones), one scrape at a time, each within --timeout. When Redis cannot\n"
    "be read the scrape still answers: dbthrottle_up 0, dbthrottle_build_info and\n"
    "dbthrottle_scrape_duration_seconds, without the pools' series. Other paths answer 404.\n"
    "Runs in the foreground (a service) until SIGTERM or SIGINT; SIGHUP opens DBTHROTTLE_LOG's\n"
    "file again (logrotate).\n"
    "\n"
    "  --listen ADDRESS  HOST:PORT (default 127.0.0.1:9187; [::1]:PORT for IPv6; port 0: any\n"
    "                    free one) or unix:/PATH (a Unix socket, made anew); the address bound\n"
    "                    is logged on stderr\n"
    "  --timeout T       the most a scrape spends reading Redis (default:\n"
    "                    DBTHROTTLE_REDIS_TIMEOUT, 1s)\n"
    "  --pool NAME       export this pool only (repeatable; default: every pool)\n"
    "  --idle-after T    leave out the pools nobody used for longer than T (default 1h; off:\n"
    "                    none) that no live process names (not a --pool one): their series end\n"
    "  --redis URL       Redis to read (default: DBTHROTTLE_REDIS_URL, as the library)\n"
    "  --key-prefix P    key prefix (default: DBTHROTTLE_KEY_PREFIX, as the library)\n";

/* What the one thread that answers requests reads: libmicrohttpd calls the handler from its
 * internal polling thread only, so scrapes are serialised and the connection needs no lock. */
typedef struct {
    dbt_config cfg;
    dbt_redis *r;
    char **pools;
    int npools;
    int64_t idle_after_ms; /* --idle-after (0: off) */
} exporter;

/* HEAD gets GET's whole response: libmicrohttpd sends its headers (Content-Length the body's
 * length, as RFC 9110 wants) and leaves the body out itself. */
static enum MHD_Result answer(struct MHD_Connection *conn, unsigned status, char *text, size_t len)
{
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            "text/plain; version=0.0.4; charset=utf-8");
    enum MHD_Result ok = MHD_queue_response(conn, status, resp);
    MHD_destroy_response(resp);
    return ok;
}

static char *copy_text(const char *s, size_t *len)
{
    *len = strlen(s);
    return strdup(s);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **state)
{
    (void)version;
    (void)upload;
    exporter *e = cls;
    /* The first call announces the request (headers only); answer on the second. */
    static int announced;
    if (!*state) {
        *state = &announced;
        return MHD_YES;
    }
    if (*upload_size) {
        *upload_size = 0; /* a body is read and ignored */
        return MHD_YES;
    }
    size_t len;
    char *text;
    if (strcmp(method, MHD_HTTP_METHOD_HEAD) != 0 && strcmp(method, MHD_HTTP_METHOD_GET) != 0)
        return (text = copy_text("only GET and HEAD\n", &len))
                   ? answer(conn, MHD_HTTP_METHOD_NOT_ALLOWED, text, len)
                   : MHD_NO;
    if (strcmp(url, "/metrics") != 0)
        return (text = copy_text("not found: the metrics are at /metrics\n", &len))
                   ? answer(conn, MHD_HTTP_NOT_FOUND, text, len)
                   : MHD_NO;
    char err[DBT_ERRLEN];
    cli_pool_view *v = NULL;
    int n;
    double seconds;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return MHD_NO;
    /* Into the log the settings name (DBTHROTTLE_LOG: stderr, a file, syslog), as a service's. */
    if (!cli_read_pools(&e->cfg, &e->r, e->pools, e->npools, 0, &v, &n, &seconds, err))
        dbt_log(DBT_LOG_WARN, "scrape_failed",
                (dbt_field[]){DBT_S("error", err), DBT_MS("took_ms", seconds * 1000)}, 2);
    int hidden = 0;
    if (n > 0 && e->npools == 0)
        n = cli_hide_idle(v, n, e->idle_after_ms, &hidden);
    cli_render_prometheus(mem, v, n, seconds);
    if (n >= 0)
        cli_views_free(v, n);
    if (fclose(mem) != 0) {
        free(text);
        return MHD_NO;
    }
    return answer(conn, MHD_HTTP_OK, text, len);
}

/* A listening socket for ADDRESS (see usage), its address as bound in `shown`; -1 with a message
 * in err. */
static int listen_on(const char *address, char *shown, size_t cap, char *err)
{
    int fd = -1;
    if (strncmp(address, "unix:", 5) == 0) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        const char *path = address + 5;
        if (!*path || strlen(path) >= sizeof sa.sun_path)
            return snprintf(err, DBT_ERRLEN, "--listen %s: a socket path of 1 to %zu bytes",
                            address, sizeof sa.sun_path - 1),
                   -1;
        memcpy(sa.sun_path, path, strlen(path) + 1);
        struct stat st;
        /* A socket left by an earlier exporter that did not stop cleanly: made anew. */
        if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode))
            unlink(path);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || listen(fd, 64) != 0) {
            snprintf(err, DBT_ERRLEN, "--listen %s: %s", address, strerror(errno));
            if (fd >= 0)
                close(fd);
            return -1;
        }
        snprintf(shown, cap, "unix:%s", path);
        return fd;
    }
    char host[256];
    const char *colon = strrchr(address, ':');
    size_t hl = colon ? (size_t)(colon - address) : 0;
    if (!colon || !colon[1] || hl >= sizeof host)
        return snprintf(err, DBT_ERRLEN, "--listen %s: HOST:PORT or unix:/PATH", address), -1;
    memcpy(host, address, hl);
    host[hl] = '\0';
    if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') { /* [::1]:9187 */
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = '\0';
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res = NULL;
    int gai = getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &res);
    if (gai != 0)
        return snprintf(err, DBT_ERRLEN, "--listen %s: %s", address, gai_strerror(gai)), -1;
    int saved = 0;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 64) != 0) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        return snprintf(err, DBT_ERRLEN, "--listen %s: %s", address, strerror(saved)), -1;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char h[NI_MAXHOST] = "?", p[NI_MAXSERV] = "?";
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        getnameinfo((struct sockaddr *)&ss, sl, h, sizeof h, p, sizeof p,
                    NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(shown, cap, strchr(h, ':') ? "[%s]:%s" : "%s:%s", h, p);
    return fd;
}

int cmd_exporter(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"listen", required_argument, NULL, 'l'},
        {"timeout", required_argument, NULL, 't'},
        {"pool", required_argument, NULL, 'P'},
        {"idle-after", required_argument, NULL, 'I'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    const char *address = "127.0.0.1:9187", *timeout = NULL, *idle_after = CLI_IDLE_AFTER_DEFAULT;
    exporter e = {0};
    char err[DBT_ERRLEN];
    int opt, rc = 1;
    e.pools = calloc((size_t)argc, sizeof *e.pools);
    if (!e.pools)
        return cli_fail("exporter", "out of memory");
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'l':
            address = optarg;
            break;
        case 't':
            timeout = optarg;
            break;
        case 'P':
            e.pools[e.npools++] = optarg;
            break;
        case 'I':
            idle_after = optarg;
            break;
        case 'h':
            fputs(usage, stdout);
            free(e.pools);
            return 0;
        default:
            if (cli_redis_opt(&ro, opt, optarg))
                break;
            free(e.pools);
            return cli_option_error("exporter", longopts, argv);
        }
    }
    if (optind < argc) {
        free(e.pools);
        return cli_usage_error("exporter", "unexpected argument '%s'", argv[optind]);
    }
    if (!cli_parse_idle_after(idle_after, &e.idle_after_ms, err)) {
        free(e.pools);
        return cli_usage_error("exporter", "%s", err);
    }
    if (!cli_load_config("exporter", &ro, &e.cfg)) {
        free(e.pools);
        return 1;
    }
    /* --timeout is the library's own setting, parsed and bounded as it parses it. */
    if (timeout && !dbt_config_set(&e.cfg, "DBTHROTTLE_REDIS_TIMEOUT", timeout, DBT_SRC_ENV, err)) {
        dbt_config_free(&e.cfg);
        free(e.pools);
        return cli_usage_error("exporter", "--timeout: %s", err);
    }
    if (!dbt_log_open(&e.cfg, err))
        cli_fail("exporter", "%s (logging to stderr)", err);
    char shown[300];
    int fd = listen_on(address, shown, sizeof shown, err);
    if (fd < 0) {
        dbt_config_free(&e.cfg);
        free(e.pools);
        return cli_fail("exporter", "%s", err);
    }
    /* The signals are taken by sigwait below: blocked here, before libmicrohttpd's thread
     * starts, so that it inherits the mask and never runs a handler. */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    /* A scraper that hangs up mid-answer must not end the service. */
    signal(SIGPIPE, SIG_IGN);
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL, 0, NULL, NULL, on_request, &e,
        MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)30, MHD_OPTION_END);
    if (!d) {
        close(fd);
        cli_fail("exporter", "cannot start the HTTP server on %s", shown);
    } else {
        char ep[300];
        cli_escape_name(e.cfg.key_prefix, 256, true, ep, sizeof ep);
        fprintf(stderr,
                "dbthrottle exporter: listening on %s (GET /metrics; Redis %s, prefix %s)\n", shown,
                e.cfg.redis_url_redacted, ep);
        int sig = 0;
        /* logrotate's SIGHUP: the library's log file (DBTHROTTLE_LOG) is opened again here, in
         * the main loop, not in a handler (it takes the log's lock). */
        while (sigwait(&stop, &sig) == 0 && sig == SIGHUP)
            if (!dbt_log_reopen(err))
                cli_fail("exporter", "SIGHUP: cannot open the log again: %s", err);
        fprintf(stderr, "dbthrottle exporter: stopping (%s)\n", strsignal(sig));
        MHD_stop_daemon(d); /* waits for a scrape under way, then closes the socket (fd) */
        rc = 0;
    }
    if (strncmp(address, "unix:", 5) == 0)
        unlink(address + 5);
    if (e.r)
        dbt_redis_free(e.r);
    dbt_config_free(&e.cfg);
    free(e.pools);
    return rc;
}
