/* log.h - trace and error lines: one write() per line, logfmt or JSON, never a secret. */
#ifndef DBT_LOG_H
#define DBT_LOG_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum { DBT_F_STR, DBT_F_INT, DBT_F_MS } dbt_field_type;

/* One key=value of a log line. DBT_F_MS is a duration in milliseconds printed with 3 decimals. */
typedef struct {
    const char *key;
    dbt_field_type type;
    const char *s; /* DBT_F_STR; NULL prints as empty */
    int64_t i;     /* DBT_F_INT */
    double ms;     /* DBT_F_MS */
} dbt_field;

#define DBT_S(k, v)  ((dbt_field){.key = (k), .type = DBT_F_STR, .s = (v)})
#define DBT_I(k, v)  ((dbt_field){.key = (k), .type = DBT_F_INT, .i = (int64_t)(v)})
#define DBT_MS(k, v) ((dbt_field){.key = (k), .type = DBT_F_MS, .ms = (double)(v)})

/* Opens the destination named by cfg: stderr; a file (created 0600, O_APPEND|O_CLOEXEC), opened
 * again by the writers when its path comes to name another file or none (rotation); or syslog
 * ("syslog": /dev/log, "syslog:/path": that socket; cfg->log_facility). Also learns the host and
 * program names every line carries. Returns false with a message in err if the file cannot be
 * opened (the logger then uses stderr) or syslog cannot be reached (lines go to stderr until it
 * can). Safe to call again. */
bool dbt_log_open(const dbt_config *cfg, char *err);

/* Opens the log file's path again now (or reconnects to syslog): for a program's own SIGHUP
 * handling (its main loop, not the handler: this takes a lock). False with a message in err when
 * it cannot (the old file keeps the lines). */
bool dbt_log_reopen(char *err);

void dbt_log_close(void);

/* The levels' names, by dbt_log_level: the words each line says and DBTHROTTLE_LOG_LEVEL takes. */
extern const char *const dbt_log_level_words[DBT_LOG_DEBUG + 1];

/* True when a line at `level` would be written: call before building costly fields. */
bool dbt_log_enabled(dbt_log_level level);

/* Writes one line: ts, level, event, then the fields in order, then host, prog, pid and tid
 * (to syslog: level, event, the fields and tid, after syslog's own header). */
void dbt_log(dbt_log_level level, const char *event, const dbt_field *fields, size_t nfields);
/* The same, whatever the process' level: for a line whose caller decided by a level of its own
 * (a pool's live log_level: sem/trace.c). */
void dbt_log_at_own_level(dbt_log_level level, const char *event, const dbt_field *fields,
                          size_t nfields);

/* The same, for a line the operator asked for by a setting of its own (DBTHROTTLE_LOG_STATS):
 * written at any log level but off. */
void dbt_log_requested(dbt_log_level level, const char *event, const dbt_field *fields,
                       size_t nfields);

/* Formats one line into buf (always NUL-terminated, ends with '\n'); returns its length. Values
 * longer than 1024 bytes are cut and end in "...". ts NULL: no ts field (syslog's lines). Pure:
 * used by dbt_log and the unit tests. */
size_t dbt_log_format_line(char *buf, size_t cap, dbt_log_format fmt, const char *ts,
                           dbt_log_level level, const char *event, const dbt_field *fields,
                           size_t nfields);

/* Redaction helpers: never let a secret reach a line. */
/* Copies a redis:// URL with the password replaced by "***", and with it whatever a malformed
 * one may hold as a password (see redact.c). strlen(url) + DBT_REDACT_ROOM bytes always hold the
 * whole copy. */
#define DBT_REDACT_ROOM 8
void dbt_redact_url(const char *url, char *out, size_t cap);
/* Copies a libpq conninfo string ("key=value ..." or a postgres:// URI) with password values
 * replaced by "***". */
void dbt_redact_conninfo(const char *conninfo, char *out, size_t cap);

#endif
