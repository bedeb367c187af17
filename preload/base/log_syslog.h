/* log_syslog.h - the syslog side of the log: the socket, the priority and the header. */
#ifndef DBT_LOG_SYSLOG_H
#define DBT_LOG_SYSLOG_H

#include "config.h"

#include <stdbool.h>
#include <stddef.h>

/* Connects a close-on-exec socket to the syslog socket at path (datagram, or stream where the
 * path is one: then *stream). Returns the fd, or -1 with errno set. */
int dbt_syslog_connect(const char *path, bool *stream);

/* The <PRI> of a line: the facility (a dbt_log_facility) and the level's severity. */
int dbt_syslog_priority(int facility_index, dbt_log_level level);

/* Writes "<PRI>Mmm dd hh:mm:ss ident[pid]: " into buf (NUL-terminated); returns its length. */
size_t dbt_syslog_header(char *buf, size_t cap, int priority, const char *ident, long pid);

/* Sends one message (msg[len] must be its NUL) without ever blocking; false when it did not go
 * whole (the daemon is gone, restarted, or not reading). */
bool dbt_syslog_send(int fd, bool stream, const char *msg, size_t len);

#endif
