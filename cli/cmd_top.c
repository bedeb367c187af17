/* cmd_top.c - dbthrottle top: the status table, refreshed in the terminal until q or Ctrl-C. */
#include "cli.h"

#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static const char usage[] =
    "usage: dbthrottle top [POOL...] [-b] [-n N] [-d SECONDS | --interval T] [--idle-after T]\n"
    "                      [--redis URL] [--key-prefix P]\n"
    "\n"
    "Shows what dbthrottle status shows, refreshed every --interval (default 1s), in the\n"
    "terminal's alternate screen, until q or Ctrl-C. Reads Redis only.\n"
    "\n"
    "  -b, --batch       batch mode: each refresh printed after the last, as plain text (also\n"
    "                    whenever the output is not a terminal: never an escape code then)\n"
    "  -n, --iterations N  stop after N refreshes\n"
    "  -d, --delay SECONDS  the time between refreshes in seconds (0.5), as --interval\n"
    "  --interval T      the same as a duration (500ms, 2s)\n"
    "  --idle-after T    leave out the pools nobody used for longer than T (default 1h; off:\n"
    "                    none) that no live process names; a POOL named is always shown\n";

static volatile sig_atomic_t stop;
static void on_signal(int sig)
{
    (void)sig;
    stop = 1;
}

static struct termios saved_tty;
static bool tty_raw;

static void tty_restore(void)
{
    if (tty_raw)
        tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_tty);
    tty_raw = false;
    fputs("\033[?25h\033[?1049l", stdout); /* cursor back, main screen back */
    fflush(stdout);
}

/* Keys arrive one by one without echo; Ctrl-C still raises SIGINT (ISIG stays). */
static void tty_setup(void)
{
    if (isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tty) == 0) {
        struct termios t = saved_tty;
        t.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
        t.c_cc[VMIN] = 0;
        t.c_cc[VTIME] = 0;
        tty_raw = tcsetattr(STDIN_FILENO, TCSAFLUSH, &t) == 0;
    }
    fputs("\033[?1049h\033[?25l", stdout); /* alternate screen, no cursor */
}

static int screen_rows(void)
{
    struct winsize ws;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 4)
        return ws.ws_row;
    return 24;
}

/* One frame: the header, then the table cut to the screen's height; in batch mode, all of it as
 * plain lines after the previous frame. */
static void draw(const dbt_config *cfg, const cli_pool_view *v, int n,
                 const cli_hidden_idle *hidden, const char *failure, int64_t interval_ms,
                 bool batch)
{
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    if (!mem)
        return;
    time_t t = time(NULL);
    char when[32];
    strftime(when, sizeof when, "%H:%M:%S", localtime(&t));
    char ep[300];
    cli_escape_name(cfg->key_prefix, 256, true, ep, sizeof ep);
    fprintf(mem, "dbthrottle top - %s - %s prefix %s - %d pool%s - every %.1fs%s\n\n", when,
            cfg->redis_url_redacted, ep, n, n == 1 ? "" : "s", (double)interval_ms / 1000,
            batch ? "" : " - q quits");
    if (failure)
        fprintf(mem, "cannot read Redis: %s (retrying)\n", failure);
    else
        cli_render_text(mem, v, n, cfg->key_prefix, hidden);
    fclose(mem);
    if (batch) {
        fputs(text, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        free(text);
        return;
    }
    /* Home, then each line cleared to its end; below the last line, the rest of the screen. */
    fputs("\033[H", stdout);
    int rows = screen_rows(), row = 0;
    for (char *line = text; line && *line && row < rows - 1; row++) {
        char *nl = strchr(line, '\n');
        size_t ll = nl ? (size_t)(nl - line) : strlen(line);
        fwrite(line, 1, ll, stdout);
        fputs("\033[K\n", stdout);
        line = nl ? nl + 1 : NULL;
    }
    fputs("\033[J", stdout);
    fflush(stdout);
    free(text);
}

/* Waits up to ms for a key; true when it is time to quit. */
static bool wait_key(int64_t ms)
{
    struct pollfd p = {.fd = STDIN_FILENO, .events = POLLIN};
    int n = poll(&p, tty_raw ? 1 : 0, (int)ms);
    if (n > 0) {
        char c;
        ssize_t got = read(STDIN_FILENO, &c, 1);
        if (got == 1 && (c == 'q' || c == 'Q'))
            return true;
        if (got == 0 && !tty_raw)
            return false;
    }
    return stop != 0;
}

int cmd_top(int argc, char **argv)
{
    static const struct option longopts[] = {
        {"interval", required_argument, NULL, 'i'},
        {"batch", no_argument, NULL, 'b'},
        {"iterations", required_argument, NULL, 'n'},
        {"delay", required_argument, NULL, 'd'},
        {"idle-after", required_argument, NULL, 'I'},
        {"help", no_argument, NULL, 'h'},
        {"redis", required_argument, NULL, CLI_OPT_REDIS},
        {"key-prefix", required_argument, NULL, CLI_OPT_KEY_PREFIX},
        {NULL, 0, NULL, 0}};
    cli_redis_opts ro = {0};
    int64_t interval_ms = 1000;
    char err[DBT_ERRLEN];
    int opt, iterations = 0;
    bool batch = false;
    cli_hidden_idle hidden = {0};
    if (!cli_parse_idle_after(CLI_IDLE_AFTER_DEFAULT, &hidden.after_ms, err))
        return cli_fail("top", "%s", err);
    opterr = 0;
    while ((opt = getopt_long(argc, argv, "hbn:d:", longopts, NULL)) != -1) {
        switch (opt) {
        case 'b':
            batch = true;
            break;
        case 'n':
            if (!dbt_parse_limit("-n", optarg, &iterations, err))
                return cli_usage_error("top", "%s", err);
            break;
        case 'd': { /* top(1)'s form: seconds, fractions allowed */
            char *end;
            double secs = strtod(optarg, &end);
            if (end == optarg || *end || !(secs >= 0.1 && secs <= 86400))
                return cli_usage_error("top", "-d: seconds from 0.1 to 86400, not \"%s\"", optarg);
            interval_ms = (int64_t)(secs * 1000 + 0.5);
            break;
        }
        case 'I':
            if (!cli_parse_idle_after(optarg, &hidden.after_ms, err))
                return cli_usage_error("top", "%s", err);
            break;
        case 'i': /* the library's duration parser: "500ms", "1s" (a bare number is refused) */
            if (!dbt_parse_duration("--interval", optarg, false, false, &interval_ms, err))
                return cli_usage_error("top", "%s", err);
            if (interval_ms < 100)
                return cli_usage_error("top", "--interval: at least 100ms");
            break;
        case 'h':
            fputs(usage, stdout);
            return 0;
        default:
            if (cli_redis_opt(&ro, opt, optarg))
                break;
            return cli_option_error("top", longopts, argv);
        }
    }
    dbt_config cfg;
    if (!cli_load_config("top", &ro, &cfg))
        return 1;
    dbt_redis *r = cli_connect("top", &cfg);
    if (!r) {
        dbt_config_free(&cfg);
        return 1;
    }
    /* Escape codes go to a terminal only: a pipe or a file gets plain frames. */
    batch = batch || !isatty(STDOUT_FILENO);
    struct sigaction sa = {0};
    sa.sa_handler = on_signal; /* no SA_RESTART: poll returns at once */
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    if (!batch)
        tty_setup();
    bool failed = false;
    for (int frame = 1; !stop; frame++) {
        cli_pool_view *v = NULL;
        int rows = batch ? 50 : screen_rows(), n;
        if (!r || dbt_redis_broken(r)) { /* Redis restarted: connect again */
            if (r)
                dbt_redis_free(r);
            r = dbt_redis_connect(&cfg, err);
        }
        /* Errors go on the screen, not to stderr, which would tear the frame. */
        if (!r)
            n = -1;
        else
            n = cli_view_pools(r, &cfg, argv + optind, argc - optind, rows, &v, err);
        hidden.pools = 0;
        if (n > 0 && optind == argc)
            n = cli_hide_idle(v, n, hidden.after_ms, &hidden.pools);
        draw(&cfg, v, n < 0 ? 0 : n, &hidden, n < 0 ? err : NULL, interval_ms, batch);
        failed = n < 0;
        if (n >= 0)
            cli_views_free(v, n);
        if ((iterations && frame >= iterations) || wait_key(interval_ms))
            break;
    }
    if (!batch)
        tty_restore();
    if (r)
        dbt_redis_free(r);
    dbt_config_free(&cfg);
    /* A batch run whose last frame could not read Redis says so to a script. */
    return batch && failed ? 1 : 0;
}
