/* next_preload.c - a second preloaded interposer of the classic kind: its geteuid() forwards to
 * dlsym(RTLD_NEXT, "geteuid"). Loaded after libdbthrottle.so, it must still find libc's geteuid:
 * our dlsym hook has to leave RTLD_NEXT relative to the real caller (a tail call), or this
 * would find itself and recurse until the stack runs out. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <unistd.h>

uid_t geteuid(void)
{
    uid_t (*next)(void) = (uid_t(*)(void))dlsym(RTLD_NEXT, "geteuid");
    return next ? next() : (uid_t)-1;
}
