/*
llmc/fileio.h: the host-side checks on files and memory that every loader shares: the checked
malloc/fopen/fread of the trainer (print where and what, then exit), fopen_regular(), the one
way a loader opens an input file, and the liveness of a process that a file names (the folder
lock of checkpoint.h, the rendezvous cards of comm.cuh).

Entry points: fopen_regular, FOPEN_CHECK / FREAD_CHECK / MALLOC_CHECK, process_gone.

fopen_regular opens a path for reading only when it is a regular file, and returns its size.
A FIFO, a directory, a device or a socket given where a data shard, a tokenizer or a checkpoint
belongs is refused with a message naming the path and what it is, instead of hanging in a
blocking open (a FIFO without a writer), reading a nonsense size (a directory) or a device
without end. Race-free: the file is opened with O_NONBLOCK (which never blocks, whatever the
file is) and judged by fstat on that descriptor, so the file checked is the file read; then
O_NONBLOCK is cleared, since it means nothing for a regular file. Loaders compare every count
they read against the size it returns before they allocate for it.

Plain C/C++ with no CUDA: the parsers that include it (dataloader.h, tokenizer.h,
checkpoint.h) build with any host compiler, e.g. the fuzz harnesses in fuzz/.
*/
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

// ---------------------------------------------------------------------------------------------
// Checks that stop the program: print where and what, then exit.

inline FILE* fopen_check(const char* path, const char* mode, const char* file, int line) {
    FILE* f = fopen(path, mode);
    if (f == nullptr) {
        fprintf(stderr, "error at %s:%d: cannot open '%s' (mode %s): %s\n", file, line, path, mode,
                strerror(errno));
        exit(EXIT_FAILURE);
    }
    return f;
}
#define FOPEN_CHECK(path, mode) fopen_check((path), (mode), __FILE__, __LINE__)

inline void fread_check(void* dst, size_t size, size_t count, FILE* f, const char* file, int line) {
    size_t got = fread(dst, size, count, f);
    if (got != count) {
        fprintf(stderr, "error at %s:%d: read %zu of %zu items of %zu bytes (%s)\n", file, line,
                got, count, size, feof(f) ? "file too short" : strerror(errno));
        exit(EXIT_FAILURE);
    }
}
#define FREAD_CHECK(dst, size, count, f) \
    fread_check((dst), (size), (count), (f), __FILE__, __LINE__)

inline void* malloc_check(size_t bytes, const char* file, int line) {
    void* p = malloc(bytes);
    if (p == nullptr && bytes > 0) {
        fprintf(stderr, "error at %s:%d: out of host memory allocating %zu bytes\n", file, line,
                bytes);
        exit(EXIT_FAILURE);
    }
    return p;
}
#define MALLOC_CHECK(bytes) malloc_check((bytes), __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------
// Opening input files.

// What a file that is not a regular file is, for messages.
inline const char* file_kind_name(mode_t mode) {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "a special file";
}

// Opens `path` for reading ("rb") when it is a regular file and sets *size to its size in bytes.
// Returns NULL with "cannot open WHAT PATH: CAUSE" in err otherwise (`what` names the role of
// the file: "shard", "tokenizer file", "checkpoint").
inline FILE* fopen_regular(const char* path, const char* what, int64_t* size, char* err,
                           size_t err_size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, err_size, "cannot open %s %s: %s", what, path, strerror(errno));
        return nullptr;
    }
    struct stat st;
    char cause[128] = "";
    if (fstat(fd, &st) != 0) {
        snprintf(cause, sizeof(cause), "%s", strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        snprintf(cause, sizeof(cause), "it is %s, not a regular file", file_kind_name(st.st_mode));
    } else {
        int flags = fcntl(fd, F_GETFL);
        if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
            snprintf(cause, sizeof(cause), "%s", strerror(errno));
    }
    FILE* f = cause[0] == '\0' ? fdopen(fd, "rb") : nullptr;
    if (f == nullptr) {
        if (cause[0] == '\0') snprintf(cause, sizeof(cause), "%s", strerror(errno));
        close(fd);
        snprintf(err, err_size, "cannot open %s %s: %s", what, path, cause);
        return nullptr;
    }
    *size = (int64_t)st.st_size;
    return f;
}

// ---------------------------------------------------------------------------------------------
// Processes named in files. A process is named by its host, pid and start time (field 22 of
// /proc/PID/stat, clock ticks since boot), which tells a reused pid from the original.

// The state (field 3 of /proc/PID/stat: R, S, D, Z for a zombie, ...) and start time of process
// pid; false where /proc does not say.
inline bool process_stat(long pid, char* state, unsigned long long* start) {
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
    FILE* f = fopen(path, "r");
    if (f == nullptr) return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char* p = strrchr(buf, ')');  // the command name may hold spaces and parentheses
    // after ") " come fields 3 (state) .. 21, then 22: starttime
    return p != nullptr && sscanf(p + 2,
                                  "%c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                                  "%*s %*s %*s %*s %llu",
                                  state, start) == 2;
}

// The start time of process pid, 0 where /proc does not say.
inline unsigned long long process_start_time(long pid) {
    char state;
    unsigned long long start;
    return process_stat(pid, &state, &start) ? start : 0;
}

// Whether the process (host, pid, start) is known to have ended: it is of this host (my_host)
// and no process runs here with that pid, or the one that does started at another time, or it
// is a zombie (it has exited; its parent has not collected it yet: a rank whose mpirun ended
// before it, until init collects it, which may take a while or, in a container whose first
// process collects nothing, forever). A process of another host is never known to have ended.
inline int process_gone(const char* host, long pid, unsigned long long start, const char* my_host) {
    if (strcmp(host, my_host) != 0) return 0;
    if (kill((pid_t)pid, 0) != 0 && errno == ESRCH) return 1;
    char state;
    unsigned long long now_start;
    if (!process_stat(pid, &state, &now_start)) return 0;
    return (now_start != 0 && start != 0 && now_start != start) || state == 'Z' || state == 'X';
}
