/* hooks_dlopen.c - libraries loaded with RTLD_DEEPBIND still reach our hooks.
 *
 * PHP loads its extensions with RTLD_DEEPBIND: a library opened that way binds its symbols to its
 * own dependencies first, so pgsql.so's calls go straight to libpq and no preload ever sees them.
 * When a library asked for with RTLD_DEEPBIND needs libpq itself (DT_NEEDED libpq.so.*), it is
 * opened without that flag, so its libpq calls resolve the usual way, through us. Any other
 * library keeps the flags it was asked with. */
#include "hook.h"
#include "real.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdbool.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* Maps a virtual address of the file to its offset, through the PT_LOAD segments. */
static bool vaddr_to_offset(const Elf64_Phdr *ph, int n, Elf64_Addr a, size_t size, size_t *off)
{
    for (int i = 0; i < n; i++)
        if (ph[i].p_type == PT_LOAD && a >= ph[i].p_vaddr && a < ph[i].p_vaddr + ph[i].p_filesz) {
            *off = (size_t)(a - ph[i].p_vaddr + ph[i].p_offset);
            return *off < size;
        }
    return false;
}

/* True when the ELF file at path lists libpq among its DT_NEEDED entries. Reads the file only;
 * anything unexpected answers false. */
static bool needs_libpq(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    bool found = false;
    if (fstat(fd, &st) != 0 || st.st_size < (off_t)sizeof(Elf64_Ehdr)) {
        close(fd);
        return false;
    }
    size_t size = (size_t)st.st_size;
    const unsigned char *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return false;
    const Elf64_Ehdr *eh = (const Elf64_Ehdr *)m;
    if (memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
        eh->e_phoff + (size_t)eh->e_phnum * sizeof(Elf64_Phdr) > size)
        goto out;
    const Elf64_Phdr *ph = (const Elf64_Phdr *)(m + eh->e_phoff);
    for (int i = 0; i < eh->e_phnum; i++) {
        if (ph[i].p_type != PT_DYNAMIC || ph[i].p_offset + ph[i].p_filesz > size)
            continue;
        const Elf64_Dyn *dyn = (const Elf64_Dyn *)(m + ph[i].p_offset);
        size_t ndyn = ph[i].p_filesz / sizeof(Elf64_Dyn), strtab = 0;
        Elf64_Addr strtab_addr = 0;
        for (size_t j = 0; j < ndyn && dyn[j].d_tag != DT_NULL; j++)
            if (dyn[j].d_tag == DT_STRTAB)
                strtab_addr = dyn[j].d_un.d_ptr;
        if (!strtab_addr || !vaddr_to_offset(ph, eh->e_phnum, strtab_addr, size, &strtab))
            goto out;
        for (size_t j = 0; j < ndyn && dyn[j].d_tag != DT_NULL; j++) {
            if (dyn[j].d_tag != DT_NEEDED || strtab + dyn[j].d_un.d_val >= size)
                continue;
            const char *name = (const char *)m + strtab + dyn[j].d_un.d_val;
            size_t left = size - (strtab + dyn[j].d_un.d_val);
            if (left > 8 && strncmp(name, "libpq.so", 8) == 0)
                found = true;
        }
    }
out:
    munmap((void *)m, size);
    return found;
}

HOOK void *dlopen(const char *file, int mode)
{
    dbt_dlopen_fn real = dbt_real_dlopen();
    if (!real)
        return NULL;
    if (file && (mode & RTLD_DEEPBIND) && strchr(file, '/') && needs_libpq(file))
        mode &= ~RTLD_DEEPBIND;
    /* A tail call (a jump): glibc resolves a bare name with the RUNPATH of the object that called
     * dlopen, which it finds from the return address, so that must stay the program's. */
    return real(file, mode);
}
