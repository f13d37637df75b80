/*
llmc/logger.h: the machine-readable training log, one JSON object per line (JSONL), read by
scripts/plot.py and by anyone's own tools. Rank 0 writes it; every line is flushed as it ends,
so a crash loses at most the line being written.

Entry points: logger_open / logger_close, logger_begin / logger_begin_step, logger_int /
logger_float / logger_float_array / logger_string, logger_object_begin / logger_object_end,
logger_end.

Lines, in file order:
    {"model":"gpt2","layers":12,...,"unigram_val_loss":u}   the header: the run's configuration
    {"step":N,"train_loss":x,"lr":y,"grad_norm":g,"ms":t,"tok_per_s":r,"mfu":m}
    {"step":N,"val_loss":v}
    {"step":N,"sample":"generated text"}
Every line after the header has "step" as its first key, and the header does not; resuming
depends on it. After a rewind (llmc/stability.h: the run goes back to an earlier checkpoint and
trains the steps after it again) the lines carry the rewinds so far as their second key,
{"step":N,"rewinds":R,...}: the timeline they belong to. logger_begin_step writes both keys. The
header holds whatever the trainer puts there (plot.py draws a baseline from "unigram_val_loss" when
present).

A line is built with logger_begin, then logger_int / logger_float / logger_string for each
key (logger_object_begin / logger_object_end around the keys of a nested object), then
logger_end, which writes the whole line with one fwrite and flushes it.
- Floats are written with the fewest digits that read back as the same float (0.1f is "0.1");
  NaN and infinities, which JSON cannot express, are written as null.
- Strings may hold any bytes (decoded model output can be invalid UTF-8): quote, backslash and
  control characters are escaped, DEL too; valid UTF-8 is copied as it is; each maximal
  ill-formed subsequence becomes U+FFFD, the Unicode standard's recommended practice and what
  Python's bytes.decode("utf-8", "replace") does, so a reader sees the same text either way.

Resuming: logger_open(path, resume_step, resume_rewinds) with resume_step >= 0 keeps the header
and every line up to the checkpoint's place in the log: (rewinds, step) at most (resume_rewinds,
resume_step) in that order, so the lines of earlier timelines stay whole (they are history) and
those of its own timeline up to its step. It drops the rest (lines the resumed run will write
again, and a last line cut short by a crash), and rewrites the file atomically (temporary file,
fsync, rename) so a crash during the rewrite leaves the old log intact. The resumed run then
appends; if it is deterministic its log equals an uninterrupted run's except for timing fields.
resume_step < 0 starts a new log, replacing any old file. lg->needs_header tells the caller to write
the header (a new log, or a resumed one whose file is missing or has no header).

Errors: functions return 0, or -1 with a message in lg->error (path and errno text). Running
out of memory exits at once (MALLOC_CHECK).
*/
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.cuh"

typedef struct {
    FILE* file;
    char path[4096];
    int needs_header;  // set by logger_open: the file is new, the caller writes the header first
    int64_t rewinds;   // the timeline logger_begin_step marks lines with (0: none, not written)
    char* line;        // the line being built (logger_begin .. logger_end)
    size_t line_len, line_cap;
    int line_fields;             // keys in it (or in the open nested object) so far, for commas
    int outer_fields;            // the line's keys while a nested object is open
    char error[2 * 4096 + 256];  // room for two paths
} Logger;

// ---------------------------------------------------------------------------------------------
// Building a line.

inline void logger_append(Logger* lg, const char* s, size_t n) {
    if (lg->line_len + n + 1 > lg->line_cap) {
        size_t cap = lg->line_cap ? lg->line_cap : 256;
        while (lg->line_len + n + 1 > cap) cap *= 2;
        char* grown = (char*)MALLOC_CHECK(cap);
        if (lg->line_len > 0) memcpy(grown, lg->line, lg->line_len);
        free(lg->line);
        lg->line = grown;
        lg->line_cap = cap;
    }
    memcpy(lg->line + lg->line_len, s, n);
    lg->line_len += n;
}

// Length of the well-formed UTF-8 sequence at s (1 to 4 bytes), or, when it is ill-formed, the
// negated length of its maximal ill-formed prefix (at least 1), which becomes one U+FFFD. The
// allowed ranges (Unicode Table 3-7) exclude overlong forms, surrogates and values > U+10FFFF.
inline int utf8_sequence(const uint8_t* s, size_t n) {
    uint8_t b = s[0];
    if (b < 0x80) return 1;
    int len;
    uint8_t lo = 0x80, hi = 0xBF;  // range of the second byte; later bytes are 80..BF
    if (b >= 0xC2 && b <= 0xDF) {
        len = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
        len = 3;
        if (b == 0xE0) lo = 0xA0;  // overlong below U+0800
        if (b == 0xED) hi = 0x9F;  // surrogates U+D800..DFFF
    } else if (b >= 0xF0 && b <= 0xF4) {
        len = 4;
        if (b == 0xF0) lo = 0x90;  // overlong below U+10000
        if (b == 0xF4) hi = 0x8F;  // above U+10FFFF
    } else {
        return -1;  // a continuation byte, C0, C1 or F5..FF: never valid here
    }
    for (int k = 1; k < len; k++) {
        uint8_t min = k == 1 ? lo : 0x80, max = k == 1 ? hi : 0xBF;
        if ((size_t)k >= n || s[k] < min || s[k] > max) return -k;
    }
    return len;
}

// Appends bytes as the inside of a JSON string.
inline void logger_append_escaped(Logger* lg, const uint8_t* s, size_t n) {
    static const char REPLACEMENT[] = "\xEF\xBF\xBD";  // U+FFFD in UTF-8
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            logger_append(lg, esc, 2);
            i++;
        } else if (c < 0x20 || c == 0x7F) {
            const char* named = c == '\n'   ? "\\n"
                                : c == '\t' ? "\\t"
                                : c == '\r' ? "\\r"
                                : c == '\b' ? "\\b"
                                : c == '\f' ? "\\f"
                                            : NULL;
            if (named != NULL) {
                logger_append(lg, named, 2);
            } else {
                snprintf(esc, sizeof(esc), "\\u%04x", c);
                logger_append(lg, esc, 6);
            }
            i++;
        } else {
            int len = utf8_sequence(s + i, n - i);
            if (len > 0) {
                logger_append(lg, (const char*)s + i, (size_t)len);
                i += (size_t)len;
            } else {
                logger_append(lg, REPLACEMENT, 3);
                i += (size_t)-len;
            }
        }
    }
}

inline void logger_key(Logger* lg, const char* key) {
    if (lg->line_fields++ > 0) logger_append(lg, ",", 1);
    logger_append(lg, "\"", 1);
    logger_append_escaped(lg, (const uint8_t*)key, strlen(key));
    logger_append(lg, "\":", 2);
}

inline void logger_begin(Logger* lg) {
    lg->line_len = 0;
    lg->line_fields = 0;
    logger_append(lg, "{", 1);
}

inline void logger_int(Logger* lg, const char* key, int64_t v) {
    char text[32];
    int n = snprintf(text, sizeof(text), "%lld", (long long)v);
    logger_key(lg, key);
    logger_append(lg, text, (size_t)n);
}

// Begins a step's line: {"step":step, and "rewinds":R when the run is in timeline R > 0.
inline void logger_begin_step(Logger* lg, int64_t step) {
    logger_begin(lg);
    logger_int(lg, "step", step);
    if (lg->rewinds > 0) logger_int(lg, "rewinds", lg->rewinds);
}

// The text of a float value into text (LOGGER_FLOAT_CHARS bytes): its length.
constexpr size_t LOGGER_FLOAT_CHARS = 32;
inline int logger_float_text(char* text, float v) {
    int n;
    if (!isfinite(v)) {
        n = snprintf(text, LOGGER_FLOAT_CHARS, "null");
    } else {
        // 9 significant digits always read back as the same float; try fewer first.
        int digits = 1;
        do {
            n = snprintf(text, LOGGER_FLOAT_CHARS, "%.*g", digits, (double)v);
        } while ((float)strtod(text, NULL) != v && ++digits <= 9);
        // %g turns integers with fewer significant digits than places into 1e+01; below 1e9
        // such a float is an integer, written in full ("10").
        if (strchr(text, 'e') != NULL && fabsf(v) >= 1.0f && fabsf(v) < 1e9f)
            n = snprintf(text, LOGGER_FLOAT_CHARS, "%.0f", (double)v);
    }
    return n;
}

inline void logger_float(Logger* lg, const char* key, float v) {
    char text[LOGGER_FLOAT_CHARS];
    const int n = logger_float_text(text, v);
    logger_key(lg, key);
    logger_append(lg, text, (size_t)n);
}

// An array of n floats as the value of `key`, each written as logger_float writes one.
inline void logger_float_array(Logger* lg, const char* key, const float* v, int n) {
    logger_key(lg, key);
    logger_append(lg, "[", 1);
    for (int i = 0; i < n; i++) {
        char text[LOGGER_FLOAT_CHARS];
        if (i > 0) logger_append(lg, ",", 1);
        logger_append(lg, text, (size_t)logger_float_text(text, v[i]));
    }
    logger_append(lg, "]", 1);
}

inline void logger_string(Logger* lg, const char* key, const void* bytes, size_t n) {
    logger_key(lg, key);
    logger_append(lg, "\"", 1);
    logger_append_escaped(lg, (const uint8_t*)bytes, n);
    logger_append(lg, "\"", 1);
}

// A nested object as the value of `key`: logger_object_begin, its keys, logger_object_end.
// One level deep (the header's "state_bytes").
inline void logger_object_begin(Logger* lg, const char* key) {
    logger_key(lg, key);
    logger_append(lg, "{", 1);
    lg->outer_fields = lg->line_fields;
    lg->line_fields = 0;
}

inline void logger_object_end(Logger* lg) {
    logger_append(lg, "}", 1);
    lg->line_fields = lg->outer_fields;
}

// Ends the line and writes it out, flushed.
inline int logger_end(Logger* lg) {
    logger_append(lg, "}\n", 2);
    if (lg->file == NULL) {
        snprintf(lg->error, sizeof(lg->error), "the log is not open");
        return -1;
    }
    if (fwrite(lg->line, 1, lg->line_len, lg->file) != lg->line_len || fflush(lg->file) != 0) {
        snprintf(lg->error, sizeof(lg->error), "cannot write log %s: %s", lg->path,
                 strerror(errno));
        return -1;
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Opening, resuming, closing.

// The number at line[*at] (advancing *at past it), or -1 when there is no digit there.
inline int64_t logger_line_number(const char* line, size_t n, size_t* at) {
    if (*at >= n || line[*at] < '0' || line[*at] > '9') return -1;
    int64_t v = 0;
    for (; *at < n && line[*at] >= '0' && line[*at] <= '9'; (*at)++) v = v * 10 + (line[*at] - '0');
    return v;
}

// The step of a line that starts with {"step":N, or -1 for any other line (the header); its
// timeline (R of a following "rewinds":R, else 0) in *rewinds.
inline int64_t logger_line_step(const char* line, size_t n, int64_t* rewinds) {
    static const char PREFIX[] = "{\"step\":", TIMELINE[] = ",\"rewinds\":";
    size_t at = sizeof(PREFIX) - 1;
    *rewinds = 0;
    if (n <= at || memcmp(line, PREFIX, at) != 0) return -1;
    const int64_t step = logger_line_number(line, n, &at);
    const size_t nt = sizeof(TIMELINE) - 1;
    if (step >= 0 && n - at > nt && memcmp(line + at, TIMELINE, nt) == 0) {
        at += nt;
        *rewinds = logger_line_number(line, n, &at);
    }
    return step;
}

// Reads a whole file into a malloc'ed buffer. Returns 1 and the bytes, 0 if there is no such
// file, -1 with a message.
inline int logger_read_file(Logger* lg, char** text, size_t* size) {
    FILE* f = fopen(lg->path, "rb");
    if (f == NULL) {
        if (errno == ENOENT) return 0;
        snprintf(lg->error, sizeof(lg->error), "cannot open log %s: %s", lg->path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16;
    *size = 0;
    *text = (char*)MALLOC_CHECK(cap);
    for (size_t got; (got = fread(*text + *size, 1, cap - *size, f)) > 0;) {
        *size += got;
        if (*size == cap) {
            char* grown = (char*)MALLOC_CHECK(2 * cap);
            memcpy(grown, *text, *size);
            free(*text);
            *text = grown;
            cap *= 2;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (failed) {
        snprintf(lg->error, sizeof(lg->error), "cannot read log %s", lg->path);
        free(*text);
        return -1;
    }
    return 1;
}

// Rewrites the log keeping the header and the complete lines with (rewinds, step) at most
// (resume_rewinds, resume_step), through a temporary file renamed over it. Sets *has_header
// when a header line was kept.
inline int logger_truncate(Logger* lg, int64_t resume_step, int64_t resume_rewinds,
                           int* has_header) {
    char* text;
    size_t size;
    *has_header = 0;
    int found = logger_read_file(lg, &text, &size);
    if (found <= 0) return found;
    char tmp_path[sizeof(lg->path) + 32];
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp%ld", lg->path, (long)getpid());
    FILE* out = fopen(tmp_path, "wb");
    if (out == NULL) {
        snprintf(lg->error, sizeof(lg->error), "cannot create %s: %s", tmp_path, strerror(errno));
        free(text);
        return -1;
    }
    int ok = 1;
    // Complete lines only: a last line without its newline was cut short by a crash.
    for (size_t start = 0; ok && start < size;) {
        char* nl = (char*)memchr(text + start, '\n', size - start);
        if (nl == NULL) break;
        size_t n = (size_t)(nl - (text + start)) + 1;
        int64_t rewinds;
        const int64_t step = logger_line_step(text + start, n, &rewinds);
        if (rewinds < resume_rewinds || (rewinds == resume_rewinds && step <= resume_step)) {
            ok = fwrite(text + start, 1, n, out) == n;
            if (step < 0) *has_header = 1;
        }
        start += n;
    }
    free(text);
    ok = ok && fflush(out) == 0 && fsync(fileno(out)) == 0;
    ok = fclose(out) == 0 && ok;
    if (!ok) {
        snprintf(lg->error, sizeof(lg->error), "cannot write %s: %s", tmp_path, strerror(errno));
    } else if (rename(tmp_path, lg->path) != 0) {
        snprintf(lg->error, sizeof(lg->error), "cannot rename %s to %s: %s", tmp_path, lg->path,
                 strerror(errno));
        ok = 0;
    }
    if (!ok) {
        unlink(tmp_path);
        return -1;
    }
    // fsync of the directory makes the rename itself durable.
    char dir[sizeof(lg->path)];
    snprintf(dir, sizeof(dir), "%s", lg->path);
    char* slash = strrchr(dir, '/');
    if (slash == NULL) snprintf(dir, sizeof(dir), ".");
    else if (slash == dir) slash[1] = '\0';
    else *slash = '\0';
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (fd < 0 || fsync(fd) != 0) {
        snprintf(lg->error, sizeof(lg->error), "cannot fsync directory %s: %s", dir,
                 strerror(errno));
        if (fd >= 0) close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

// resume_step < 0: a new log (an existing file is replaced); >= 0: continue after that step of
// timeline resume_rewinds (0 before any rewind).
inline int logger_open(Logger* lg, const char* path, int64_t resume_step, int64_t resume_rewinds) {
    memset(lg, 0, sizeof(*lg));
    if (strlen(path) >= sizeof(lg->path)) {
        snprintf(lg->error, sizeof(lg->error), "log path too long: %s", path);
        return -1;
    }
    snprintf(lg->path, sizeof(lg->path), "%s", path);
    struct stat st;  // a FIFO would block the open, a directory cannot be written
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(lg->error, sizeof(lg->error), "cannot open log %s: it is %s, not a regular file",
                 path, file_kind_name(st.st_mode));
        return -1;
    }
    int has_header = 0;
    if (resume_step >= 0 && logger_truncate(lg, resume_step, resume_rewinds, &has_header) != 0)
        return -1;
    lg->rewinds = resume_rewinds;
    lg->needs_header = !has_header;
    lg->file = fopen(path, resume_step >= 0 ? "ab" : "wb");
    if (lg->file == NULL) {
        snprintf(lg->error, sizeof(lg->error), "cannot open log %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

inline int logger_close(Logger* lg) {
    int rc = 0;
    if (lg->file != NULL && fclose(lg->file) != 0) {
        snprintf(lg->error, sizeof(lg->error), "cannot close log %s: %s", lg->path,
                 strerror(errno));
        rc = -1;
    }
    lg->file = NULL;
    free(lg->line);
    lg->line = NULL;
    lg->line_len = lg->line_cap = 0;
    return rc;
}
