/*
llmc/checkpoint.h: saving and restoring the training state, so a run killed at any moment can
continue from its last checkpoint as if it had never stopped. Host code only: the caller stages
device tensors through host memory and hands the bytes over section by section.

Entry points: writing: ckpt_new_save, ckpt_writer_begin_part, ckpt_section_begin /
ckpt_section_write / ckpt_write_section, ckpt_writer_commit, ckpt_manifest_save, ckpt_shard_name;
reading: ckpt_find_latest, ckpt_peek_config, ckpt_open / ckpt_close, ckpt_has_section,
ckpt_read_section / ckpt_read_section_part, ckpt_check_shard; the folder lock:
ckpt_lock_for_process.

File format (every integer is a little-endian uint64; ckpt_stepSSSSSSSS.bin, S = step, %08llu):
    header   32 bytes   "GPT-CKPT" | version (1) | step | config_bytes
    config   config_bytes bytes, the caller's configuration struct as given to the writer
    sections any number of: name (64 bytes: 1 to 63 characters, NUL-padded) | size | size bytes
    trailer  32 bytes   "CKPT-END" | section_count | file_size | crc
crc is the CRC-32 of every byte of the file before it: the CRC of zlib, PNG and Ethernet
(reflected polynomial 0xEDB88320), written here so there is no library to link (software
slicing-by-8, 1-2 GB/s on one core). Python checks a file with zlib.crc32(data[:-8]).

Reading (ckpt_open) checks, in this order: that the path is a regular file (a FIFO, a
directory or a device is refused, never read: fopen_regular in fileio.h), the magic, the
version, the end marker and the file size in the trailer against the real size (a truncated
file, or one with bytes appended, has no end marker where the trailer should be), the CRC over
the whole file (any flipped byte, burst errors up to 32 bits are always caught), the section
table, and last that the stored configuration equals the caller's byte for byte. A
configuration mismatch names the fields that differ when the caller passes a field table;
otherwise it says the checkpoint was written for a different model configuration. Compare
configurations made only of fixed-size fields with no padding, or memset them to zero before
filling them, so padding bytes cannot differ. ckpt_peek_config reads the stored configuration
alone, for a caller that takes the model's shape from the checkpoint before ckpt_open.

Writing is crash safe. The writer streams into a temporary file in the checkpoint directory
(.ckpt_stepSSSSSSSS.bin.tmpPID, which ckpt_find_latest never picks), computing the CRC as the
bytes go by; commit writes the trailer, then fflush + fsync + close, renames the file over the
final name (atomic: a reader sees the old file or the complete new one, never a mix, and an
existing checkpoint is never modified in place), and fsyncs the directory so the rename itself
survives a power cut. Only after that does keep_last delete older checkpoints. Any failure
removes the temporary file and leaves every committed checkpoint as it was. One run per
directory: the folder lock (at the end of this file) keeps a second run out, and its holder
deletes the temporary files crashed runs left.

Errors: every function returns 0 on success (ckpt_find_latest: 1 found, 0 none) and -1 on
failure with a message in the struct's error field (or err) naming the file and the cause; the
caller prints it and exits non-zero. Running out of host memory exits at once (MALLOC_CHECK).
*/
#pragma once

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <signal.h>
#include <unistd.h>

#include "fileio.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "checkpoint files store integers in host order, which must be little-endian");

#define CKPT_MAGIC "GPT-CKPT"
#define CKPT_END_MARKER "CKPT-END"
#define CKPT_VERSION 1
#define CKPT_HEADER_BYTES 32
#define CKPT_TRAILER_BYTES 32
#define CKPT_NAME_BYTES 64  // section name field; names are 1 to 63 characters
#define CKPT_SECTION_HEADER_BYTES (CKPT_NAME_BYTES + 8)
#define CKPT_PATH_BYTES 4096                   // a checkpoint's path
#define CKPT_DIR_BYTES (CKPT_PATH_BYTES - 64)  // its directory: room for the file name
#define CKPT_ERROR_BYTES (2 * CKPT_PATH_BYTES + 256)
#define CKPT_IO_CHUNK ((size_t)8 << 20)  // reads and writes go in pieces of at most this

// ---------------------------------------------------------------------------------------------
// CRC-32 (zlib's): crc = ckpt_crc32(0, data, n), or chained over pieces,
// ckpt_crc32(ckpt_crc32(0, a, na), b, nb) == CRC of a followed by b.
//
// Slicing-by-8: table[0] is the classic byte-at-a-time table; table[k][b] is the CRC effect of
// byte b followed by k zero bytes, so eight bytes are folded in with eight independent lookups
// instead of a chain of eight.

struct Crc32Tables {
    uint32_t t[8][256];
};

inline Crc32Tables crc32_make_tables() {
    Crc32Tables c;
    for (uint32_t b = 0; b < 256; b++) {
        uint32_t r = b;
        for (int bit = 0; bit < 8; bit++) r = (r >> 1) ^ (0xEDB88320u & (0u - (r & 1u)));
        c.t[0][b] = r;
    }
    for (int k = 1; k < 8; k++)
        for (int b = 0; b < 256; b++)
            c.t[k][b] = (c.t[k - 1][b] >> 8) ^ c.t[0][c.t[k - 1][b] & 0xff];
    return c;
}

inline uint32_t ckpt_crc32(uint32_t crc, const void* data, size_t n) {
    static const Crc32Tables tables = crc32_make_tables();  // built once, thread-safe
    const uint32_t(*t)[256] = tables.t;
    const uint8_t* p = (const uint8_t*)data;
    crc = ~crc;
    for (; n >= 8; n -= 8, p += 8) {
        uint64_t w;
        memcpy(&w, p, 8);  // little-endian: the first byte is the low byte
        w ^= crc;
        crc = t[7][w & 0xff] ^ t[6][(w >> 8) & 0xff] ^ t[5][(w >> 16) & 0xff] ^
              t[4][(w >> 24) & 0xff] ^ t[3][(w >> 32) & 0xff] ^ t[2][(w >> 40) & 0xff] ^
              t[1][(w >> 48) & 0xff] ^ t[0][w >> 56];
    }
    for (; n > 0; n--, p++) crc = t[0][(crc ^ *p) & 0xff] ^ (crc >> 8);
    return ~crc;
}

// ---------------------------------------------------------------------------------------------
// Directory helpers.

// Parses a final checkpoint name, exactly as ckpt_final_name writes it. Returns 1 and the step.
inline int ckpt_parse_name(const char* name, uint64_t* step) {
    const char* prefix = "ckpt_step";
    size_t np = strlen(prefix), n = strlen(name);
    if (n < np + 8 + 4 || strncmp(name, prefix, np) != 0 || strcmp(name + n - 4, ".bin") != 0)
        return 0;
    uint64_t s = 0;
    for (size_t i = np; i < n - 4; i++) {
        if (name[i] < '0' || name[i] > '9' || s > (UINT64_MAX - 9) / 10) return 0;
        s = s * 10 + (uint64_t)(name[i] - '0');
    }
    char canonical[64];
    snprintf(canonical, sizeof(canonical), "ckpt_step%08llu.bin", (unsigned long long)s);
    if (strcmp(canonical, name) != 0) return 0;  // e.g. extra leading zeros
    *step = s;
    return 1;
}

inline int ckpt_cmp_u64(const void* a, const void* b) {
    uint64_t x = *(const uint64_t*)a, y = *(const uint64_t*)b;
    return x < y ? -1 : x > y;
}

// The steps of the checkpoint files in dir, ascending, in a malloc'ed array (free it). A
// directory that does not exist holds none. Returns 0, or -1 with a message.
inline int ckpt_list(const char* dir, uint64_t** steps, size_t* count, char* err, size_t err_size) {
    *steps = NULL;
    *count = 0;
    DIR* d = opendir(dir);
    if (d == NULL) {
        if (errno == ENOENT) return 0;
        snprintf(err, err_size, "cannot list checkpoint directory %s: %s", dir, strerror(errno));
        return -1;
    }
    size_t cap = 0;
    struct dirent* e;
    errno = 0;
    while ((e = readdir(d)) != NULL) {
        uint64_t s;
        if (!ckpt_parse_name(e->d_name, &s)) continue;
        if (*count == cap) {
            cap = cap ? 2 * cap : 16;
            uint64_t* grown = (uint64_t*)MALLOC_CHECK(cap * sizeof(uint64_t));
            if (*count) memcpy(grown, *steps, *count * sizeof(uint64_t));
            free(*steps);
            *steps = grown;
        }
        (*steps)[(*count)++] = s;
    }
    int read_errno = errno;
    closedir(d);
    if (read_errno != 0) {
        snprintf(err, err_size, "cannot list checkpoint directory %s: %s", dir,
                 strerror(read_errno));
        free(*steps);
        *steps = NULL;
        *count = 0;
        return -1;
    }
    if (*count > 1) qsort(*steps, *count, sizeof(uint64_t), ckpt_cmp_u64);
    return 0;
}

inline void ckpt_final_name(char* out, size_t size, const char* dir, uint64_t step) {
    snprintf(out, size, "%s/ckpt_step%08llu.bin", dir, (unsigned long long)step);
}

// fsync of a directory makes the names created, renamed or removed in it durable.
inline int ckpt_fsync_dir(const char* dir, char* err, size_t err_size) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        snprintf(err, err_size, "cannot fsync directory %s: %s", dir, strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

inline void ckpt_put_u64(uint8_t* dst, uint64_t v) { memcpy(dst, &v, 8); }
inline uint64_t ckpt_get_u64(const uint8_t* src) {
    uint64_t v;
    memcpy(&v, src, 8);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Writer. Usage:
//     CheckpointWriter w;
//     if (ckpt_writer_begin(&w, dir, step, &config, sizeof(config)) != 0 ||
//         ckpt_write_section(&w, "params", params, bytes) != 0 || ... ||
//         ckpt_writer_commit(&w, keep_last) != 0) { print w.error; exit(1); }
// A large section can be streamed in pieces: ckpt_section_begin(&w, name, total bytes), then
// ckpt_section_write(&w, piece, n) until total bytes have been given.
// After a failure the temporary file is already gone; ckpt_writer_abort abandons a checkpoint
// that is still open (the caller's own error) and may be called at any time.

typedef struct {
    FILE* file;  // the temporary file; NULL when no checkpoint is open
    char dir[CKPT_DIR_BYTES];
    char tmp_path[CKPT_PATH_BYTES];
    char final_path[CKPT_PATH_BYTES];
    uint64_t step;
    uint64_t bytes_written;  // everything so far, = the offset of the next byte
    uint32_t crc;            // CRC of those bytes
    uint64_t section_count;
    int shard;                           // a shard file (no pruning at its commit)
    uint64_t
        keep_before;  // pruning also keeps the newest checkpoint of a step below this (0: none)
    char section_name[CKPT_NAME_BYTES];  // the section being written
    uint64_t section_left;               // bytes it still expects
    char (*names)[CKPT_NAME_BYTES];      // every section name so far (no duplicates)
    size_t names_cap;
    char error[CKPT_ERROR_BYTES];
} CheckpointWriter;

// Closes and removes the temporary file, if any, and frees the name list.
inline void ckpt_writer_abort(CheckpointWriter* w) {
    if (w->file != NULL) {
        fclose(w->file);
        w->file = NULL;
        unlink(w->tmp_path);
    }
    free(w->names);
    w->names = NULL;
    w->names_cap = 0;
}

// A call on a writer that is not open: keeps the message of the failure that closed it.
inline int ckpt_writer_not_open(CheckpointWriter* w) {
    if (w->error[0] == '\0') snprintf(w->error, sizeof(w->error), "no checkpoint is open");
    return -1;
}

// Records a failure: message into w->error (printf-style), temporary file removed.
__attribute__((format(printf, 2, 3))) inline int ckpt_writer_fail(CheckpointWriter* w,
                                                                  const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(w->error, sizeof(w->error), fmt, args);
    va_end(args);
    ckpt_writer_abort(w);
    return -1;
}

// Appends bytes to the file and the CRC.
inline int ckpt_writer_put(CheckpointWriter* w, const void* data, size_t n) {
    const uint8_t* p = (const uint8_t*)data;
    while (n > 0) {
        size_t piece = n < CKPT_IO_CHUNK ? n : CKPT_IO_CHUNK;
        if (fwrite(p, 1, piece, w->file) != piece)
            return ckpt_writer_fail(w, "cannot write checkpoint %s: %s", w->tmp_path,
                                    strerror(errno));
        w->crc = ckpt_crc32(w->crc, p, piece);
        w->bytes_written += piece;
        p += piece;
        n -= piece;
    }
    return 0;
}

// The file of rank `rank`'s shard of the checkpoint of `step` (see "Sharded checkpoints").
inline void ckpt_shard_name(char* out, size_t size, const char* dir, uint64_t step, int rank) {
    snprintf(out, size, "%s/ckpt_step%08llu.rank%05d.bin", dir, (unsigned long long)step, rank);
}

// Opens a checkpoint file for writing: the manifest of `step` (rank < 0), or rank `rank`'s shard.
inline int ckpt_writer_begin_file(CheckpointWriter* w, const char* dir, uint64_t step, int rank,
                                  const void* config, size_t config_size) {
    memset(w, 0, sizeof(*w));
    if (strlen(dir) >= CKPT_DIR_BYTES) {
        snprintf(w->error, sizeof(w->error), "checkpoint directory name too long: %s", dir);
        return -1;
    }
    snprintf(w->dir, sizeof(w->dir), "%s", dir);
    w->step = step;
    w->shard = rank >= 0;
    if (rank < 0) ckpt_final_name(w->final_path, sizeof(w->final_path), dir, step);
    else ckpt_shard_name(w->final_path, sizeof(w->final_path), dir, step, rank);
    const char* base = strrchr(w->final_path, '/') + 1;
    snprintf(w->tmp_path, sizeof(w->tmp_path), "%s/.%s.tmp%ld", dir, base, (long)getpid());
    struct stat st;
    if (stat(dir, &st) != 0) {
        snprintf(w->error, sizeof(w->error), "checkpoint directory %s: %s", dir, strerror(errno));
        return -1;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(w->error, sizeof(w->error), "checkpoint directory %s is not a directory", dir);
        return -1;
    }
    w->file = fopen(w->tmp_path, "wb");
    if (w->file == NULL) {
        snprintf(w->error, sizeof(w->error), "cannot create checkpoint file %s: %s", w->tmp_path,
                 strerror(errno));
        return -1;
    }
    uint8_t header[CKPT_HEADER_BYTES];
    memcpy(header, CKPT_MAGIC, 8);
    ckpt_put_u64(header + 8, CKPT_VERSION);
    ckpt_put_u64(header + 16, step);
    ckpt_put_u64(header + 24, config_size);
    if (ckpt_writer_put(w, header, sizeof(header)) != 0) return -1;
    return ckpt_writer_put(w, config, config_size);
}

// The checkpoint file of `step` itself (its manifest, when it has shards).
inline int ckpt_writer_begin(CheckpointWriter* w, const char* dir, uint64_t step,
                             const void* config, size_t config_size) {
    return ckpt_writer_begin_file(w, dir, step, -1, config, config_size);
}

inline int ckpt_section_begin(CheckpointWriter* w, const char* name, size_t size) {
    if (w->file == NULL) return ckpt_writer_not_open(w);
    if (w->section_left != 0)
        return ckpt_writer_fail(w, "checkpoint %s: section '%s' is missing %llu bytes",
                                w->final_path, w->section_name,
                                (unsigned long long)w->section_left);
    size_t len = strlen(name);
    if (len == 0 || len >= CKPT_NAME_BYTES)
        return ckpt_writer_fail(w,
                                "checkpoint %s: section name '%s' must have 1 to %d "
                                "characters",
                                w->final_path, name, CKPT_NAME_BYTES - 1);
    for (uint64_t i = 0; i < w->section_count; i++)
        if (strcmp(w->names[i], name) == 0)
            return ckpt_writer_fail(w, "checkpoint %s: section '%s' written twice", w->final_path,
                                    name);
    if (w->section_count == w->names_cap) {
        w->names_cap = w->names_cap ? 2 * w->names_cap : 16;
        char(*grown)[CKPT_NAME_BYTES] =
            (char(*)[CKPT_NAME_BYTES])MALLOC_CHECK(w->names_cap * CKPT_NAME_BYTES);
        if (w->section_count) memcpy(grown, w->names, w->section_count * CKPT_NAME_BYTES);
        free(w->names);
        w->names = grown;
    }
    uint8_t head[CKPT_SECTION_HEADER_BYTES] = {0};  // NUL padding after the name
    memcpy(head, name, len);
    ckpt_put_u64(head + CKPT_NAME_BYTES, size);
    memcpy(w->names[w->section_count++], head, CKPT_NAME_BYTES);
    memcpy(w->section_name, head, CKPT_NAME_BYTES);
    w->section_left = size;
    return ckpt_writer_put(w, head, sizeof(head));
}

inline int ckpt_section_write(CheckpointWriter* w, const void* data, size_t n) {
    if (w->file == NULL) return ckpt_writer_not_open(w);
    if (n > w->section_left)
        return ckpt_writer_fail(w,
                                "checkpoint %s: section '%s' given %llu bytes more than "
                                "declared",
                                w->final_path, w->section_name,
                                (unsigned long long)(n - w->section_left));
    w->section_left -= n;
    return ckpt_writer_put(w, data, n);
}

inline int ckpt_write_section(CheckpointWriter* w, const char* name, const void* data,
                              size_t size) {
    if (ckpt_section_begin(w, name, size) != 0) return -1;
    return ckpt_section_write(w, data, size);
}

// Deletes the shard files of the checkpoint of `step` in dir (ckpt_stepSSSSSSSS.rankRRRRR.bin),
// or, with step UINT64_MAX, every shard file whose manifest does not exist (a save that died
// before its manifest). Returns 0, or -1 with a message.
inline int ckpt_remove_shards(const char* dir, uint64_t step, char* err, size_t err_size) {
    DIR* d = opendir(dir);
    if (d == NULL) {
        snprintf(err, err_size, "cannot list checkpoint folder %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent* e; rc == 0 && (e = readdir(d)) != NULL;) {
        unsigned long long s;
        int rank, used = 0;
        if (sscanf(e->d_name, "ckpt_step%8llu.rank%5d.bin%n", &s, &rank, &used) != 2 ||
            e->d_name[used] != '\0')
            continue;
        char manifest[CKPT_PATH_BYTES], path[CKPT_PATH_BYTES + sizeof(e->d_name)];
        ckpt_final_name(manifest, sizeof(manifest), dir, s);
        if (step == UINT64_MAX ? access(manifest, F_OK) == 0 : s != step) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, err_size, "cannot delete checkpoint shard %s: %s", path, strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

// Deletes committed checkpoints older than w->step beyond the newest keep_last (which count
// the new one), except the newest one below w->keep_before (the one a rewind would go back
// to). Checkpoints with a larger step than the new one are left alone, and so are
// temporary files: a writer never deletes what another may be writing (the folder lock's
// holder removes crashed writers' leftovers when it takes the folder).
inline int ckpt_prune(CheckpointWriter* w, int keep_last) {
    uint64_t* steps;
    size_t count;
    if (ckpt_list(w->dir, &steps, &count, w->error, sizeof(w->error)) != 0) return -1;
    size_t older = 0;  // checkpoints with a step below the new one: steps[0 .. older)
    while (older < count && steps[older] < w->step) older++;
    size_t keep_older = keep_last > 0 ? (size_t)keep_last - 1 : older;
    size_t protected_index = count;  // none
    for (size_t i = 0; i < older && steps[i] < w->keep_before; i++) protected_index = i;
    int rc = 0;
    for (size_t i = 0; i + keep_older < older && rc == 0; i++) {
        if (i == protected_index) continue;
        char path[CKPT_PATH_BYTES];
        ckpt_final_name(path, sizeof(path), w->dir, steps[i]);
        if (unlink(path) != 0) {  // the manifest first: without it the shards are no checkpoint
            snprintf(w->error, sizeof(w->error),
                     "checkpoint %s was written, but the old checkpoint %s cannot be deleted: %s",
                     w->final_path, path, strerror(errno));
            rc = -1;
        }
        if (rc == 0) rc = ckpt_remove_shards(w->dir, steps[i], w->error, sizeof(w->error));
    }
    free(steps);
    if (rc == 0) rc = ckpt_fsync_dir(w->dir, w->error, sizeof(w->error));
    return rc;
}

// Finishes the checkpoint and makes it the one for its step. keep_last > 0: afterwards keep only
// the newest keep_last checkpoints up to this step; 0 keeps all.
inline int ckpt_writer_commit(CheckpointWriter* w, int keep_last) {
    if (w->file == NULL) return ckpt_writer_not_open(w);
    if (w->section_left != 0)
        return ckpt_writer_fail(w, "checkpoint %s: section '%s' is missing %llu bytes",
                                w->final_path, w->section_name,
                                (unsigned long long)w->section_left);
    uint8_t trailer[CKPT_TRAILER_BYTES];
    memcpy(trailer, CKPT_END_MARKER, 8);
    ckpt_put_u64(trailer + 8, w->section_count);
    ckpt_put_u64(trailer + 16, w->bytes_written + CKPT_TRAILER_BYTES);
    if (ckpt_writer_put(w, trailer, CKPT_TRAILER_BYTES - 8) != 0) return -1;
    ckpt_put_u64(trailer + 24, w->crc);
    if (fwrite(trailer + 24, 1, 8, w->file) != 8 || fflush(w->file) != 0 ||
        fsync(fileno(w->file)) != 0)
        return ckpt_writer_fail(w, "cannot write checkpoint %s: %s", w->tmp_path, strerror(errno));
    int closed = fclose(w->file);
    w->file = NULL;
    if (closed != 0) {
        snprintf(w->error, sizeof(w->error), "cannot write checkpoint %s: %s", w->tmp_path,
                 strerror(errno));
    } else if (rename(w->tmp_path, w->final_path) != 0) {
        snprintf(w->error, sizeof(w->error), "cannot rename %s to %s: %s", w->tmp_path,
                 w->final_path, strerror(errno));
    }
    ckpt_writer_abort(w);  // the file is closed already: this frees the name list
    if (w->error[0] != '\0') {
        unlink(w->tmp_path);
        return -1;
    }
    if (ckpt_fsync_dir(w->dir, w->error, sizeof(w->error)) != 0) return -1;
    return w->shard ? 0 : ckpt_prune(w, keep_last);  // a shard commits nothing by itself
}

// ---------------------------------------------------------------------------------------------
// Reader. Usage:
//     CheckpointReader r;
//     if (ckpt_open(&r, path, &config, sizeof(config), CONFIG_FIELDS, NUM_CONFIG_FIELDS) != 0 ||
//         ckpt_read_section(&r, "params", params, bytes) != 0 || ...) { print r.error; exit(1); }
//     ckpt_close(&r);
// r.step is the checkpoint's step. A section can be read in pieces with ckpt_read_section_part.

// One field of the caller's configuration struct, for naming the fields that differ.
typedef enum { CKPT_INT32, CKPT_INT64, CKPT_FLOAT32, CKPT_FLOAT64 } CkptFieldType;
typedef struct {
    const char* name;
    size_t offset;  // offsetof(Config, field)
    CkptFieldType type;
} CkptField;

typedef struct {
    char name[CKPT_NAME_BYTES];
    uint64_t offset, size;  // where the section's data starts in the file, and its bytes
} CkptSectionInfo;

typedef struct {
    FILE* file;
    char path[CKPT_PATH_BYTES];
    uint64_t step;
    uint64_t file_size;
    uint64_t section_count;
    CkptSectionInfo* sections;
    char error[CKPT_ERROR_BYTES];
} CheckpointReader;

inline void ckpt_close(CheckpointReader* r) {
    if (r->file != NULL) fclose(r->file);
    r->file = NULL;
    free(r->sections);
    r->sections = NULL;
}

// Sets the reader's message; the caller returns -1.
__attribute__((format(printf, 2, 3))) inline int ckpt_reader_error(CheckpointReader* r,
                                                                   const char* fmt, ...) {
    va_list args;
    va_start(args, fmt);
    vsnprintf(r->error, sizeof(r->error), fmt, args);
    va_end(args);
    return -1;
}

inline int ckpt_read_at(CheckpointReader* r, uint64_t offset, void* dst, size_t n) {
    if (fseeko(r->file, (off_t)offset, SEEK_SET) != 0 || fread(dst, 1, n, r->file) != n)
        return ckpt_reader_error(r, "cannot read checkpoint %s at byte %llu: %s", r->path,
                                 (unsigned long long)offset,
                                 ferror(r->file) ? strerror(errno) : "unexpected end of file");
    return 0;
}

inline int ckpt_field_size(CkptFieldType type) {
    return type == CKPT_INT64 || type == CKPT_FLOAT64 ? 8 : 4;
}

// Appends "; name: A in the checkpoint, B here" to out for a field whose bytes differ.
inline void ckpt_describe_field(char* out, size_t size, const CkptField* f, const uint8_t* stored,
                                const uint8_t* expected) {
    const uint8_t* vals[2] = {stored + f->offset, expected + f->offset};
    char text[2][48];
    for (int k = 0; k < 2; k++) {
        int32_t i32;
        int64_t i64;
        float f32;
        double f64;
        switch (f->type) {
            case CKPT_INT32:
                memcpy(&i32, vals[k], 4);
                snprintf(text[k], sizeof(text[k]), "%d", i32);
                break;
            case CKPT_INT64:
                memcpy(&i64, vals[k], 8);
                snprintf(text[k], sizeof(text[k]), "%lld", (long long)i64);
                break;
            case CKPT_FLOAT32:
                memcpy(&f32, vals[k], 4);
                snprintf(text[k], sizeof(text[k]), "%.9g", f32);
                break;
            case CKPT_FLOAT64:
                memcpy(&f64, vals[k], 8);
                snprintf(text[k], sizeof(text[k]), "%.17g", f64);
                break;
        }
    }
    size_t used = strlen(out);
    snprintf(out + used, size - used, "; %s: %s in the checkpoint, %s here", f->name, text[0],
             text[1]);
}

// Compares the stored configuration (config_size bytes at file offset config_offset) with the
// expected one, naming the fields of the table that differ.
inline int ckpt_check_config(CheckpointReader* r, uint64_t config_offset, const void* expected,
                             size_t config_size, const CkptField* fields, int num_fields) {
    const uint8_t* want = (const uint8_t*)expected;
    if (config_size == 0) return 0;
    uint8_t* stored = (uint8_t*)MALLOC_CHECK(config_size);
    if (ckpt_read_at(r, config_offset, stored, config_size) != 0) {
        free(stored);
        return -1;
    }
    if (memcmp(stored, want, config_size) == 0) {
        free(stored);
        return 0;
    }
    char detail[768] = "";
    int named = 0;
    uint8_t* covered = (uint8_t*)MALLOC_CHECK(config_size);  // bytes that belong to a field
    memset(covered, 0, config_size);
    for (int i = 0; i < num_fields; i++) {
        const CkptField* f = &fields[i];
        size_t n = (size_t)ckpt_field_size(f->type);
        if (f->offset + n > config_size) continue;  // a table that does not fit: bytes only
        memset(covered + f->offset, 1, n);
        if (memcmp(stored + f->offset, want + f->offset, n) != 0) {
            ckpt_describe_field(detail, sizeof(detail), f, stored, want);
            named = 1;
        }
    }
    int other = 0;
    for (size_t i = 0; i < config_size; i++)
        if (!covered[i] && stored[i] != want[i]) other = 1;
    if (other) {
        size_t used = strlen(detail);
        snprintf(detail + used, sizeof(detail) - used, "; %s",
                 named ? "and other bytes differ" : "the stored bytes differ");
    }
    free(covered);
    free(stored);
    return ckpt_reader_error(r, "checkpoint %s was written for a different model configuration%s",
                             r->path, detail);
}

// Every check of ckpt_open, on r->file; returns -1 with r->error at the first that fails.
inline int ckpt_open_checks(CheckpointReader* r, const void* config, size_t config_size,
                            const CkptField* fields, int num_fields) {
    const char* path = r->path;
    const uint64_t size = r->file_size;
    uint8_t header[CKPT_HEADER_BYTES], trailer[CKPT_TRAILER_BYTES];
    if (ckpt_read_at(r, 0, header, size < CKPT_HEADER_BYTES ? (size_t)size : CKPT_HEADER_BYTES))
        return -1;
    if (size >= 8 && memcmp(header, CKPT_MAGIC, 8) != 0)
        return ckpt_reader_error(r, "%s is not a checkpoint file (no \"%s\" magic at its start)",
                                 path, CKPT_MAGIC);
    if (size < CKPT_HEADER_BYTES + CKPT_TRAILER_BYTES)
        return ckpt_reader_error(r,
                                 "checkpoint %s is truncated: %llu bytes, a checkpoint has at "
                                 "least %d",
                                 path, (unsigned long long)size,
                                 CKPT_HEADER_BYTES + CKPT_TRAILER_BYTES);
    if (ckpt_get_u64(header + 8) != CKPT_VERSION)
        return ckpt_reader_error(r,
                                 "checkpoint %s has format version %llu, this program reads "
                                 "version %d",
                                 path, (unsigned long long)ckpt_get_u64(header + 8), CKPT_VERSION);
    if (ckpt_read_at(r, size - CKPT_TRAILER_BYTES, trailer, CKPT_TRAILER_BYTES) != 0) return -1;
    if (memcmp(trailer, CKPT_END_MARKER, 8) != 0)
        return ckpt_reader_error(r,
                                 "checkpoint %s is truncated or has bytes appended: no end "
                                 "marker at its end (%llu bytes)",
                                 path, (unsigned long long)size);
    if (ckpt_get_u64(trailer + 16) != size)
        return ckpt_reader_error(r,
                                 "checkpoint %s is truncated: its trailer says %llu bytes, the "
                                 "file has %llu",
                                 path, (unsigned long long)ckpt_get_u64(trailer + 16),
                                 (unsigned long long)size);

    // The CRC of everything before the stored CRC, streamed through one buffer.
    const uint64_t covered = size - 8;
    size_t buf_size = covered < CKPT_IO_CHUNK ? (size_t)covered : CKPT_IO_CHUNK;
    uint8_t* buf = (uint8_t*)MALLOC_CHECK(buf_size);
    uint32_t crc = 0;
    for (uint64_t done = 0; done < covered;) {
        size_t n = covered - done < buf_size ? (size_t)(covered - done) : buf_size;
        if (ckpt_read_at(r, done, buf, n) != 0) {
            free(buf);
            return -1;
        }
        crc = ckpt_crc32(crc, buf, n);
        done += n;
    }
    free(buf);
    if (crc != ckpt_get_u64(trailer + 24))
        return ckpt_reader_error(r,
                                 "checkpoint %s is corrupted: checksum mismatch (stored CRC-32 "
                                 "%08llx, computed %08x)",
                                 path, (unsigned long long)ckpt_get_u64(trailer + 24), crc);

    // The section table. The CRC matched, so only a faulty writer could make this fail.
    r->step = ckpt_get_u64(header + 16);
    const uint64_t stored_config = ckpt_get_u64(header + 24);
    const uint64_t data_end = size - CKPT_TRAILER_BYTES;
    r->section_count = ckpt_get_u64(trailer + 8);
    if (stored_config > data_end - CKPT_HEADER_BYTES ||
        r->section_count >
            (data_end - CKPT_HEADER_BYTES - stored_config) / CKPT_SECTION_HEADER_BYTES)
        return ckpt_reader_error(r,
                                 "checkpoint %s is malformed: its config size or section "
                                 "count does not fit the file",
                                 path);
    r->sections = (CkptSectionInfo*)MALLOC_CHECK(r->section_count * sizeof(CkptSectionInfo));
    uint64_t pos = CKPT_HEADER_BYTES + stored_config;
    for (uint64_t i = 0; i < r->section_count; i++) {
        uint8_t head[CKPT_SECTION_HEADER_BYTES];
        if (pos > data_end - CKPT_SECTION_HEADER_BYTES)
            return ckpt_reader_error(r,
                                     "checkpoint %s is malformed: section %llu starts past the "
                                     "end",
                                     path, (unsigned long long)i);
        if (ckpt_read_at(r, pos, head, sizeof(head)) != 0) return -1;
        CkptSectionInfo* s = &r->sections[i];
        memcpy(s->name, head, CKPT_NAME_BYTES);
        s->size = ckpt_get_u64(head + CKPT_NAME_BYTES);
        s->offset = pos + CKPT_SECTION_HEADER_BYTES;
        if (s->name[0] == '\0' || s->name[CKPT_NAME_BYTES - 1] != '\0' ||
            s->size > data_end - s->offset)
            return ckpt_reader_error(r, "checkpoint %s is malformed: bad header for section %llu",
                                     path, (unsigned long long)i);
        pos = s->offset + s->size;
    }
    if (pos != data_end)
        return ckpt_reader_error(r,
                                 "checkpoint %s is malformed: %llu bytes after the last "
                                 "section",
                                 path, (unsigned long long)(data_end - pos));

    if (config == NULL) return 0;  // integrity only (ckpt_find_latest)
    if (stored_config != config_size)
        return ckpt_reader_error(r,
                                 "checkpoint %s was written for a different model "
                                 "configuration (its config has %llu bytes, this program's %zu)",
                                 path, (unsigned long long)stored_config, config_size);
    return ckpt_check_config(r, CKPT_HEADER_BYTES, config, config_size, fields, num_fields);
}

// Opens and verifies the checkpoint at path against the caller's configuration (fields may be
// NULL with num_fields 0; config NULL checks the file's integrity only). On failure the reader
// is closed already.
inline int ckpt_open(CheckpointReader* r, const char* path, const void* config, size_t config_size,
                     const CkptField* fields, int num_fields) {
    memset(r, 0, sizeof(*r));
    snprintf(r->path, sizeof(r->path), "%s", path);
    int64_t size;
    r->file = fopen_regular(path, "checkpoint", &size, r->error, sizeof(r->error));
    if (r->file == NULL) return -1;
    r->file_size = (uint64_t)size;
    if (ckpt_open_checks(r, config, config_size, fields, num_fields) != 0) {
        ckpt_close(r);
        return -1;
    }
    return 0;
}

// The configuration block of the checkpoint at path, read without verifying the file, for a
// caller that takes the model's shape from the checkpoint (sample mode) and then verifies the
// whole file with ckpt_open against what it read. Returns 0 with config_size bytes in config
// when the file starts with a checkpoint header whose configuration has exactly that size; -1
// with a message in err otherwise.
inline int ckpt_peek_config(const char* path, void* config, size_t config_size, char* err,
                            size_t err_size) {
    int64_t size;
    FILE* f = fopen_regular(path, "checkpoint", &size, err, err_size);
    if (f == NULL) return -1;
    uint8_t header[CKPT_HEADER_BYTES];
    int rc = -1;
    if ((uint64_t)size < CKPT_HEADER_BYTES + (uint64_t)config_size ||
        fread(header, sizeof(header), 1, f) != 1 || memcmp(header, CKPT_MAGIC, 8) != 0)
        snprintf(err, err_size, "%s is not a checkpoint file, or is truncated", path);
    else if (ckpt_get_u64(header + 24) != config_size)
        snprintf(err, err_size,
                 "checkpoint %s has a %llu-byte configuration, this program's has %zu bytes", path,
                 (unsigned long long)ckpt_get_u64(header + 24), config_size);
    else if (config_size > 0 && fread(config, config_size, 1, f) != 1)
        snprintf(err, err_size, "cannot read checkpoint %s (did it change?)", path);
    else rc = 0;
    fclose(f);
    return rc;
}

// The section called name of an open checkpoint, or NULL with a message.
inline const CkptSectionInfo* ckpt_lookup(CheckpointReader* r, const char* name) {
    if (r->file == NULL) {
        ckpt_reader_error(r, "no checkpoint is open to read section '%s' from", name);
        return NULL;
    }
    for (uint64_t i = 0; i < r->section_count; i++)
        if (strcmp(r->sections[i].name, name) == 0) return &r->sections[i];
    ckpt_reader_error(r, "checkpoint %s has no section '%s'", r->path, name);
    return NULL;
}

// Whether the open checkpoint r has a section called name.
inline bool ckpt_has_section(const CheckpointReader* r, const char* name) {
    for (uint64_t i = 0; i < r->section_count; i++)
        if (strcmp(r->sections[i].name, name) == 0) return true;
    return false;
}

// Reads section `name`, which must have exactly `size` bytes.
inline int ckpt_read_section(CheckpointReader* r, const char* name, void* dst, size_t size) {
    const CkptSectionInfo* s = ckpt_lookup(r, name);
    if (s == NULL) return -1;
    if (s->size != size)
        return ckpt_reader_error(r,
                                 "checkpoint %s: section '%s' has %llu bytes, this program "
                                 "expects %zu",
                                 r->path, name, (unsigned long long)s->size, size);
    return ckpt_read_at(r, s->offset, dst, size);
}

// Reads n bytes of section `name` starting at its byte `offset` (for staging a large section
// through a smaller buffer).
inline int ckpt_read_section_part(CheckpointReader* r, const char* name, uint64_t offset, void* dst,
                                  size_t n) {
    const CkptSectionInfo* s = ckpt_lookup(r, name);
    if (s == NULL) return -1;
    if (offset > s->size || n > s->size - offset)
        return ckpt_reader_error(r,
                                 "checkpoint %s: section '%s' has %llu bytes, cannot read %zu "
                                 "at byte %llu",
                                 r->path, name, (unsigned long long)s->size, n,
                                 (unsigned long long)offset);
    return ckpt_read_at(r, s->offset + offset, dst, n);
}

// ---------------------------------------------------------------------------------------------
// Sharded checkpoints. A checkpoint may be a manifest plus shard files: every rank that holds
// state writes its shard, ckpt_stepSSSSSSSS.rankRRRRR.bin, atomically like any checkpoint file;
// once all are committed, rank 0 writes the manifest, ckpt_stepSSSSSSSS.bin, and only the
// manifest commits the checkpoint: a save that dies earlier leaves shards without a manifest,
// which are no checkpoint (the folder lock's next holder deletes them). Pruning a checkpoint
// deletes its manifest, then its shards.
//
// The files of one save know each other: each starts with the section "save" (CkptSave), the
// save's identity, a random 128-bit id drawn once per save (rank 0 draws it and hands it to
// every writer), the number of shards, and which shard the file is (CKPT_MANIFEST in the
// manifest). A shard belongs to a manifest only when its step, id, count and index are the
// manifest's: the step and the model's configuration alone would accept a shard copied from
// another run, a shard copied over another of the same checkpoint, and a shard that a later save
// of the same step renamed into place before it died, ahead of its manifest. Such a checkpoint
// is damaged: ckpt_find_latest skips it like any other, and a reader refuses it.

#define CKPT_MANIFEST UINT64_MAX  // CkptSave::index of a manifest

typedef struct {      // section "save", 32 bytes
    uint64_t id[2];   // random, the same in every file of the save
    uint64_t shards;  // the checkpoint's shard files
    uint64_t index;   // which of them this file is, or CKPT_MANIFEST
} CkptSave;
static_assert(sizeof(CkptSave) == 32, "CkptSave has padding");

// A new save's identity: a random id (getrandom), `shards` shard files, index CKPT_MANIFEST.
// Returns 0, or -1 with a message.
inline int ckpt_new_save(CkptSave* save, uint64_t shards, char* err, size_t err_size) {
    memset(save, 0, sizeof(*save));
    const ssize_t got = getrandom(save->id, sizeof(save->id), 0);
    if (got != (ssize_t)sizeof(save->id)) {
        snprintf(err, err_size, "cannot draw a checkpoint's save id: %s",
                 got < 0 ? strerror(errno) : "short read");
        return -1;
    }
    save->shards = shards;
    save->index = CKPT_MANIFEST;
    return 0;
}

// Opens a file of a sharded checkpoint for writing, its section "save" written: the manifest
// (save->index CKPT_MANIFEST) or shard number save->index.
inline int ckpt_writer_begin_part(CheckpointWriter* w, const char* dir, uint64_t step,
                                  const CkptSave* save, const void* config, size_t config_size) {
    const int rank = save->index == CKPT_MANIFEST ? -1 : (int)save->index;
    if (ckpt_writer_begin_file(w, dir, step, rank, config, config_size) != 0) return -1;
    return ckpt_write_section(w, "save", save, sizeof(*save));
}

// The identity of the open manifest r: returns the number of its shards (with *save), 0 for a
// checkpoint of one file, or -1 with a message (a file that is no manifest, or a manifest of an
// older format whose shards carry no identity).
inline int64_t ckpt_manifest_save(CheckpointReader* r, CkptSave* save) {
    if (!ckpt_has_section(r, "save")) {
        if (!ckpt_has_section(r, "shards")) return 0;
        return ckpt_reader_error(r,
                                 "checkpoint %s lists shards that carry no save identity "
                                 "(written by an older train_gpt), so they cannot be verified "
                                 "as its own",
                                 r->path);
    }
    if (ckpt_read_section(r, "save", save, sizeof(*save)) != 0) return -1;
    if (save->index != CKPT_MANIFEST)
        return ckpt_reader_error(r, "checkpoint %s is shard %llu of a checkpoint, not a manifest",
                                 r->path, (unsigned long long)save->index);
    if (save->shards == 0 || save->shards > INT32_MAX)
        return ckpt_reader_error(r, "checkpoint %s is malformed: it lists %llu shards", r->path,
                                 (unsigned long long)save->shards);
    return (int64_t)save->shards;
}

// Checks that the open file `shard` is shard number `index` of the save whose manifest has step
// `step` and identity *manifest. Returns 0, or -1 with a message in shard->error.
inline int ckpt_check_shard(CheckpointReader* shard, uint64_t step, const CkptSave* manifest,
                            uint64_t index) {
    CkptSave own;
    if (shard->step != step)
        return ckpt_reader_error(shard, "checkpoint shard %s is of step %llu, its manifest of %llu",
                                 shard->path, (unsigned long long)shard->step,
                                 (unsigned long long)step);
    if (ckpt_read_section(shard, "save", &own, sizeof(own)) != 0) return -1;
    if (own.id[0] != manifest->id[0] || own.id[1] != manifest->id[1])
        return ckpt_reader_error(shard,
                                 "checkpoint shard %s is of another save than its manifest (save "
                                 "id %016llx%016llx, the manifest's %016llx%016llx): a shard of "
                                 "another run, or of a later save of this step that ended before "
                                 "its manifest",
                                 shard->path, (unsigned long long)own.id[0],
                                 (unsigned long long)own.id[1], (unsigned long long)manifest->id[0],
                                 (unsigned long long)manifest->id[1]);
    if (own.index != index || own.shards != manifest->shards)
        return ckpt_reader_error(shard,
                                 "checkpoint shard %s holds shard %llu of %llu, where its "
                                 "manifest expects shard %llu of %llu (a shard file copied or "
                                 "renamed over another)",
                                 shard->path, (unsigned long long)own.index,
                                 (unsigned long long)own.shards, (unsigned long long)index,
                                 (unsigned long long)manifest->shards);
    return 0;
}

// Checks the integrity of every shard the open manifest r lists (ckpt_open with no config) and
// that each is the shard of r's save it should be. Returns 0, or -1 with the first problem in
// r->error.
inline int ckpt_shards_intact(CheckpointReader* r) {
    CkptSave save;
    const int64_t n = ckpt_manifest_save(r, &save);
    if (n < 0) return -1;
    char dir[CKPT_PATH_BYTES];
    snprintf(dir, sizeof(dir), "%s", r->path);
    char* slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    else snprintf(dir, sizeof(dir), ".");
    for (int64_t k = 0; k < n; k++) {
        char shard[CKPT_PATH_BYTES];
        ckpt_shard_name(shard, sizeof(shard), dir, r->step, (int)k);
        CheckpointReader sr;
        if (ckpt_open(&sr, shard, NULL, 0, NULL, 0) != 0) {
            snprintf(r->error, sizeof(r->error), "its shard %lld: %s", (long long)k, sr.error);
            return -1;
        }
        const int own = ckpt_check_shard(&sr, r->step, &save, (uint64_t)k);
        if (own != 0) memcpy(r->error, sr.error, sizeof(r->error));
        ckpt_close(&sr);
        if (own != 0) return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// The newest intact checkpoint in dir of a step below `below` (UINT64_MAX: any): returns 1 with
// its path and step, 0 when there is none (also when dir does not exist), -1 with a message
// when dir cannot be read. Intact means every
// check of ckpt_open but the configuration (the CRC included): a newer file that fails them is
// skipped with a warning on stderr naming what is wrong, and the next older one is taken.

inline int ckpt_find_latest(const char* dir, uint64_t below, char* path, size_t path_size,
                            uint64_t* step, char* err, size_t err_size) {
    uint64_t* steps;
    size_t count;
    if (ckpt_list(dir, &steps, &count, err, err_size) != 0) return -1;
    while (count > 0 && steps[count - 1] >= below) count--;
    int found = 0;
    for (size_t i = count; i-- > 0 && !found;) {
        char candidate[CKPT_PATH_BYTES];
        ckpt_final_name(candidate, sizeof(candidate), dir, steps[i]);
        CheckpointReader r;
        const bool opened = ckpt_open(&r, candidate, NULL, 0, NULL, 0) == 0;
        if (opened && ckpt_shards_intact(&r) == 0) {
            snprintf(path, path_size, "%s", candidate);
            *step = steps[i];
            found = 1;
        } else {
            fprintf(stderr, "warning: skipping checkpoint %s: %s; trying the next older one\n",
                    candidate, r.error);
        }
        if (opened) ckpt_close(&r);  // also when its shards are not intact
    }
    free(steps);
    return found;
}

// ---------------------------------------------------------------------------------------------
// The folder lock: one run at a time owns a checkpoint folder. Two runs writing into one folder
// would prune each other's files and resume from each other's checkpoints, so the run takes the
// lock at start (before it trains a step) and holds it until it exits. Taking it also proves
// the folder can be written: a read-only mount or a path that is not a folder is reported
// before any work.
//
// The lock is the file DIR/train_gpt.lock, holding "host H", "pid P" and "start S" (the
// process's start time in clock ticks since boot, /proc/P/stat field 22, which tells a reused
// pid from the original). It is made atomically: the content goes to a temporary file first,
// which link() then names DIR/train_gpt.lock, failing if that exists. A lock that exists is
// stale only when it names this host and no process with that pid and start time runs here;
// then it is moved aside (rename, atomic), re-read to make sure it is the one judged stale, and
// deleted. A lock of another host is never judged stale: on a folder shared by several nodes a
// live job elsewhere cannot be seen from here, so the message says which host holds it and how
// to remove a lock whose job is known to be gone.
//
// The holder also deletes the temporary files that crashed writers left in the folder: no
// other writer can be active while it holds the lock.

#define CKPT_LOCK_NAME "train_gpt.lock"

typedef struct {
    int held;
    char path[CKPT_PATH_BYTES];  // DIR/train_gpt.lock
    char content[256];           // what this process wrote into it
} CkptLock;

// mkdir -p: creates dir and any missing parents. Returns 0, or -1 with a message.
inline int ckpt_make_dirs(const char* dir, char* err, size_t err_size) {
    char path[CKPT_PATH_BYTES];
    if (strlen(dir) >= CKPT_DIR_BYTES) {
        snprintf(err, err_size, "checkpoint folder name too long: %s", dir);
        return -1;
    }
    snprintf(path, sizeof(path), "%s", dir);
    for (char* p = path + 1;; p++) {
        if (*p != '/' && *p != '\0') continue;
        const char saved = *p;
        *p = '\0';
        struct stat st;
        if (mkdir(path, 0755) != 0 && errno != EEXIST) {
            snprintf(err, err_size, "cannot create folder %s: %s", path, strerror(errno));
            return -1;
        }
        if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
            snprintf(err, err_size, "checkpoint folder %s: %s is not a folder", dir, path);
            return -1;
        }
        if (saved == '\0') return 0;
        *p = saved;
    }
}

// The holder named in a lock's content: returns 1 when the fields parse.
inline int ckpt_lock_parse(const char* content, char* host, size_t host_size, long* pid,
                           unsigned long long* start) {
    char h[256];
    if (sscanf(content, "host %255s pid %ld start %llu", h, pid, start) != 3) return 0;
    snprintf(host, host_size, "%s", h);
    return 1;
}

// Reads up to size-1 bytes of a small file into buf (NUL-terminated). Returns 0, or -1 (errno).
inline int ckpt_read_small(const char* path, char* buf, size_t size) {
    int fd = open(path, O_RDONLY | O_NONBLOCK);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, size - 1);
    int saved = errno;
    close(fd);
    if (n < 0) {
        errno = saved;
        return -1;
    }
    buf[n] = '\0';
    return 0;
}

// Whether the lock content names a process of this host that no longer runs.
inline int ckpt_lock_is_stale(const char* content, const char* my_host) {
    char host[256];
    long pid;
    unsigned long long start;
    if (!ckpt_lock_parse(content, host, sizeof(host), &pid, &start)) return 0;
    return process_gone(host, pid, start, my_host);
}

// Deletes the temporary files crashed writers left in dir (.ckpt_step*.bin.tmp*).
inline int ckpt_remove_stale_temporaries(const char* dir, char* err, size_t err_size) {
    DIR* d = opendir(dir);
    if (d == NULL) {
        snprintf(err, err_size, "cannot list checkpoint folder %s: %s", dir, strerror(errno));
        return -1;
    }
    int rc = 0;
    for (struct dirent* e; rc == 0 && (e = readdir(d)) != NULL;) {
        if (strncmp(e->d_name, ".ckpt_step", 10) != 0 || strstr(e->d_name, ".bin.tmp") == NULL)
            continue;
        char path[CKPT_PATH_BYTES + sizeof(e->d_name)];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (unlink(path) != 0 && errno != ENOENT) {
            snprintf(err, err_size, "cannot delete stale temporary file %s: %s", path,
                     strerror(errno));
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

// Creates dir if needed and takes its lock. Returns 0, or -1 with a message (the folder cannot
// be created or written, or another run holds it: the message names the holder).
inline int ckpt_lock_take(CkptLock* lk, const char* dir, char* err, size_t err_size) {
    memset(lk, 0, sizeof(*lk));
    if (ckpt_make_dirs(dir, err, err_size) != 0) return -1;
    char host[256] = "unknown";
    gethostname(host, sizeof(host) - 1);
    const long pid = (long)getpid();
    snprintf(lk->path, sizeof(lk->path), "%s/%s", dir, CKPT_LOCK_NAME);
    snprintf(lk->content, sizeof(lk->content), "host %s pid %ld start %llu\n", host, pid,
             process_start_time(pid));
    char tmp[CKPT_PATH_BYTES + 64], aside[CKPT_PATH_BYTES + 64];
    snprintf(tmp, sizeof(tmp), "%s/.%s.new%ld", dir, CKPT_LOCK_NAME, pid);
    snprintf(aside, sizeof(aside), "%s/.%s.stale%ld", dir, CKPT_LOCK_NAME, pid);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const size_t n = strlen(lk->content);
    if (fd < 0 || write(fd, lk->content, n) != (ssize_t)n || fsync(fd) != 0) {
        snprintf(err, err_size, "checkpoint folder %s is not writable: %s", dir, strerror(errno));
        if (fd >= 0) close(fd);
        unlink(tmp);
        return -1;
    }
    close(fd);
    int rc = -1;
    for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
        if (link(tmp, lk->path) == 0) {
            rc = 0;
            break;
        }
        if (errno != EEXIST) {
            snprintf(err, err_size, "cannot create the lock %s: %s", lk->path, strerror(errno));
            break;
        }
        char holder[256];
        if (ckpt_read_small(lk->path, holder, sizeof(holder)) != 0) continue;  // just released
        if (!ckpt_lock_is_stale(holder, host)) {
            char h[256] = "?";
            long p = 0;
            unsigned long long s = 0;
            ckpt_lock_parse(holder, h, sizeof(h), &p, &s);
            snprintf(err, err_size,
                     "checkpoint folder %s is in use by another run: process %ld on host %s "
                     "holds %s. Give this run its own --checkpoint-dir, or wait for that run to "
                     "end%s",
                     dir, p, h, lk->path,
                     strcmp(h, host) == 0
                         ? ""
                         : " (a lock held from another host is never taken over: delete the "
                           "file if that run is known to be gone)");
            break;
        }
        char moved[256];
        if (rename(lk->path, aside) != 0) continue;  // someone else moved it first
        if (ckpt_read_small(aside, moved, sizeof(moved)) == 0 && strcmp(moved, holder) == 0) {
            unlink(aside);
            fprintf(stderr, "note: removed the stale lock of a run that no longer runs (%.*s)\n",
                    (int)strcspn(holder, "\n"), holder);
        } else if (link(aside, lk->path) != 0 || unlink(aside) != 0) {
            snprintf(err, err_size, "the lock %s changed while it was being taken over", lk->path);
            break;
        }
    }
    unlink(tmp);
    if (rc != 0) return -1;
    lk->held = 1;
    if (ckpt_fsync_dir(dir, err, err_size) != 0 ||
        ckpt_remove_stale_temporaries(dir, err, err_size) != 0 ||
        ckpt_remove_shards(dir, UINT64_MAX, err, err_size) != 0) {
        unlink(lk->path);
        lk->held = 0;
        return -1;
    }
    return 0;
}

// Releases the lock if this process holds it (and it still holds this process's content).
inline void ckpt_lock_release(CkptLock* lk) {
    if (!lk->held) return;
    char now[256];
    if (ckpt_read_small(lk->path, now, sizeof(now)) == 0 && strcmp(now, lk->content) == 0)
        unlink(lk->path);
    lk->held = 0;
}

// The lock of a process: ckpt_lock_for_process takes it and releases it when the process exits
// (exit(), fatal() included), so an error leaves no lock behind; a killed process's lock is
// judged stale by the next taker. One folder per process: the lock lives in this static.
inline CkptLock* ckpt_process_lock() {
    static CkptLock lock;
    return &lock;
}
inline void ckpt_release_process_lock() { ckpt_lock_release(ckpt_process_lock()); }

inline int ckpt_lock_for_process(const char* dir, char* err, size_t err_size) {
    if (ckpt_lock_take(ckpt_process_lock(), dir, err, err_size) != 0) return -1;
    atexit(ckpt_release_process_lock);
    return 0;
}
