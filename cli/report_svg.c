/* report_svg.c - dbthrottle report --svg (report_svg.h): two panels a person reads at a glance.
 * Above, what each candidate limit costs: the wait p99 it adds as a bar, labelled with the share
 * of commands that would wait and the refusals. Below, the concurrency the fleet had over time
 * (each bucket's peak as a line, its time-weighted mean as an area) with each candidate limit
 * drawn across it: where the peaks cross a line, that limit makes commands wait. Plain SVG 1.1,
 * no script, no external font or style: it opens in any browser and survives being mailed. */
#include "report_svg.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#define WIDTH   960
#define HEIGHT  700
#define LEFT    80  /* the plots' left edge: room for the y axis' labels */
#define RIGHT   880 /* their right edge: room for the limits' labels */
#define TOP1    90  /* the costs panel */
#define BOTTOM1 300
#define TOP2    400 /* the concurrency panel */
#define BOTTOM2 640

/* The candidate limits' colours, in turn (readable on white, told apart in grey too). */
static const char *const limit_colour[] = {"#d62728", "#ff7f0e", "#2ca02c", "#9467bd",
                                           "#8c564b", "#e377c2", "#17becf", "#bcbd22"};
#define NCOLOURS (sizeof limit_colour / sizeof *limit_colour)
/* The adaptive controller's limit and bar: solid, darker than any candidate's. */
#define ADAPT_COLOUR "#006d2c"

/* Text for an SVG text node or attribute: &, <, >, " and ' as entities; control characters as
 * '?' (XML 1.0 has no place for them). */
static void put_escaped(FILE *out, const char *s)
{
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '&':
            fputs("&amp;", out);
            break;
        case '<':
            fputs("&lt;", out);
            break;
        case '>':
            fputs("&gt;", out);
            break;
        case '"':
            fputs("&quot;", out);
            break;
        case '\'':
            fputs("&apos;", out);
            break;
        default:
            fputc(*c < 0x20 || *c == 0x7f ? '?' : *c, out);
        }
    }
}

/* A "nice" step for an axis from 0 to top in about n ticks: 1, 2 or 5 times a power of ten. */
static double nice_step(double top, int n)
{
    if (top <= 0)
        return 1;
    double raw = top / n, p = pow(10, floor(log10(raw)));
    double f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

static void fmt_wait(int64_t us, char *out, size_t cap)
{
    if (us < 10000)
        snprintf(out, cap, "%.1f ms", (double)us / 1000.0);
    else if (us < 10000000)
        snprintf(out, cap, "%.0f ms", (double)us / 1000.0);
    else
        snprintf(out, cap, "%.1f s", (double)us / 1e6);
}

/* A horizontal axis' grid and labels for values 0..top (in units of `unit` per label). */
static void y_axis(FILE *out, int top_px, int bottom_px, double top, const char *unit)
{
    double step = nice_step(top, 5);
    for (double v = 0; v <= top * 1.0001; v += step) {
        double y = bottom_px - (bottom_px - top_px) * (v / top);
        fprintf(out,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#e0e0e0\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\" font-size=\"11\">%g%s</text>\n",
                LEFT, y, RIGHT, y, LEFT - 6, y + 4, v, unit);
    }
}

static void costs_panel(FILE *out, const dbt_report_chart *c)
{
    fprintf(out,
            "<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">What each limit "
            "would have cost: the wait it adds (p99)</text>\n",
            LEFT, TOP1 - 22);
    /* the candidate limits' bars, then the adaptive controller's */
    int nbars = c->nresults + (c->adapt_result ? 1 : 0);
    int64_t most = 0;
    for (int i = 0; i < nbars; i++) {
        const dbt_replay_result *r = i < c->nresults ? &c->results[i] : c->adapt_result;
        if (r->wait_p99_us > most)
            most = r->wait_p99_us;
    }
    double top_ms = most > 0 ? (double)most / 1000.0 : 1;
    top_ms = ceil(top_ms / nice_step(top_ms, 5)) * nice_step(top_ms, 5);
    y_axis(out, TOP1, BOTTOM1, top_ms, " ms");
    double slot = (double)(RIGHT - LEFT) / (nbars > 0 ? nbars : 1);
    double bar = slot * 0.5 < 90 ? slot * 0.5 : 90;
    for (int i = 0; i < nbars; i++) {
        bool adapt = i == c->nresults;
        const dbt_replay_result *r = adapt ? c->adapt_result : &c->results[i];
        char label[32];
        if (adapt)
            snprintf(label, sizeof label, "adapt");
        else
            snprintf(label, sizeof label, "limit %d", r->limit);
        double x = LEFT + slot * i + (slot - bar) / 2;
        double h = (BOTTOM1 - TOP1) * ((double)r->wait_p99_us / 1000.0 / top_ms);
        char p99[32];
        fmt_wait(r->wait_p99_us, p99, sizeof p99);
        double share = r->commands ? 100.0 * (double)r->waited / (double)r->commands : 0;
        fprintf(out,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
                "<title>%s: wait p99 %s, p50 %.1f ms, max %.1f ms; %lld of %lld commands "
                "would wait (%.1f%%), %lld refused</title></rect>\n",
                x, BOTTOM1 - h, bar, h, adapt ? ADAPT_COLOUR : limit_colour[(size_t)i % NCOLOURS],
                adapt ? "the adaptive controller's limits" : label, p99,
                (double)r->wait_p50_us / 1000.0, (double)r->wait_max_us / 1000.0, r->waited,
                r->commands, share, r->refused);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" font-size=\"12\">%s</text>\n",
                x + bar / 2, BOTTOM1 - h - 6, p99);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"12\" "
                "font-weight=\"bold\">%s</text>\n"
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%.1f%% wait"
                "</text>\n",
                x + bar / 2, BOTTOM1 + 18, label, x + bar / 2, BOTTOM1 + 33, share);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\"%s>%lld refused"
                "</text>\n",
                x + bar / 2, BOTTOM1 + 47,
                r->refused ? " fill=\"#d62728\" font-weight=\"bold\"" : "", r->refused);
    }
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n", LEFT, BOTTOM1,
            RIGHT, BOTTOM1);
}

/* "HH:MM:SS" (UTC) of a time on Redis' clock (us since the epoch). */
static void fmt_clock(int64_t us, char *out, size_t cap)
{
    time_t t = (time_t)(us / 1000000);
    struct tm tm;
    if (gmtime_r(&t, &tm))
        strftime(out, cap, "%H:%M:%S", &tm);
    else
        snprintf(out, cap, "?");
}

/* The adaptive controller's limit over the timeline's span, a solid step line: the limit in force
 * at the span's start, then each change within it. ytop: the panel's top value. */
static void adapt_line(FILE *out, const dbt_report_chart *c, double ytop)
{
    int64_t from = c->timeline[0].start_us, span = (int64_t)c->nbuckets * c->bucket_us;
    size_t k = 0;
    while (k + 1 < c->nadapt && c->adapt[k + 1].from_us <= from)
        k++;
#define AY(v) (BOTTOM2 - (BOTTOM2 - TOP2) * ((double)(v) / ytop))
    int l = c->adapt[k].limit;
    fprintf(out, "<path fill=\"none\" stroke=\"%s\" stroke-width=\"2.5\" d=\"M%d %.1f",
            ADAPT_COLOUR, LEFT, AY(l));
    for (k++; k < c->nadapt && c->adapt[k].from_us < from + span; k++) {
        double x = LEFT + (RIGHT - LEFT) * ((double)(c->adapt[k].from_us - from) / (double)span);
        l = c->adapt[k].limit;
        fprintf(out, " H%.1f V%.1f", x, AY(l));
    }
    fprintf(out, " H%d\"><title>the adaptive controller's limit</title></path>\n", RIGHT);
    fprintf(out,
            "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"%s\" font-weight=\"bold\">adapt %d"
            "</text>\n",
            RIGHT + 6, AY(l) - 8, ADAPT_COLOUR, l);
#undef AY
}

static void concurrency_panel(FILE *out, const dbt_report_chart *c)
{
    fprintf(out,
            "<text x=\"%d\" y=\"%d\" font-size=\"14\" font-weight=\"bold\">The concurrency "
            "the fleet had (units in use per %.0f s), and the limits</text>\n"
            /* (SVG folds blanks: the parts are set apart by dx) */
            "<text x=\"%d\" y=\"%d\" font-size=\"11\"><tspan fill=\"#08519c\" "
            "font-weight=\"bold\">line: each period's peak</tspan><tspan dx=\"18\" "
            "fill=\"#3182bd\" font-weight=\"bold\">area: its time-weighted mean</tspan>"
            "<tspan dx=\"18\">dashed: the candidate limits</tspan>%s</text>\n",
            LEFT, TOP2 - 30, (double)c->bucket_us / 1e6, LEFT, TOP2 - 12,
            c->adapt ? "<tspan dx=\"18\" fill=\"" ADAPT_COLOUR "\" font-weight=\"bold\">solid: "
                       "the adaptive controller's limit</tspan>"
                     : "");
    int top = 1;
    for (size_t i = 0; i < c->nbuckets; i++)
        if (c->timeline[i].peak > top)
            top = c->timeline[i].peak;
    for (int i = 0; i < c->nresults; i++)
        if (c->results[i].limit > top)
            top = c->results[i].limit;
    for (size_t i = 0; i < c->nadapt; i++)
        if (c->adapt[i].limit > top)
            top = c->adapt[i].limit;
    double step = nice_step(top, 5);
    double ytop = ceil(top / step) * step;
    y_axis(out, TOP2, BOTTOM2, ytop, "");
    size_t nb = c->nbuckets;
    double w = (double)(RIGHT - LEFT) / (nb > 0 ? (double)nb : 1);
#define Y(v) (BOTTOM2 - (BOTTOM2 - TOP2) * ((double)(v) / ytop))
    if (nb > 0) {
        /* the mean, an area */
        fprintf(out, "<path fill=\"#9ecae1\" stroke=\"none\" d=\"M%d %d", LEFT, BOTTOM2);
        for (size_t i = 0; i < nb; i++)
            fprintf(out, " L%.1f %.1f L%.1f %.1f", LEFT + w * (double)i, Y(c->timeline[i].mean),
                    LEFT + w * (double)(i + 1), Y(c->timeline[i].mean));
        fprintf(out, " L%d %d Z\"><title>time-weighted mean</title></path>\n", RIGHT, BOTTOM2);
        /* the peak, a step line */
        fprintf(out, "<path fill=\"none\" stroke=\"#08519c\" stroke-width=\"1.5\" d=\"");
        for (size_t i = 0; i < nb; i++)
            fprintf(out, "%s%.1f %.1f L%.1f %.1f", i ? " L" : "M", LEFT + w * (double)i,
                    Y(c->timeline[i].peak), LEFT + w * (double)(i + 1), Y(c->timeline[i].peak));
        fprintf(out, "\"><title>peak</title></path>\n");
    }
    for (int i = 0; i < c->nresults; i++) {
        int l = c->results[i].limit;
        const char *col = limit_colour[(size_t)i % NCOLOURS];
        fprintf(out,
                "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"1.5\" stroke-dasharray=\"6 4\"/>\n"
                "<text x=\"%d\" y=\"%.1f\" font-size=\"11\" fill=\"%s\">limit %d</text>\n",
                LEFT, Y(l), RIGHT, Y(l), col, RIGHT + 6, Y(l) + 4, col, l);
    }
    if (c->adapt && c->nadapt > 0 && nb > 0)
        adapt_line(out, c, ytop);
#undef Y
    /* the time axis: five labels, Redis' clock */
    if (nb > 0) {
        int64_t from = c->timeline[0].start_us, span = (int64_t)nb * c->bucket_us;
        for (int k = 0; k <= 4; k++) {
            char clock[16];
            fmt_clock(from + span * k / 4, clock, sizeof clock);
            fprintf(out,
                    "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">%s</text>\n",
                    LEFT + (RIGHT - LEFT) * k / 4.0, BOTTOM2 + 18, clock);
        }
        fprintf(out,
                "<text x=\"%d\" y=\"%d\" text-anchor=\"middle\" font-size=\"11\">time (UTC, "
                "Redis' clock)</text>\n",
                (LEFT + RIGHT) / 2, BOTTOM2 + 36);
    }
    fprintf(out, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n", LEFT, BOTTOM2,
            RIGHT, BOTTOM2);
}

bool dbt_report_svg(FILE *out, const dbt_report_chart *c)
{
    fprintf(
        out,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<svg xmlns=\"http://www.w3.org/2000/svg\" version=\"1.1\" width=\"%d\" height=\"%d\" "
        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\">\n"
        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
        "<text x=\"%d\" y=\"32\" font-size=\"18\" font-weight=\"bold\">dbthrottle report: pool ",
        WIDTH, HEIGHT, WIDTH, HEIGHT, LEFT);
    put_escaped(out, c->pool);
    fprintf(out, ", %s permits</text>\n", c->kind);
    costs_panel(out, c);
    concurrency_panel(out, c);
    fputs("</svg>\n", out);
    return !ferror(out);
}
