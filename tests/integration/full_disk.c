/*
 * A full disk for one process, without root: LD_PRELOAD this into a process (a Kafka broker)
 * and its writes to files under $PGBRIDGE_FULL_DISK_DIR fail with ENOSPC, as on a full file
 * system, while the file $PGBRIDGE_FULL_DISK_FLAG exists. Everything else is untouched.
 *
 * Built by tests/integration/full_disk.py (cc -shared -fPIC); used by the fault rig.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static const char *flag = NULL, *dir = NULL; /* from the environment, read once */
static size_t dir_len = 0;

static int full_now(void) {
    static struct timespec checked = {0, 0};
    static int full = 0;
    if (dir == NULL) {
        flag = getenv("PGBRIDGE_FULL_DISK_FLAG");
        dir = getenv("PGBRIDGE_FULL_DISK_DIR");
        if (flag == NULL || dir == NULL) {
            dir = "";
            return 0;
        }
        dir_len = strlen(dir);
    }
    if (dir_len == 0) return 0;
    /* The flag is looked at every 20 ms at most: a broker writes far more often than that. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
    long elapsed_ms = (now.tv_sec - checked.tv_sec) * 1000 + (now.tv_nsec - checked.tv_nsec) / 1000000;
    if (elapsed_ms >= 20 || elapsed_ms < 0) {
        full = access(flag, F_OK) == 0;
        checked = now;
    }
    return full;
}

static int on_full_disk(int fd) {
    if (!full_now()) return 0;
    char link[64], path[PATH_MAX];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, sizeof path - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return strncmp(path, dir, dir_len) == 0;
}

#define REAL(name) static __typeof__(name) *real_##name; \
    if (!real_##name) real_##name = (__typeof__(name) *)dlsym(RTLD_NEXT, #name)

ssize_t write(int fd, const void *buf, size_t count) {
    REAL(write);
    if (on_full_disk(fd)) { errno = ENOSPC; return -1; }
    return real_write(fd, buf, count);
}

ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset) {
    REAL(pwrite);
    if (on_full_disk(fd)) { errno = ENOSPC; return -1; }
    return real_pwrite(fd, buf, count, offset);
}

ssize_t pwrite64(int fd, const void *buf, size_t count, off64_t offset) {
    REAL(pwrite64);
    if (on_full_disk(fd)) { errno = ENOSPC; return -1; }
    return real_pwrite64(fd, buf, count, offset);
}

ssize_t writev(int fd, const struct iovec *iov, int iovcnt) {
    REAL(writev);
    if (on_full_disk(fd)) { errno = ENOSPC; return -1; }
    return real_writev(fd, iov, iovcnt);
}

ssize_t pwritev(int fd, const struct iovec *iov, int iovcnt, off_t offset) {
    REAL(pwritev);
    if (on_full_disk(fd)) { errno = ENOSPC; return -1; }
    return real_pwritev(fd, iov, iovcnt, offset);
}

int fallocate(int fd, int mode, off_t offset, off_t len) {
    REAL(fallocate);
    if (on_full_disk(fd)) { errno = ENOSPC; return -1; }
    return real_fallocate(fd, mode, offset, len);
}
