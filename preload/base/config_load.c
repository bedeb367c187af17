/* config_load.c - the settings loaded: defaults, the configuration file, the environment, and
 * where each value came from. Reads the file named by DBTHROTTLE_CONFIG (or the installed default
 * file); prints nothing (callers log). */
#include "config.h"
#include "log.h"
#include "settings.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#define PREFIX_LEN 11 /* strlen("DBTHROTTLE_") */

/* The configuration file every process reads when DBTHROTTLE_CONFIG is unset: the Makefile
 * passes $(SYSCONFDIR)/dbthrottle.conf (the Debian package's conffile). */
#ifndef DBT_DEFAULT_CONFIG
#define DBT_DEFAULT_CONFIG "/etc/dbthrottle.conf"
#endif

/* A refused value of row `row` (-1: no one setting's): the row keeps its latest refusal, the
 * other errors their first. A failed copy only loses the message, never the refusal: the load
 * still fails. */
static void note_error(dbt_config *cfg, int row, const char *msg)
{
    char **slot = row >= 0 ? &cfg->row_error[row] : &cfg->other_error;
    if (row < 0 && *slot)
        return;
    free(*slot);
    *slot = strdup(msg);
}

const char *dbt_config_error_for(const dbt_config *cfg, dbt_config_reader reader)
{
    if (cfg->other_error)
        return cfg->other_error;
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        const char *e = cfg->row_error[s - dbt_settings];
        if (e && !(reader == DBT_READER_OPERATOR && s->worker_only))
            return e;
    }
    return NULL;
}

bool dbt_config_value_ok(const dbt_config *cfg, const char *key)
{
    const dbt_setting *s = dbt_setting_find(key);
    return s && !cfg->row_error[s - dbt_settings];
}

void dbt_config_defaults(dbt_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    /* The defaults are valid values: a parser can fail on one only when memory runs out, and
     * that leaves the field unset (NULL), as a failed strdup of a default always did. */
    char err[DBT_ERRLEN];
    for (const dbt_setting *s = dbt_settings; s->key; s++)
        if (s->default_value)
            (void)s->kind->parse(s, cfg, s->default_value, err);
}

static void forget_errors(dbt_config *cfg)
{
    for (int i = 0; i < DBT_MAX_SETTINGS; i++) {
        free(cfg->row_error[i]);
        cfg->row_error[i] = NULL;
    }
    free(cfg->other_error);
    cfg->other_error = NULL;
}

void dbt_config_free(dbt_config *cfg)
{
    forget_errors(cfg);
    free(cfg->sentinel_password);
    free(cfg->password_file_warning);
    free(cfg->config_password_warning);
    dbt_settings_release(cfg);
    memset(cfg, 0, sizeof *cfg);
}

/* Levenshtein distance, for "did you mean". Names are short, so a small table will do. */
static size_t distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    if (la > 63 || lb > 63)
        return 99;
    size_t d[64][64];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            size_t sub = d[i - 1][j - 1] +
                         (toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]));
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

/* The characters a setting's name is made of. A "key" holding anything else is a line split at
 * the wrong '=' ("redis_url: rediss://:pw@h?x=1"): what follows its name may be a secret. */
#define KEY_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-."

static bool unknown_key(dbt_config *cfg, const char *key_in, char *err)
{
    char key[128];
    size_t n = strspn(key_in, KEY_CHARS);
    bool cut = key_in[n] != '\0';
    snprintf(key, sizeof key, "%.*s", (int)(n < 100 ? n : 100), key_in);
    bool env_form = strncmp(key, "DBTHROTTLE_", PREFIX_LEN) == 0;
    size_t best = 99;
    const dbt_setting *nearest = NULL;
    for (const dbt_setting *s = dbt_settings; s->key; s++) {
        size_t d = distance(key, env_form ? s->env : s->key);
        if (d < best) {
            best = d;
            nearest = s;
        }
    }
    char shown[300];
    dbt_escape(key, 64, false, shown, sizeof shown);
    const char *rest = cut ? "... (the rest not shown: it may hold a secret)" : "";
    if (nearest && best <= 3)
        snprintf(err, DBT_ERRLEN, "unknown setting %s%s (did you mean %s?)", shown, rest,
                 env_form ? nearest->env : nearest->key);
    else
        snprintf(err, DBT_ERRLEN, "unknown setting %s%s", shown, rest);
    note_error(cfg, -1, err);
    return false;
}

bool dbt_config_set(dbt_config *cfg, const char *key, const char *value, dbt_source src, char *err)
{
    const dbt_setting *s = dbt_setting_find(key);
    if (!s)
        return unknown_key(cfg, key, err);
    int row = (int)(s - dbt_settings);
    bool ok;
    if (s->env_only && src == DBT_SRC_FILE) {
        snprintf(err, DBT_ERRLEN, "%s cannot be set inside a config file", s->env);
        ok = false;
    } else if (!value[0]) {
        /* An empty value is a mistake more often than a wish for the default: say so. */
        ok = dbt_bad_value(s->env, value, "empty: give a value or remove the setting", err);
    } else {
        ok = s->kind->parse(s, cfg, value, err);
    }
    if (!ok) {
        note_error(cfg, row, err);
        return false;
    }
    /* A good value replaces a refused one: the setting is what this source says. */
    free(cfg->row_error[row]);
    cfg->row_error[row] = NULL;
    cfg->sources[row] = src;
    return true;
}

dbt_source dbt_config_source(const dbt_config *cfg, const char *short_name)
{
    const dbt_setting *s = dbt_setting_find(short_name);
    return s ? dbt_setting_source(cfg, s) : DBT_SRC_DEFAULT;
}

/* Trims blanks at both ends, in place. */
static char *trim(char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '\r')
        s++;
    char *e = s + strlen(s);
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
        *--e = '\0';
    return s;
}

/* Reads a value: "quoted" (with \" and \\) or bare up to a " #" comment. */
static bool file_value(char *v, char **out, const char **why)
{
    v = trim(v);
    if (*v == '"') {
        char *o = v, *p = v + 1;
        for (; *p && *p != '"'; p++) {
            if (*p == '\\' && (p[1] == '"' || p[1] == '\\'))
                p++;
            *o++ = *p;
        }
        if (*p != '"') {
            *why = "unterminated quote";
            return false;
        }
        char *rest = trim(p + 1);
        if (*rest && *rest != '#') {
            *why = "text after the closing quote";
            return false;
        }
        *o = '\0';
        *out = v;
        return true;
    }
    /* v[-1] is the blank or the (cut) '=' before the value: "pool=#1" keeps its '#'. */
    for (char *p = v; *p; p++)
        if (*p == '#' && (p[-1] == ' ' || p[-1] == '\t')) {
            *p = '\0';
            break;
        }
    *out = trim(v);
    return true;
}

bool dbt_config_parse_text(dbt_config *cfg, const char *name, const char *text, char *err)
{
    /* The file name comes from the environment: escaped, so the message stays one line. */
    char shown[256];
    dbt_escape(name, 160, false, shown, sizeof shown);
    char *copy = strdup(text);
    if (!copy) {
        snprintf(err, DBT_ERRLEN, "%s: out of memory", shown);
        return false;
    }
    bool seen[DBT_MAX_SETTINGS] = {false};
    bool ok = true;
    int lineno = 0;
    char *next = copy;
    char line_err[DBT_ERRLEN];
    /* Editors on some systems start a UTF-8 file with a byte order mark: not part of a key. */
    if (strncmp(next, "\xef\xbb\xbf", 3) == 0)
        next += 3;
    /* strtok_r would skip empty lines and so miscount them: walk the lines by hand. */
    for (char *line = next; line; line = next) {
        char *nl = strchr(line, '\n');
        next = nl ? nl + 1 : NULL;
        if (nl)
            *nl = '\0';
        lineno++;
        char *l = trim(line);
        if (!*l || *l == '#')
            continue;
        char *eq = strchr(l, '=');
        const char *why = NULL;
        char msg[DBT_ERRLEN];
        const dbt_setting *s = NULL;
        bool twice = false, had_other = cfg->other_error != NULL;
        if (!eq) {
            why = "expected key = value";
        } else {
            *eq = '\0';
            char *key = trim(l), *value = NULL;
            if (!*key) {
                why = "missing key before =";
            } else if (file_value(eq + 1, &value, &why)) {
                s = dbt_setting_find(key);
                if (s && seen[s - dbt_settings]) {
                    char key_shown[128];
                    dbt_escape(key, 64, false, key_shown, sizeof key_shown);
                    snprintf(msg, sizeof msg, "%s is set twice", key_shown);
                    why = msg;
                    twice = true;
                } else if (!dbt_config_set(cfg, key, value, DBT_SRC_FILE, msg)) {
                    why = msg;
                } else if (s) {
                    seen[s - dbt_settings] = true;
                }
            }
        }
        if (why) {
            /* Bounded parts: the name, line number and reason always fit in DBT_ERRLEN. */
            snprintf(line_err, sizeof line_err, "%.170s:%d: %.320s", shown, lineno, why);
            /* A value refused is its setting's error, now with its place in the file; a line
             * that names no setting, or one set twice, is the file's (and replaces what
             * dbt_config_set noted of it, which did not say where). */
            if (s && !twice) {
                note_error(cfg, (int)(s - dbt_settings), line_err);
            } else {
                if (!had_other) {
                    free(cfg->other_error);
                    cfg->other_error = NULL;
                }
                note_error(cfg, -1, line_err);
            }
            if (ok)
                snprintf(err, DBT_ERRLEN, "%s", line_err);
            ok = false;
        }
    }
    free(copy);
    return ok;
}

#define MAX_FILE_BYTES (1 << 20)

static bool read_file(const char *path, char **out, char *err)
{
    char shown[256];
    dbt_escape(path, 160, false, shown, sizeof shown);
    FILE *f = fopen(path, "re");
    if (!f) {
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG: cannot read %s: %s", shown, strerror(errno));
        return false;
    }
    /* Read one byte more than allowed to tell "exactly 1 MiB" from "larger". */
    char *buf = malloc(MAX_FILE_BYTES + 1);
    size_t n = 0;
    int read_errno = 0;
    if (buf) {
        n = fread(buf, 1, MAX_FILE_BYTES + 1, f);
        if (ferror(f))
            read_errno = errno ? errno : EIO; /* a directory gives EISDIR here */
    }
    fclose(f);
    const char *why = !buf                   ? "out of memory"
                      : read_errno           ? strerror(read_errno)
                      : n > MAX_FILE_BYTES   ? "larger than 1 MiB"
                      : memchr(buf, '\0', n) ? "contains a NUL byte"
                                             : NULL;
    if (why) {
        free(buf);
        snprintf(err, DBT_ERRLEN, "DBTHROTTLE_CONFIG: cannot read %s: %s", shown, why);
        return false;
    }
    buf[n] = '\0';
    *out = buf;
    return true;
}

/* The DBTHROTTLE_CONFIG entry of envp (the last one, as getenv-style overrides go), or NULL. */
static const char *config_file_of(char *const *envp)
{
    static const char var[] = "DBTHROTTLE_CONFIG=";
    const char *file = NULL;
    for (char *const *e = envp; e && *e; e++)
        if (strncmp(*e, var, sizeof var - 1) == 0)
            file = *e + sizeof var - 1;
    return file;
}

/* ---- password files -------------------------------------------------------------------- */

#define MAX_PASSWORD_BYTES 4096

/* Refuses the setting `key` (its row's error, and err when it is the load's first) with a
 * message naming it and the file, never the file's content. Returns false. */
static bool password_file_bad(dbt_config *cfg, const char *key, const char *path, const char *why,
                              char *err, bool first)
{
    char shown[256], msg[DBT_ERRLEN];
    dbt_escape(path, 160, false, shown, sizeof shown);
    snprintf(msg, sizeof msg, "%s: %s: %s", key, shown, why);
    note_error(cfg, (int)(dbt_setting_find(key) - dbt_settings), msg);
    if (first)
        snprintf(err, DBT_ERRLEN, "%s", msg);
    return false;
}

/* The first line of the file at `path` (newline and CR removed) into *out, as .pgpass is read:
 * a file that group or others may read is used, with a warning kept in cfg. */
static bool read_password_file(dbt_config *cfg, const char *key, const char *path, char **out,
                               char *err, bool first)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        char why[128];
        snprintf(why, sizeof why, "cannot read it: %s", strerror(e));
        return password_file_bad(cfg, key, path, why, err, first);
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return password_file_bad(cfg, key, path, "not a regular file", err, first);
    }
    char buf[MAX_PASSWORD_BYTES + 1];
    size_t n = 0;
    ssize_t got;
    while (n < sizeof buf - 1 &&
           ((got = read(fd, buf + n, sizeof buf - 1 - n)) > 0 || (got < 0 && errno == EINTR)))
        n += got > 0 ? (size_t)got : 0;
    int read_errno = got < 0 ? errno : 0;
    close(fd);
    buf[n] = '\0';
    size_t line = strcspn(buf, "\n");
    while (line > 0 && buf[line - 1] == '\r')
        line--;
    const char *why = read_errno                   ? strerror(read_errno)
                      : memchr(buf, '\0', line)    ? "its first line holds a NUL byte"
                      : line == 0                  ? "its first line is empty"
                      : line >= MAX_PASSWORD_BYTES ? "its first line is longer than 4 KiB"
                                                   : NULL;
    if (why) {
        explicit_bzero(buf, sizeof buf);
        return password_file_bad(cfg, key, path, why, err, first);
    }
    char *pw = strndup(buf, line);
    explicit_bzero(buf, sizeof buf);
    if (!pw)
        return password_file_bad(cfg, key, path, "out of memory", err, first);
    free(*out);
    *out = pw;
    if ((st.st_mode & 077) && !cfg->password_file_warning) {
        char shown[256], msg[DBT_ERRLEN];
        dbt_escape(path, 160, false, shown, sizeof shown);
        snprintf(msg, sizeof msg,
                 "%s: %s is readable by group or others (mode %04o): chmod 600 it, as for "
                 ".pgpass",
                 key, shown, (unsigned)(st.st_mode & 07777));
        cfg->password_file_warning = strdup(msg);
    }
    return true;
}

/* Reads the password files the settings name (once, at the end of the load, when every setting
 * is known). A password given both in the URL and in a file is refused: which one would win is
 * not something an operator should have to guess. */
static bool load_password_files(dbt_config *cfg, char *err, bool first)
{
    bool ok = true;
    if (cfg->redis_password_file && dbt_config_value_ok(cfg, "redis_url") &&
        dbt_config_value_ok(cfg, "redis_password_file")) {
        if (cfg->redis.password)
            ok = password_file_bad(cfg, "DBTHROTTLE_REDIS_PASSWORD_FILE", cfg->redis_password_file,
                                   "DBTHROTTLE_REDIS_URL carries a password too: give it in one "
                                   "place only",
                                   err, first);
        else
            ok = read_password_file(cfg, "DBTHROTTLE_REDIS_PASSWORD_FILE", cfg->redis_password_file,
                                    &cfg->redis.password, err, first);
    }
    if (cfg->sentinel_password_file && dbt_config_value_ok(cfg, "sentinel_password_file") &&
        !read_password_file(cfg, "DBTHROTTLE_SENTINEL_PASSWORD_FILE", cfg->sentinel_password_file,
                            &cfg->sentinel_password, err, first && ok))
        ok = false;
    if (cfg->sentinel_user && !cfg->sentinel_password_file &&
        dbt_config_value_ok(cfg, "sentinel_user")) {
        char msg[DBT_ERRLEN];
        snprintf(msg, sizeof msg,
                 "DBTHROTTLE_SENTINEL_USER: needs DBTHROTTLE_SENTINEL_PASSWORD_FILE (the "
                 "sentinels' password)");
        note_error(cfg, (int)(dbt_setting_find("sentinel_user") - dbt_settings), msg);
        if (first && ok)
            snprintf(err, DBT_ERRLEN, "%s", msg);
        ok = false;
    }
    return ok;
}

/* A Redis password in the settings file's redis_url while group or others may read the file (the
 * installed /etc/dbthrottle.conf is 0644): warned about as a password file would be, with the
 * way out (redis_password_file). Called after the file and before the environment and the
 * password files, so that a password set is the file's URL's. */
static void note_password_in_open_file(dbt_config *cfg, const char *file)
{
    struct stat st;
    if (!file || !cfg->redis.password || dbt_config_source(cfg, "redis_url") != DBT_SRC_FILE ||
        stat(file, &st) != 0 || !(st.st_mode & 077))
        return;
    char shown[256], msg[DBT_ERRLEN];
    dbt_escape(file, 160, false, shown, sizeof shown);
    snprintf(msg, sizeof msg,
             "DBTHROTTLE_CONFIG: %s holds the Redis password (in redis_url) and is readable by "
             "group or others (mode %04o): put the password in redis_password_file (chmod 600, "
             "as for .pgpass) and take it out of the URL",
             shown, (unsigned)(st.st_mode & 07777));
    free(cfg->config_password_warning);
    cfg->config_password_warning = strdup(msg);
}

bool dbt_config_load(dbt_config *cfg, char *const *envp, char *err)
{
    return dbt_config_load_with_default(cfg, envp, DBT_DEFAULT_CONFIG, err);
}

bool dbt_config_load_with_default(dbt_config *cfg, char *const *envp, const char *default_file,
                                  char *err)
{
    dbt_config_defaults(cfg);
    bool ok = true;
    char msg[DBT_ERRLEN];
    const char *file = config_file_of(envp);
    dbt_source file_src = DBT_SRC_ENV;
    /* The installed file applies to every process that has not named one; an operator opts a
     * process out with DBTHROTTLE_CONFIG= (empty). A file that exists but cannot be read is an
     * error, as for a named one: silently running with the defaults instead of the operator's
     * limits would be the worst outcome. */
    struct stat st;
    /* "Exists": anything but ENOENT, so that a dangling symlink or an unsearchable directory is
     * read, and fails loudly, instead of counting as no file. */
    if (!file && default_file && (lstat(default_file, &st) == 0 || errno != ENOENT)) {
        file = default_file;
        file_src = DBT_SRC_DEFAULT;
    } else if (file && !*file) {
        file = NULL;
    }
    /* Recorded first, so a caller reporting a file error can name the file. */
    if (file && !dbt_config_set(cfg, "DBTHROTTLE_CONFIG", file, file_src, err))
        ok = false;
    else if (file) {
        char *text = NULL;
        if (!read_file(file, &text, err)) {
            note_error(cfg, -1, err);
            ok = false;
        } else {
            ok = dbt_config_parse_text(cfg, file, text, err);
            free(text);
        }
    }
    /* Here, before the environment: a DBTHROTTLE_REDIS_URL that overrides the file's leaves its
     * password in the file all the same, readable by whoever may read the file. */
    note_password_in_open_file(cfg, file);
    for (char *const *e = envp; e && *e; e++) {
        if (strncmp(*e, "DBTHROTTLE_", PREFIX_LEN) != 0)
            continue;
        /* Applied above, before the file (an empty one: no file at all). */
        if (strncmp(*e, "DBTHROTTLE_CONFIG=", 18) == 0)
            continue;
        const char *eq = strchr(*e, '=');
        if (!eq)
            continue;
        char key[128];
        size_t klen = (size_t)(eq - *e);
        if (klen >= sizeof key)
            klen = sizeof key - 1;
        memcpy(key, *e, klen);
        key[klen] = '\0';
        if (!dbt_config_set(cfg, key, eq + 1, DBT_SRC_ENV, msg)) {
            if (ok)
                snprintf(err, DBT_ERRLEN, "%s", msg);
            ok = false;
        }
    }
    /* A client certificate without its key (or the reverse) cannot be used: refused as the
     * setting given alone, rather than found at the first TLS connect. */
    if (!cfg->redis_cert != !cfg->redis_key) {
        const char *given = cfg->redis_cert ? "DBTHROTTLE_REDIS_CERT" : "DBTHROTTLE_REDIS_KEY";
        snprintf(msg, sizeof msg,
                 "%s is set without %s: a client certificate needs both DBTHROTTLE_REDIS_CERT "
                 "and DBTHROTTLE_REDIS_KEY",
                 given, cfg->redis_cert ? "DBTHROTTLE_REDIS_KEY" : "DBTHROTTLE_REDIS_CERT");
        note_error(cfg, (int)(dbt_setting_find(given) - dbt_settings), msg);
        if (ok)
            snprintf(err, DBT_ERRLEN, "%s", msg);
        ok = false;
    }
    /* A weight above the limit could never be granted whole (the scripts would clamp it: the
     * command would run alone): a configuration error, said where it is made. */
    for (int i = 0; cfg->max_queries && i < cfg->weights.n; i++)
        if (cfg->weights.rules[i].weight > cfg->max_queries) {
            snprintf(msg, sizeof msg,
                     "DBTHROTTLE_WEIGHTS: bad value: weight %d is above DBTHROTTLE_MAX_QUERIES=%d "
                     "(a command of that weight could never run)",
                     cfg->weights.rules[i].weight, cfg->max_queries);
            note_error(cfg, (int)(dbt_setting_find("weights") - dbt_settings), msg);
            if (ok)
                snprintf(err, DBT_ERRLEN, "%s", msg);
            ok = false;
            break;
        }
    if (!load_password_files(cfg, err, ok))
        ok = false;
    return ok;
}

const char *dbt_source_name(dbt_source s)
{
    return s == DBT_SRC_FILE ? "file" : s == DBT_SRC_ENV ? "environment" : "default";
}
