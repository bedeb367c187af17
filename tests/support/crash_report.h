/* crash_report.h - a test program that dies of a fault says where on stderr (crash_report.c). */
#ifndef DBT_TEST_CRASH_REPORT_H
#define DBT_TEST_CRASH_REPORT_H

/* Installs the report for the fatal signals that have no handler yet; NAME starts its lines. */
void crash_report_install(const char *name);

#endif
