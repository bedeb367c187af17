/* delay_proxy.c - a TCP proxy that puts a server at a distance: every chunk read from either side
 * is held for a fixed one-way delay, then written to the other side (`make bench-rtt`,
 * bench/rtt_bench.sh; the kernel here has no netem).
 *
 *   delay-proxy LISTEN_PORT TARGET_HOST TARGET_PORT ONE_WAY_US
 *
 * Listens on 127.0.0.1:LISTEN_PORT (0: a free port), prints the port it listens on as one line on
 * stdout, and serves until SIGTERM or SIGINT. Each connection accepted is paired with one to
 * TARGET_HOST:TARGET_PORT. One thread: epoll for the sockets, one timerfd for the delays, a
 * signalfd for the end.
 *
 * Why each choice:
 * - The delay is counted on the monotonic clock from the moment a chunk was read, and every chunk
 *   waits the same time, so the chunks of the whole proxy fall due in the order they were read:
 *   one timeline (a FIFO) and one timer serve every connection, and order per direction is kept.
 * - Writes are non-blocking, each direction with its queue: a slow reader holds back its own
 *   connection only. A direction with more than QUEUE_HIGH bytes queued stops reading its source
 *   until it drains (as TCP's window would), so a reader that never reads costs bounded memory.
 * - The end of a stream (a read of 0) is a chunk of its own, delayed like the data: the other side
 *   is shut for writing once what was queued before went out (a half close, as TCP delivers a FIN);
 *   the pair is closed when both directions have ended, or at once on an error (a reset, a failed
 *   connect: the client then sees its connection closed, as it would see a dead server's).
 * - TCP_NODELAY on both sockets: Nagle would add its own delay to the small requests we measure.
 * - SIGPIPE ignored and MSG_NOSIGNAL: a peer gone mid-write must not kill the proxy (a dead proxy
 *   turns a throttled benchmark into something else); the bench checks that it is alive anyway. */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/* Above this many bytes queued in one direction its source is not read; below QUEUE_LOW again. */
#define QUEUE_HIGH (1u << 20)
#define QUEUE_LOW  (256u << 10)
#define READ_SIZE  65536
/* Ten seconds: a larger delay is a typo, not a distance. */
#define MAX_ONE_WAY_US 10000000UL

struct flow;

/* One chunk read from a source, waiting for its time, then for its destination to take it. */
struct chunk {
    struct chunk *next;              /* in its flow's queue */
    struct chunk *tl_prev, *tl_next; /* in the timeline, while not yet seen due */
    bool in_timeline;
    struct flow *flow;
    uint64_t due_ns;
    size_t len, off; /* len 0: the end of the stream */
    unsigned char data[];
};

struct pair;

/* One socket of a pair. */
struct end {
    int kind; /* KIND_END */
    struct pair *pair;
    int fd;
    uint32_t events;  /* what epoll watches now */
    bool registered;  /* in epoll */
    bool read_done;   /* its end of stream (or an error) was read */
    bool read_paused; /* the flow from it is above QUEUE_HIGH */
    bool want_out;    /* a write to it would block */
    bool write_shut;  /* its flow's end of stream went out */
};

/* One direction: from src to dst. */
struct flow {
    struct chunk *head, *tail;
    size_t queued;
    struct end *src, *dst;
};

/* A client's connection and ours to the target. ends[0] the client's, flows[0] client -> target. */
struct pair {
    struct end ends[2];
    struct flow flows[2];
    bool connected; /* ours to the target is established */
    bool dead;      /* closed; freed after the batch of events that may still name it */
    struct pair *prev, *next, *next_dead;
};

enum { KIND_END, KIND_LISTEN, KIND_TIMER, KIND_SIGNAL };

static int kind_listen = KIND_LISTEN, kind_timer = KIND_TIMER, kind_signal = KIND_SIGNAL;

static int epfd = -1, listen_fd = -1, timer_fd = -1, signal_fd = -1;
static uint64_t delay_ns;
static struct sockaddr_storage target;
static socklen_t target_len;
static struct pair *pairs; /* every live pair */
static struct pair *dead;  /* closed pairs to free after the current batch */
static struct chunk *tl_head, *tl_tail;
static uint64_t timer_armed_ns; /* 0: disarmed */
static bool accept_paused;      /* out of descriptors: accepting waits for a pair to close */
static unsigned char readbuf[READ_SIZE];

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "delay-proxy: %s: %s\n", what, strerror(errno));
    exit(1);
}

/* ---- the timeline: every chunk not yet seen due, in the order they fall due ------------------ */

static void timeline_unlink(struct chunk *c)
{
    if (!c->in_timeline)
        return;
    if (c->tl_prev)
        c->tl_prev->tl_next = c->tl_next;
    else
        tl_head = c->tl_next;
    if (c->tl_next)
        c->tl_next->tl_prev = c->tl_prev;
    else
        tl_tail = c->tl_prev;
    c->in_timeline = false;
}

static void timeline_append(struct chunk *c)
{
    c->tl_prev = tl_tail;
    c->tl_next = NULL;
    if (tl_tail)
        tl_tail->tl_next = c;
    else
        tl_head = c;
    tl_tail = c;
    c->in_timeline = true;
}

/* Arms the timer for the timeline's first chunk (if it is not armed for that time already). */
static void timer_update(void)
{
    uint64_t due = tl_head ? tl_head->due_ns : 0;
    if (due == timer_armed_ns)
        return;
    struct itimerspec its = {0};
    if (due) {
        its.it_value.tv_sec = (time_t)(due / 1000000000u);
        its.it_value.tv_nsec = (long)(due % 1000000000u);
    }
    if (timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        die("timerfd_settime");
    timer_armed_ns = due;
}

/* ---- pairs ------------------------------------------------------------------------------------
 */

static void end_watch(struct end *e)
{
    if (!e->registered || e->fd < 0)
        return;
    uint32_t ev = 0;
    bool reading =
        !e->read_done && !e->read_paused && (e == &e->pair->ends[0] || e->pair->connected);
    if (reading)
        ev |= EPOLLIN;
    if (e->want_out || (e == &e->pair->ends[1] && !e->pair->connected))
        ev |= EPOLLOUT;
    if (ev == e->events)
        return;
    struct epoll_event ee = {.events = ev, .data.ptr = e};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, e->fd, &ee) < 0)
        die("epoll_ctl");
    e->events = ev;
}

static void pair_close(struct pair *p)
{
    if (p->dead)
        return;
    p->dead = true;
    for (int i = 0; i < 2; i++) {
        struct flow *f = &p->flows[i];
        for (struct chunk *c = f->head, *n; c; c = n) {
            n = c->next;
            timeline_unlink(c);
            free(c);
        }
        f->head = f->tail = NULL;
        f->queued = 0;
        if (p->ends[i].fd >= 0)
            close(p->ends[i].fd);
        p->ends[i].fd = -1;
    }
    if (p->prev)
        p->prev->next = p->next;
    else
        pairs = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->next_dead = dead;
    dead = p;
    if (accept_paused) {
        struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &kind_listen};
        if (epoll_ctl(epfd, EPOLL_CTL_MOD, listen_fd, &ee) < 0)
            die("epoll_ctl");
        accept_paused = false;
    }
}

static void free_dead(void)
{
    while (dead) {
        struct pair *p = dead;
        dead = p->next_dead;
        free(p);
    }
}

/* Writes what of the flow is due to its destination, until it would block. */
static void flow_flush(struct flow *f)
{
    struct pair *p = f->src->pair;
    if (p->dead || (f->dst == &p->ends[1] && !p->connected))
        return;
    uint64_t now = now_ns();
    while (f->head && f->head->due_ns <= now) {
        struct chunk *c = f->head;
        if (c->len == 0) {
            /* The source's end of stream, after all it sent. */
            shutdown(f->dst->fd, SHUT_WR);
            f->dst->write_shut = true;
        } else {
            ssize_t n = send(f->dst->fd, c->data + c->off, c->len - c->off, MSG_NOSIGNAL);
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                f->dst->want_out = true;
                end_watch(f->dst);
                return;
            }
            if (n < 0) {
                pair_close(p);
                return;
            }
            c->off += (size_t)n;
            if (c->off < c->len)
                continue;
        }
        f->head = c->next;
        if (!f->head)
            f->tail = NULL;
        f->queued -= c->len;
        timeline_unlink(c);
        free(c);
    }
    if (f->dst->want_out) {
        f->dst->want_out = false;
        end_watch(f->dst);
    }
    if (f->src->read_paused && f->queued < QUEUE_LOW) {
        f->src->read_paused = false;
        end_watch(f->src);
    }
    if (p->ends[0].write_shut && p->ends[1].write_shut)
        pair_close(p);
}

/* Queues a chunk (len 0: the end of stream) on the flow, due after the delay. */
static void flow_push(struct flow *f, const unsigned char *data, size_t len)
{
    struct chunk *c = malloc(sizeof *c + len);
    if (!c) {
        errno = ENOMEM;
        die("malloc");
    }
    memcpy(c->data, data, len);
    c->next = NULL;
    c->flow = f;
    c->len = len;
    c->off = 0;
    c->due_ns = now_ns() + delay_ns;
    c->in_timeline = false;
    if (f->tail)
        f->tail->next = c;
    else
        f->head = c;
    f->tail = c;
    f->queued += len;
    if (delay_ns) {
        timeline_append(c);
        timer_update();
    } else {
        flow_flush(f);
        if (f->src->pair->dead)
            return;
    }
    if (f->queued > QUEUE_HIGH && !f->src->read_paused) {
        f->src->read_paused = true;
        end_watch(f->src);
    }
}

static void end_read(struct end *e)
{
    struct pair *p = e->pair;
    struct flow *f = &p->flows[e == &p->ends[0] ? 0 : 1];
    ssize_t n = recv(e->fd, readbuf, sizeof readbuf, 0);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
        return;
    if (n < 0) {
        /* A reset: the other side sees its connection closed now, not after the delay. */
        pair_close(p);
        return;
    }
    if (n == 0) {
        e->read_done = true;
        end_watch(e);
    }
    flow_push(f, readbuf, (size_t)n);
}

static void set_nodelay(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

static void end_add(struct end *e, uint32_t ev)
{
    struct epoll_event ee = {.events = ev, .data.ptr = e};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, e->fd, &ee) < 0)
        die("epoll_ctl");
    e->events = ev;
    e->registered = true;
}

static void accept_one(int cfd)
{
    int sfd = socket(target.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (sfd < 0) {
        fprintf(stderr, "delay-proxy: socket: %s\n", strerror(errno));
        close(cfd);
        return;
    }
    set_nodelay(cfd);
    set_nodelay(sfd);
    struct pair *p = calloc(1, sizeof *p);
    if (!p) {
        errno = ENOMEM;
        die("calloc");
    }
    for (int i = 0; i < 2; i++) {
        p->ends[i].kind = KIND_END;
        p->ends[i].pair = p;
        p->flows[i].src = &p->ends[i];
        p->flows[i].dst = &p->ends[1 - i];
    }
    p->ends[0].fd = cfd;
    p->ends[1].fd = sfd;
    p->next = pairs;
    if (pairs)
        pairs->prev = p;
    pairs = p;
    end_add(&p->ends[0], EPOLLIN);
    end_add(&p->ends[1], EPOLLOUT);
    if (connect(sfd, (struct sockaddr *)&target, target_len) == 0) {
        p->connected = true;
        end_watch(&p->ends[1]);
    } else if (errno != EINPROGRESS) {
        fprintf(stderr, "delay-proxy: connect to the target: %s\n", strerror(errno));
        pair_close(p);
    }
}

static void on_listen(void)
{
    for (;;) {
        int cfd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd >= 0) {
            accept_one(cfd);
            continue;
        }
        if (errno == EMFILE || errno == ENFILE) {
            /* Level-triggered: listening on would spin. A pair's close resumes it. */
            fprintf(stderr, "delay-proxy: accept: %s (waiting for a connection to close)\n",
                    strerror(errno));
            struct epoll_event ee = {.events = 0, .data.ptr = &kind_listen};
            if (epoll_ctl(epfd, EPOLL_CTL_MOD, listen_fd, &ee) < 0)
                die("epoll_ctl");
            accept_paused = true;
        } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR &&
                   errno != ECONNABORTED) {
            fprintf(stderr, "delay-proxy: accept: %s\n", strerror(errno));
        }
        return;
    }
}

static void on_end(struct end *e, uint32_t ev)
{
    struct pair *p = e->pair;
    if (p->dead)
        return;
    if (e == &p->ends[1] && !p->connected) {
        if (!(ev & (EPOLLOUT | EPOLLERR | EPOLLHUP)))
            return;
        int err = 0;
        socklen_t len = sizeof err;
        if (getsockopt(e->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err) {
            fprintf(stderr, "delay-proxy: connect to the target: %s\n",
                    strerror(err ? err : errno));
            pair_close(p);
            return;
        }
        p->connected = true;
        end_watch(e);
        flow_flush(&p->flows[0]);
        return;
    }
    if (ev & EPOLLERR) {
        pair_close(p);
        return;
    }
    if (ev & EPOLLOUT)
        flow_flush(&p->flows[e == &p->ends[0] ? 1 : 0]);
    if (p->dead)
        return;
    if (ev & EPOLLIN)
        end_read(e);
    else if ((ev & EPOLLHUP) && !e->read_done)
        end_read(e); /* what is left, then the end of stream */
    else if ((ev & EPOLLHUP) && e->registered) {
        /* Both ways shut and its end of stream already read: epoll would report it again at
         * every wait. Unwatched; the pair closes when its queues have gone out, or a write to it
         * fails. */
        epoll_ctl(epfd, EPOLL_CTL_DEL, e->fd, NULL);
        e->registered = false;
    }
}

static void on_timer(void)
{
    uint64_t ticks;
    if (read(timer_fd, &ticks, sizeof ticks) < 0 && errno != EAGAIN)
        die("read timerfd");
    timer_armed_ns = 0;
    uint64_t now = now_ns();
    while (tl_head && tl_head->due_ns <= now) {
        struct chunk *c = tl_head;
        timeline_unlink(c);
        flow_flush(c->flow); /* may free c, and close its pair */
    }
    timer_update();
}

/* ---- arguments ---------------------------------------------------------------------------------
 */

static unsigned long parse_num(const char *name, const char *s, unsigned long min,
                               unsigned long max)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (!*s || *end || errno || *s == '-' || *s == '+' || v < min || v > max) {
        fprintf(stderr, "delay-proxy: %s: not a whole number from %lu to %lu: '%s'\n", name, min,
                max, s);
        exit(2);
    }
    return v;
}

static void usage(void)
{
    fprintf(stderr, "usage: delay-proxy LISTEN_PORT TARGET_HOST TARGET_PORT ONE_WAY_US\n");
    exit(2);
}

static void resolve(const char *host, const char *port)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res;
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc) {
        fprintf(stderr, "delay-proxy: TARGET_HOST: cannot resolve '%s': %s\n", host,
                gai_strerror(rc));
        exit(2);
    }
    memcpy(&target, res->ai_addr, res->ai_addrlen);
    target_len = res->ai_addrlen;
    freeaddrinfo(res);
}

/* Hundreds of connections are two descriptors each: the soft limit up to the hard one. */
static void raise_fd_limit(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
}

int main(int argc, char **argv)
{
    if (argc != 5)
        usage();
    unsigned long lport = parse_num("LISTEN_PORT", argv[1], 0, 65535);
    parse_num("TARGET_PORT", argv[3], 1, 65535);
    delay_ns = (uint64_t)parse_num("ONE_WAY_US", argv[4], 0, MAX_ONE_WAY_US) * 1000u;
    if (!*argv[2]) {
        fprintf(stderr, "delay-proxy: TARGET_HOST: empty\n");
        exit(2);
    }
    resolve(argv[2], argv[3]);

    signal(SIGPIPE, SIG_IGN);
    raise_fd_limit();
    sigset_t ss;
    sigemptyset(&ss);
    sigaddset(&ss, SIGTERM);
    sigaddset(&ss, SIGINT);
    if (sigprocmask(SIG_BLOCK, &ss, NULL) < 0)
        die("sigprocmask");
    signal_fd = signalfd(-1, &ss, SFD_NONBLOCK | SFD_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    epfd = epoll_create1(EPOLL_CLOEXEC);
    listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (signal_fd < 0 || timer_fd < 0 || epfd < 0 || listen_fd < 0)
        die("setting up");
    int one = 1;
    setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)lport)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t slen = sizeof sin;
    if (bind(listen_fd, (struct sockaddr *)&sin, sizeof sin) < 0) {
        fprintf(stderr, "delay-proxy: cannot listen on 127.0.0.1:%lu: %s\n", lport,
                strerror(errno));
        exit(1);
    }
    if (listen(listen_fd, SOMAXCONN) < 0 ||
        getsockname(listen_fd, (struct sockaddr *)&sin, &slen) < 0)
        die("listen");
    struct epoll_event ee = {.events = EPOLLIN, .data.ptr = &kind_listen};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, listen_fd, &ee) < 0)
        die("epoll_ctl");
    ee.data.ptr = &kind_timer;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, timer_fd, &ee) < 0)
        die("epoll_ctl");
    ee.data.ptr = &kind_signal;
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, signal_fd, &ee) < 0)
        die("epoll_ctl");
    if (printf("%u\n", (unsigned)ntohs(sin.sin_port)) < 0 || fflush(stdout) != 0)
        die("stdout");

    bool running = true;
    while (running) {
        struct epoll_event evs[128];
        int n = epoll_wait(epfd, evs, 128, -1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            die("epoll_wait");
        for (int i = 0; i < n; i++) {
            int *kind = evs[i].data.ptr;
            if (*kind == KIND_LISTEN)
                on_listen();
            else if (*kind == KIND_TIMER)
                on_timer();
            else if (*kind == KIND_SIGNAL)
                running = false;
            else
                on_end((struct end *)kind, evs[i].events);
        }
        free_dead();
    }
    while (pairs)
        pair_close(pairs);
    free_dead();
    close(listen_fd);
    close(timer_fd);
    close(signal_fd);
    close(epfd);
    return 0;
}
