/* hook.h - what makes a function of ours one the program reaches instead of libpq's (or libc's).
 *
 * The library is built with -fvisibility=hidden; HOOK gives a function default visibility, and
 * the version script made from hooks.def exports it. A libpq function marked HOOK must also be
 * listed in hooks.def (tools/check-exports.sh fails otherwise); dlsym and dlopen are the two libc
 * functions we interpose, exported beside the list. */
#ifndef DBT_HOOK_H
#define DBT_HOOK_H

#define HOOK __attribute__((visibility("default")))

#endif
