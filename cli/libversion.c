/* libversion.c - which version a library file is, read from its text: the marker base/version.c
 * puts there ("dbthrottle-version=X.Y.Z"). Nothing of the library is loaded or run, and it needs
 * no exported symbol (the library exports exactly the libpq hooks). */
#include "cli.h"
#include "version.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

bool cli_library_version(const char *path, char *out, size_t cap, char *err, size_t errcap)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errcap, "%s", strerror(errno));
        return false;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) {
        snprintf(err, errcap, "not a library file");
        close(fd);
        return false;
    }
    size_t len = (size_t)st.st_size;
    const char *text = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (text == MAP_FAILED) {
        snprintf(err, errcap, "%s", strerror(errno));
        return false;
    }
    static const char marker[] = DBT_VERSION_MARKER;
    const char *m = memmem(text, len, marker, sizeof marker - 1);
    bool found = false;
    if (m) {
        /* The version runs to the string's NUL: at most a few bytes, printable. */
        const char *v = m + sizeof marker - 1, *end = text + len;
        size_t n = 0;
        while (v + n < end && n < 32 && v[n] > ' ' && v[n] < 0x7f)
            n++;
        found = n > 0 && v + n < end && v[n] == '\0' && n < cap;
        if (found)
            snprintf(out, cap, "%.*s", (int)n, v);
    }
    munmap((void *)text, len);
    if (!found)
        snprintf(err, errcap,
                 "no version in it (a library older than 0.15.0, or not dbthrottle's)");
    return found;
}
