/* version.h - the library's version, reported by each process in dbthrottle status (so that an
 * operator sees which workers still run an old build). */
#ifndef DBT_VERSION_H
#define DBT_VERSION_H

#define DBT_VERSION "0.14.0"

#endif
