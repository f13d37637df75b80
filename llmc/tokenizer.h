/*
llmc/tokenizer.h: reads the tokenizer file written by dev/data/prepare.py, decodes token ids
to bytes (to print samples) and encodes text to token ids (to turn a prompt into tokens).

Entry points: tokenizer_load / tokenizer_free, tokenizer_decode, tokenizer_encode.

Two kinds, as in dev/data/tokenizer.py, whose docstring defines the file format:
- byte: vocab 256, token = byte; token 0 separates documents and prints as "<|endoftext|>".
- gpt2: GPT-2's byte-level BPE. Encoding matches the Python tokenizer (and tiktoken's gpt2):
  1. pre-tokenize by the logic of GPT-2's pattern
         's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
     written out by hand in gpt2_piece_end(). Letters, numbers and whitespace are the code
     point ranges stored in the file (taken from Python's `regex` module), so the two sides
     agree on all of Unicode. Bytes that are not valid UTF-8 (Python can never see those) are
     taken one at a time as "other" symbols.
  2. each piece starts as one token per byte and the adjacent pair with the lowest merge rank
     is merged, every occurrence left to right, until no adjacent pair is a merge.
Errors (missing file, not a regular file, wrong magic or version, truncation, inconsistent
tables) make tokenizer_load return -1 with a message in tok->error; the caller prints it and
exits. The header's counts are checked against the file's size before anything is allocated
for them.
Running out of memory exits at once (MALLOC_CHECK).
*/
#pragma once

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fileio.h"

#define TOKENIZER_MAGIC 20250917
#define TOKENIZER_VERSION 1
#define TOKENIZER_HEADER_INTS 16

enum { TOKENIZER_KIND_BYTE = 1, TOKENIZER_KIND_GPT2 = 2 };
// Code point classes of the pre-tokenizer; anything not in a stored range is OTHER.
enum { CP_OTHER = 0, CP_LETTER = 1, CP_NUMBER = 2, CP_SPACE = 3 };

typedef struct {
    uint32_t first, last, cls;
} CodePointRange;

typedef struct {
    int32_t left, right, result;
} BpeMerge;

typedef struct {
    int kind, vocab_size, eot;
    uint8_t* token_data;     // every token's bytes, back to back
    uint32_t* token_offset;  // token i is token_data[token_offset[i] .. token_offset[i+1])
    int num_merges;
    BpeMerge* merges;  // in rank order: merges[r] has rank r
    // Open-addressing hash table (left, right) -> rank, size merge_mask + 1 (a power of two,
    // at least twice num_merges); empty slots hold key UINT64_MAX.
    uint64_t* merge_keys;
    int32_t* merge_ranks;
    uint64_t merge_mask;
    int num_ranges;
    CodePointRange* ranges;    // sorted, disjoint
    uint8_t ascii_class[128];  // the ranges' verdict for ASCII, looked up on every byte
    int byte_token[256];       // token id of each single byte
    char error[512];
} Tokenizer;

// ----------------------------------------------------------------------------------------------
// loading

// Reading cursor over the file contents; every read checks the bytes left.
typedef struct {
    const uint8_t* data;
    size_t size, pos;
} TokenizerCursor;

inline int tokenizer_take(Tokenizer* tok, TokenizerCursor* c, void* dst, size_t n, const char* what,
                          const char* path) {
    if (c->size - c->pos < n) {
        snprintf(tok->error, sizeof(tok->error),
                 "tokenizer file %s is truncated: reading %s needs %zu bytes at offset %zu, the "
                 "file has %zu",
                 path, what, n, c->pos, c->size);
        return -1;
    }
    memcpy(dst, c->data + c->pos, n);
    c->pos += n;
    return 0;
}

inline uint64_t tokenizer_pair_key(int left, int right) {
    return ((uint64_t)(uint32_t)left << 32) | (uint32_t)right;
}

inline uint64_t tokenizer_slot(const Tokenizer* tok, uint64_t key) {
    return (key * 0x9E3779B97F4A7C15ull >> 17) & tok->merge_mask;
}

// Rank of merging (left, right), or -1 when the pair is not a merge.
inline int tokenizer_merge_rank(const Tokenizer* tok, int left, int right) {
    uint64_t key = tokenizer_pair_key(left, right);
    for (uint64_t s = tokenizer_slot(tok, key);; s = (s + 1) & tok->merge_mask) {
        if (tok->merge_keys[s] == key) return tok->merge_ranks[s];
        if (tok->merge_keys[s] == UINT64_MAX) return -1;
    }
}

inline int tokenizer_class_of(const Tokenizer* tok, uint32_t cp) {
    int lo = 0, hi = tok->num_ranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < tok->ranges[mid].first) hi = mid - 1;
        else if (cp > tok->ranges[mid].last) lo = mid + 1;
        else return (int)tok->ranges[mid].cls;
    }
    return CP_OTHER;
}

inline void tokenizer_free(Tokenizer* tok) {
    free(tok->token_data);
    free(tok->token_offset);
    free(tok->merges);
    free(tok->merge_keys);
    free(tok->merge_ranks);
    free(tok->ranges);
    memset(tok, 0, sizeof(*tok));
}

// Checks the tables read from the file against each other: ids in range, each merge's result
// spells its two parts, ranges sorted and valid, every byte has a token.
inline int tokenizer_validate(Tokenizer* tok, const char* path) {
    for (int r = 0; r < tok->num_merges; r++) {
        BpeMerge m = tok->merges[r];
        if (m.left < 0 || m.left >= tok->vocab_size || m.right < 0 || m.right >= tok->vocab_size ||
            m.result < 0 || m.result >= tok->vocab_size) {
            snprintf(tok->error, sizeof(tok->error),
                     "tokenizer file %s: merge %d has a token id outside 0..%d", path, r,
                     tok->vocab_size - 1);
            return -1;
        }
        uint32_t nl = tok->token_offset[m.left + 1] - tok->token_offset[m.left];
        uint32_t nr = tok->token_offset[m.right + 1] - tok->token_offset[m.right];
        const uint8_t* res = tok->token_data + tok->token_offset[m.result];
        if (tok->token_offset[m.result + 1] - tok->token_offset[m.result] != nl + nr ||
            memcmp(res, tok->token_data + tok->token_offset[m.left], nl) != 0 ||
            memcmp(res + nl, tok->token_data + tok->token_offset[m.right], nr) != 0) {
            snprintf(tok->error, sizeof(tok->error),
                     "tokenizer file %s: merge %d (%d + %d) does not spell token %d", path, r,
                     m.left, m.right, m.result);
            return -1;
        }
    }
    for (int i = 0; i < tok->num_ranges; i++) {
        CodePointRange g = tok->ranges[i];
        if (g.first > g.last || g.last > 0x10FFFF || g.cls < CP_LETTER || g.cls > CP_SPACE ||
            (i > 0 && g.first <= tok->ranges[i - 1].last)) {
            snprintf(tok->error, sizeof(tok->error),
                     "tokenizer file %s: code point range %d is invalid or out of order", path, i);
            return -1;
        }
    }
    for (int b = 0; b < 256; b++) tok->byte_token[b] = -1;
    if (tok->kind == TOKENIZER_KIND_BYTE) {
        if (tok->vocab_size != 256 || tok->num_merges != 0) {
            snprintf(
                tok->error, sizeof(tok->error),
                "tokenizer file %s: a byte tokenizer needs vocab 256 and no merges (has %d, %d)",
                path, tok->vocab_size, tok->num_merges);
            return -1;
        }
        for (int b = 0; b < 256; b++) tok->byte_token[b] = b;
        return 0;
    }
    for (int i = 0; i < tok->vocab_size; i++) {
        if (i != tok->eot && tok->token_offset[i + 1] - tok->token_offset[i] == 1)
            tok->byte_token[tok->token_data[tok->token_offset[i]]] = i;
    }
    for (int b = 0; b < 256; b++) {
        if (tok->byte_token[b] < 0) {
            snprintf(tok->error, sizeof(tok->error), "tokenizer file %s: no token for byte %d",
                     path, b);
            return -1;
        }
    }
    return 0;
}

// Checks the header h of a file of `size` bytes: magic, version, kind, counts in range, and the
// counts against the size (the tables they announce must fit the file, and the longest tables
// they allow must not be shorter than it), so nothing is allocated for a count the file cannot
// hold.
inline int tokenizer_check_header(Tokenizer* tok, const int32_t* h, int64_t size,
                                  const char* path) {
    if (h[0] != TOKENIZER_MAGIC) {
        snprintf(tok->error, sizeof(tok->error),
                 "%s is not a tokenizer file (magic %d, expected %d); write one with "
                 "dev/data/prepare.py",
                 path, h[0], TOKENIZER_MAGIC);
        return -1;
    }
    if (h[1] != TOKENIZER_VERSION) {
        snprintf(tok->error, sizeof(tok->error),
                 "tokenizer file %s has version %d, this program reads version %d", path, h[1],
                 TOKENIZER_VERSION);
        return -1;
    }
    if ((h[2] != TOKENIZER_KIND_BYTE && h[2] != TOKENIZER_KIND_GPT2) || h[3] <= 0 || h[3] > 65536 ||
        h[4] < 0 || h[4] >= h[3] || h[5] < 0 || h[6] < 0) {
        snprintf(tok->error, sizeof(tok->error),
                 "tokenizer file %s has an invalid header (kind %d, vocab %d, eot %d, merges %d, "
                 "ranges %d)",
                 path, h[2], h[3], h[4], h[5], h[6]);
        return -1;
    }
    // Every count is below 2^31, so these sums cannot overflow.
    const int64_t least = (int64_t)TOKENIZER_HEADER_INTS * 4 + 2 * (int64_t)h[3] +
                          (int64_t)sizeof(BpeMerge) * h[5] + (int64_t)sizeof(CodePointRange) * h[6];
    const int64_t most = least + (int64_t)UINT16_MAX * h[3];  // every token 65535 bytes long
    if (size < least || size > most) {
        snprintf(tok->error, sizeof(tok->error),
                 "tokenizer file %s %s: its header says %d tokens, %d merges and %d code point "
                 "ranges (%lld to %lld bytes), the file has %lld bytes",
                 path, size < least ? "is truncated" : "has unexpected bytes after its tables",
                 h[3], h[5], h[6], (long long)least, (long long)most, (long long)size);
        return -1;
    }
    return 0;
}

// Loads a tokenizer file. Returns 0, or -1 with the reason in tok->error.
inline int tokenizer_load(Tokenizer* tok, const char* path) {
    memset(tok, 0, sizeof(*tok));
    int64_t file_size;
    FILE* f = fopen_regular(path, "tokenizer file", &file_size, tok->error, sizeof(tok->error));
    if (f == NULL) return -1;
    int32_t h[TOKENIZER_HEADER_INTS];
    const size_t header_bytes = sizeof(h);
    if (file_size < (int64_t)header_bytes) {
        snprintf(tok->error, sizeof(tok->error),
                 "tokenizer file %s is truncated: %lld bytes, the header alone is %zu", path,
                 (long long)file_size, header_bytes);
        fclose(f);
        return -1;
    }
    if (fread(h, header_bytes, 1, f) != 1) {
        snprintf(tok->error, sizeof(tok->error), "cannot read tokenizer file %s: %s", path,
                 ferror(f) ? strerror(errno) : "it ended before its header (did it change?)");
        fclose(f);
        return -1;
    }
    if (tokenizer_check_header(tok, h, file_size, path) != 0) {
        fclose(f);
        return -1;
    }
    // The whole file in memory (its size is what the header allows), parsed by a cursor.
    const size_t size = (size_t)file_size;
    uint8_t* data = (uint8_t*)MALLOC_CHECK(size);
    memcpy(data, h, header_bytes);
    const bool read_ok =
        fread(data + header_bytes, 1, size - header_bytes, f) == size - header_bytes;
    fclose(f);
    if (!read_ok) {
        snprintf(tok->error, sizeof(tok->error), "cannot read tokenizer file %s (did it change?)",
                 path);
        free(data);
        return -1;
    }
    TokenizerCursor c = {data, size, header_bytes};
    tok->kind = h[2];
    tok->vocab_size = h[3];
    tok->eot = h[4];
    tok->num_merges = h[5];
    tok->num_ranges = h[6];
    // Token bytes can never exceed the file size, which bounds this allocation; at most 65536
    // tokens of 65535 bytes, so the offsets fit in uint32.
    tok->token_offset = (uint32_t*)MALLOC_CHECK((tok->vocab_size + 1) * sizeof(uint32_t));
    tok->token_data = (uint8_t*)MALLOC_CHECK(size);
    tok->token_offset[0] = 0;
    int rc = 0;
    for (int i = 0; i < tok->vocab_size && rc == 0; i++) {
        uint16_t n = 0;
        rc = tokenizer_take(tok, &c, &n, 2, "a token length", path);
        if (rc == 0)
            rc = tokenizer_take(tok, &c, tok->token_data + tok->token_offset[i], n, "token bytes",
                                path);
        tok->token_offset[i + 1] = tok->token_offset[i] + n;
    }
    // The header check bounded both tables by the file size: these allocations are too.
    if (rc == 0) {
        tok->merges = (BpeMerge*)MALLOC_CHECK((size_t)tok->num_merges * sizeof(BpeMerge) + 1);
        rc = tokenizer_take(tok, &c, tok->merges, (size_t)tok->num_merges * sizeof(BpeMerge),
                            "the merges", path);
    }
    if (rc == 0) {
        tok->ranges =
            (CodePointRange*)MALLOC_CHECK((size_t)tok->num_ranges * sizeof(CodePointRange) + 1);
        rc = tokenizer_take(tok, &c, tok->ranges, (size_t)tok->num_ranges * sizeof(CodePointRange),
                            "the code point classes", path);
    }
    if (rc == 0 && c.pos != size) {
        snprintf(tok->error, sizeof(tok->error),
                 "tokenizer file %s has %zu unexpected bytes after its tables", path, size - c.pos);
        rc = -1;
    }
    free(data);
    if (rc == 0) rc = tokenizer_validate(tok, path);
    if (rc != 0) {
        char reason[sizeof(tok->error)];
        memcpy(reason, tok->error, sizeof(reason));
        tokenizer_free(tok);
        memcpy(tok->error, reason, sizeof(reason));
        return -1;
    }
    uint64_t slots = 2;
    while (slots < 2 * (uint64_t)tok->num_merges) slots *= 2;
    tok->merge_mask = slots - 1;
    tok->merge_keys = (uint64_t*)MALLOC_CHECK(slots * sizeof(uint64_t));
    tok->merge_ranks = (int32_t*)MALLOC_CHECK(slots * sizeof(int32_t));
    for (uint64_t s = 0; s < slots; s++) tok->merge_keys[s] = UINT64_MAX;
    for (int r = 0; r < tok->num_merges; r++) {
        uint64_t key = tokenizer_pair_key(tok->merges[r].left, tok->merges[r].right);
        uint64_t s = tokenizer_slot(tok, key);
        while (tok->merge_keys[s] != UINT64_MAX && tok->merge_keys[s] != key)
            s = (s + 1) & tok->merge_mask;
        if (tok->merge_keys[s] == UINT64_MAX) {  // a repeated pair keeps its first (lowest) rank
            tok->merge_keys[s] = key;
            tok->merge_ranks[s] = r;
        }
    }
    for (int b = 0; b < 128; b++)
        tok->ascii_class[b] = (uint8_t)tokenizer_class_of(tok, (uint32_t)b);
    return 0;
}

// ----------------------------------------------------------------------------------------------
// decoding

// The bytes token `id` stands for (not NUL-terminated), or NULL for an id outside the vocab.
inline const uint8_t* tokenizer_decode(const Tokenizer* tok, int id, size_t* len) {
    if (id < 0 || id >= tok->vocab_size) return NULL;
    *len = tok->token_offset[id + 1] - tok->token_offset[id];
    return tok->token_data + tok->token_offset[id];
}

// ----------------------------------------------------------------------------------------------
// encoding

// One unit of the text for the pre-tokenizer: a UTF-8 code point, or a single invalid byte.
typedef struct {
    uint32_t cp;  // the code point; for an invalid byte, 0xFFFFFFFF
    int cls;      // CP_*
    int len;      // bytes it spans
} TextUnit;

// Decodes the unit at s[0..n): a well-formed UTF-8 sequence (no overlongs, no surrogates,
// at most U+10FFFF) or else the first byte alone as an invalid unit.
inline TextUnit tokenizer_unit(const Tokenizer* tok, const uint8_t* s, size_t n) {
    TextUnit u = {0xFFFFFFFFu, CP_OTHER, 1};
    if (s[0] < 0x80) {
        u.cp = s[0];
        u.cls = tok->ascii_class[s[0]];
        return u;
    }
    int len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (len == 0 || s[0] > 0xF4 || (size_t)len > n) return u;
    uint32_t cp = s[0] & (0x7F >> len);
    for (int k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80) return u;
        cp = (cp << 6) | (s[k] & 0x3F);
    }
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return u;
    u.cp = cp;
    u.cls = tokenizer_class_of(tok, cp);
    u.len = len;
    return u;
}

// End (unit index) of the pre-token that starts at unit i, following GPT-2's pattern: the
// first alternative that matches at i wins, each quantifier greedy.
inline size_t gpt2_piece_end(const TextUnit* u, size_t n, size_t i) {
    // 's 't 'm 'd, then 're 've 'll (case-sensitive, as in GPT-2)
    if (u[i].cp == '\'' && i + 1 < n) {
        uint32_t a = u[i + 1].cp, b = i + 2 < n ? u[i + 2].cp : 0;
        if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
        if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
            return i + 3;
    }
    // ` ?\p{L}+`, ` ?\p{N}+`, ` ?[^\s\p{L}\p{N}]+`: an optional plain space, then a run of one
    // class. A space followed by a space or the end matches none of them.
    size_t j = (u[i].cp == ' ' && i + 1 < n && u[i + 1].cls != CP_SPACE) ? i + 1 : i;
    if (u[j].cls != CP_SPACE) {
        int cls = u[j].cls;
        while (j < n && u[j].cls == cls) j++;
        return j;
    }
    // `\s+(?!\S)`: the whitespace run, less its last unit when a non-space follows (that unit
    // then leads the next piece); a single space before a non-space falls to `\s+`.
    while (j < n && u[j].cls == CP_SPACE) j++;
    if (j < n && j - i >= 2) return j - 1;
    return j;
}

// Byte-pair merges over one piece: ids[0..n) start as byte tokens; returns the new count.
inline int tokenizer_bpe(const Tokenizer* tok, int* ids, int n) {
    while (n > 1) {
        int best = -1;
        for (int k = 0; k + 1 < n; k++) {
            int r = tokenizer_merge_rank(tok, ids[k], ids[k + 1]);
            if (r >= 0 && (best < 0 || r < best)) best = r;
        }
        if (best < 0) break;
        BpeMerge m = tok->merges[best];
        int out = 0;
        for (int k = 0; k < n; k++) {
            if (k + 1 < n && ids[k] == m.left && ids[k + 1] == m.right) {
                ids[out++] = m.result;
                k++;
            } else {
                ids[out++] = ids[k];
            }
        }
        n = out;
    }
    return n;
}

// Encodes text[0..len) into out, which must have room for len ids (a text never has more
// tokens than bytes). Returns the number of tokens.
inline size_t tokenizer_encode(const Tokenizer* tok, const char* text, size_t len, int* out) {
    const uint8_t* s = (const uint8_t*)text;
    if (tok->kind == TOKENIZER_KIND_BYTE) {
        for (size_t k = 0; k < len; k++) out[k] = tok->byte_token[s[k]];
        return len;
    }
    TextUnit* units = (TextUnit*)MALLOC_CHECK((len + 1) * sizeof(TextUnit));
    size_t n = 0;
    for (size_t pos = 0; pos < len; pos += units[n++].len)
        units[n] = tokenizer_unit(tok, s + pos, len - pos);
    size_t count = 0, pos = 0;
    for (size_t i = 0; i < n;) {
        size_t end = gpt2_piece_end(units, n, i);
        int* ids = out + count;
        int m = 0;
        for (; i < end; i++)
            for (int k = 0; k < units[i].len; k++) ids[m++] = tok->byte_token[s[pos++]];
        count += tokenizer_bpe(tok, ids, m);
    }
    free(units);
    return count;
}
