/* dlsym_check.c LIB NAME... - run with LIB preloaded: for each NAME (the libpq functions LIB
 * exports), asks a dlopen()ed libpq for it the way ctypes does (psycopg 3), and reports every
 * name for which the answer is not LIB's own function: such a program would call libpq directly,
 * unthrottled (a cancel of it would not end a wait for a permit).
 *
 * Not linked with libpq: like a Python process, it has libpq only through its own dlopen, local
 * to that handle. LIB's function is what dlsym on LIB's own handle returns; a preload also wins
 * the global lookup, which is checked too. Prints "dlsym: N of N hooks" or one line per wrong
 * name; exits 1 on any. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: dlsym_check LIB NAME...\n");
        return 2;
    }
    void *ours = dlopen(argv[1], RTLD_NOW | RTLD_NOLOAD);
    void *libpq = dlopen("libpq.so.5", RTLD_NOW);
    if (!ours || !libpq) {
        fprintf(stderr, "dlsym_check: %s\n", dlerror());
        return 2;
    }
    int wrong = 0;
    for (int i = 2; i < argc; i++) {
        const char *name = argv[i];
        void *hook = dlsym(ours, name);
        void *global = dlsym(RTLD_DEFAULT, name);
        void *through_handle = dlsym(libpq, name);
        if (!hook || global != hook || through_handle != hook) {
            printf("%s: ours %p, global %p, libpq handle %p\n", name, hook, global, through_handle);
            wrong++;
        }
    }
    if (wrong)
        printf("dlsym: %d of %d hooks not returned for a libpq handle\n", wrong, argc - 2);
    else
        printf("dlsym: %d of %d hooks\n", argc - 2, argc - 2);
    return wrong ? 1 : 0;
}
