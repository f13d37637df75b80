/*
llmc/weights_io.h: the file formats pretrained weights come in and go out as, read and written
here with no library: JSON (config.json and safetensors' header), safetensors, and llm.c's
model files. It knows the formats, not our model: train_weights.cuh maps their tensors onto the
parameter table.

Entry points: JSON: json_parse, json_get, json_int; safetensors: safetensors_open /
safetensors_close, safetensors_find, safetensors_read, safetensors_write; llm.c: llmc_open /
llmc_close, llmc_tensors, llmc_read; elements: bf16_to_float, f16_to_float; files written
atomically: atomic_open / atomic_write / atomic_commit, write_file_atomic; JSON text:
json_put_string.

JSON (RFC 8259): json_parse builds a small tree (objects keep their keys in file order; a key
given twice is refused, since a reader could take either). Numbers are doubles: integers are
exact up to 2^53, which every size and byte offset of a model file is below. Nesting deeper than
JSON_MAX_DEPTH is refused (no stack to exhaust).

safetensors (Hugging Face, https://huggingface.co/docs/safetensors): an unsigned little-endian
64-bit header length N, then N bytes of JSON, an object that maps each tensor's name to
{"dtype": "F32"|"BF16"|..., "shape": [d0, d1, ...], "data_offsets": [begin, end]} (byte offsets
into the data that follows the header, row-major, little-endian) and may hold "__metadata__", a
map of strings. safetensors_open checks the whole header before anything is read: N within the
file (and at most 100 MB, the format's own limit), valid JSON, every entry's fields, a known
dtype, offsets that give exactly dtype size x elements bytes, and the tensors back to back from
byte 0 to the end of the file (a truncated file, a gap or an overlap is named by the tensor
where it shows). safetensors_read converts F32, BF16 and F16 to float exactly; other dtypes are
refused by name. safetensors_write writes float tensors as F32 with the header padded by spaces
to a multiple of 8 bytes (so the data is aligned), atomically, streaming each tensor.

llm.c's model files (karpathy/llm.c, train_gpt2.py's write_model): a header of 256 int32,
[0] magic 20240326, [1] version (3: every tensor fp32, 5: every tensor bf16; both with the
vocabulary padded), [2] maxT, [3] V, [4] L, [5] NH, [6] C, [7] Vp; then the tensors back to back
in this order, each of all L layers before the next (llmc_tensors lists them with their shapes):
wte (Vp, C), wpe (maxT, C), ln1.w (L, C), ln1.b (L, C), qkv.w (L, 3C, C), qkv.b (L, 3C),
attproj.w (L, C, C), attproj.b (L, C), ln2.w (L, C), ln2.b (L, C), fc.w (L, 4C, C), fc.b (L, 4C),
fcproj.w (L, C, 4C), fcproj.b (L, C), lnf.w (C), lnf.b (C). Matrices are (out, in), nn.Linear's
layout. llmc_open checks the magic, the version, the sizes and that the file holds exactly the
bytes they give (a truncated file, or one with bytes appended, is refused with both counts).

Errors: every function returns 0 on success (json_get: nullptr when absent) and -1 with a
message naming the file and the problem in the struct's error field or in err. Host code only,
plain C++17 (the fuzz harnesses build it with any host compiler).
*/
#pragma once

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "fileio.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the weight formats store little-endian values, read here in host order");

// ---------------------------------------------------------------------------------------------
// Elements

inline float bf16_to_float(uint16_t h) {
    const uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// IEEE half precision, every value exactly (subnormals, infinities and NaN included).
inline float f16_to_float(uint16_t h) {
    const uint32_t sign = (uint32_t)(h >> 15) << 31, exponent = (h >> 10) & 0x1f,
                   mantissa = h & 0x3ff;
    if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24
        const float v = ldexpf((float)mantissa, -24);
        return sign ? -v : v;
    }
    const uint32_t bits = exponent == 0x1f
                              ? sign | 0x7f800000u | (mantissa << 13)
                              : sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
    float f;
    memcpy(&f, &bits, sizeof(f));
    return f;
}

// ---------------------------------------------------------------------------------------------
// JSON

enum JsonKind { JSON_NULL, JSON_BOOL, JSON_NUMBER, JSON_STRING, JSON_ARRAY, JSON_OBJECT };
constexpr int JSON_MAX_DEPTH = 64;

struct JsonValue {
    int kind = JSON_NULL;
    bool boolean = false;
    double number = 0.0;
    std::string text;               // JSON_STRING, UTF-8
    std::vector<std::string> keys;  // JSON_OBJECT: the keys, in file order
    std::vector<JsonValue> items;   // JSON_ARRAY: the elements; JSON_OBJECT: the keys' values
};

struct JsonParser {
    const char* p;
    const char* end;
    const char* start;
    char* err;
    size_t err_size;
};

inline int json_fail(JsonParser* j, const char* what) {
    snprintf(j->err, j->err_size, "%s at byte %lld", what, (long long)(j->p - j->start));
    return -1;
}

inline void json_skip_space(JsonParser* j) {
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\t' || *j->p == '\n' || *j->p == '\r'))
        j->p++;
}

inline void json_put_utf8(std::string* s, uint32_t cp) {
    if (cp < 0x80) {
        s->push_back((char)cp);
    } else if (cp < 0x800) {
        s->push_back((char)(0xc0 | (cp >> 6)));
        s->push_back((char)(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
        s->push_back((char)(0xe0 | (cp >> 12)));
        s->push_back((char)(0x80 | ((cp >> 6) & 0x3f)));
        s->push_back((char)(0x80 | (cp & 0x3f)));
    } else {
        s->push_back((char)(0xf0 | (cp >> 18)));
        s->push_back((char)(0x80 | ((cp >> 12) & 0x3f)));
        s->push_back((char)(0x80 | ((cp >> 6) & 0x3f)));
        s->push_back((char)(0x80 | (cp & 0x3f)));
    }
}

inline int json_hex4(JsonParser* j, uint32_t* out) {
    if (j->end - j->p < 4) return json_fail(j, "a \\u escape cut short");
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = *j->p++;
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return json_fail(j, "a \\u escape with a character that is not hexadecimal");
    }
    *out = v;
    return 0;
}

// A string, *j->p at its opening quote.
inline int json_string(JsonParser* j, std::string* out) {
    j->p++;
    out->clear();
    while (true) {
        if (j->p >= j->end) return json_fail(j, "a string without its closing quote");
        const unsigned char c = (unsigned char)*j->p;
        if (c == '"') {
            j->p++;
            return 0;
        }
        if (c < 0x20) return json_fail(j, "a control character inside a string");
        if (c != '\\') {
            out->push_back((char)c);
            j->p++;
            continue;
        }
        if (++j->p >= j->end) return json_fail(j, "a string without its closing quote");
        const char e = *j->p++;
        static const char ESCAPED[] = "\"\\/bfnrt", MEANT[] = "\"\\/\b\f\n\r\t";
        if (const char* at = e != '\0' ? strchr(ESCAPED, e) : nullptr) {
            out->push_back(MEANT[at - ESCAPED]);
            continue;
        }
        if (e != 'u') return json_fail(j, "an unknown escape in a string");
        uint32_t cp;
        if (json_hex4(j, &cp) != 0) return -1;
        if (cp >= 0xd800 && cp < 0xdc00) {  // a high surrogate: its low one follows
            uint32_t low;
            if (j->end - j->p < 2 || j->p[0] != '\\' || j->p[1] != 'u')
                return json_fail(j, "a \\u surrogate without its pair");
            j->p += 2;
            if (json_hex4(j, &low) != 0) return -1;
            if (low < 0xdc00 || low >= 0xe000)
                return json_fail(j, "a \\u surrogate without its pair");
            cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        } else if (cp >= 0xdc00 && cp < 0xe000) {
            return json_fail(j, "a \\u low surrogate alone");
        }
        json_put_utf8(out, cp);
    }
}

// A number by JSON's grammar: -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)?
inline int json_number(JsonParser* j, double* out) {
    const char* s = j->p;
    auto digits = [j]() {
        const char* from = j->p;
        while (j->p < j->end && *j->p >= '0' && *j->p <= '9') j->p++;
        return j->p > from;
    };
    if (j->p < j->end && *j->p == '-') j->p++;
    if (j->p < j->end && *j->p == '0') j->p++;
    else if (!digits()) return json_fail(j, "a malformed number");
    if (j->p < j->end && *j->p == '.') {
        j->p++;
        if (!digits()) return json_fail(j, "a malformed number");
    }
    if (j->p < j->end && (*j->p == 'e' || *j->p == 'E')) {
        j->p++;
        if (j->p < j->end && (*j->p == '+' || *j->p == '-')) j->p++;
        if (!digits()) return json_fail(j, "a malformed number");
    }
    if (j->p - s > 63) return json_fail(j, "a number of more than 63 characters");
    char buf[64];
    memcpy(buf, s, (size_t)(j->p - s));
    buf[j->p - s] = '\0';
    *out = strtod(buf, nullptr);
    return 0;
}

inline int json_value(JsonParser* j, JsonValue* v, int depth) {
    json_skip_space(j);
    if (j->p >= j->end) return json_fail(j, "the text ends where a value should be");
    if (depth > JSON_MAX_DEPTH) return json_fail(j, "values nested too deeply");
    auto literal = [j](const char* word) {
        const size_t n = strlen(word);
        if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0) return false;
        j->p += n;
        return true;
    };
    const char c = *j->p;
    if (c == '"') {
        v->kind = JSON_STRING;
        return json_string(j, &v->text);
    }
    if (c == '{' || c == '[') {
        const bool object = c == '{';
        v->kind = object ? JSON_OBJECT : JSON_ARRAY;
        j->p++;
        json_skip_space(j);
        if (j->p < j->end && *j->p == (object ? '}' : ']')) {
            j->p++;
            return 0;
        }
        while (true) {
            json_skip_space(j);
            if (object) {
                if (j->p >= j->end || *j->p != '"') return json_fail(j, "an object key expected");
                std::string key;
                if (json_string(j, &key) != 0) return -1;
                for (const std::string& k : v->keys)
                    if (k == key) return json_fail(j, ("the key \"" + key + "\" twice").c_str());
                v->keys.push_back(key);
                json_skip_space(j);
                if (j->p >= j->end || *j->p != ':') return json_fail(j, "':' expected");
                j->p++;
            }
            v->items.emplace_back();
            if (json_value(j, &v->items.back(), depth + 1) != 0) return -1;
            json_skip_space(j);
            if (j->p < j->end && *j->p == ',') {
                j->p++;
                continue;
            }
            if (j->p < j->end && *j->p == (object ? '}' : ']')) {
                j->p++;
                return 0;
            }
            return json_fail(j, object ? "',' or '}' expected" : "',' or ']' expected");
        }
    }
    if (literal("true")) {
        v->kind = JSON_BOOL;
        v->boolean = true;
        return 0;
    }
    if (literal("false")) {
        v->kind = JSON_BOOL;
        return 0;
    }
    if (literal("null")) return 0;
    if (c == '-' || (c >= '0' && c <= '9')) {
        v->kind = JSON_NUMBER;
        return json_number(j, &v->number);
    }
    return json_fail(j, "an unexpected character");
}

// Parses text[0..n) as one JSON value. Returns 0, or -1 with "WHAT at byte K" in err.
inline int json_parse(const char* text, size_t n, JsonValue* out, char* err, size_t err_size) {
    JsonParser j = {text, text + n, text, err, err_size};
    *out = JsonValue();
    if (json_value(&j, out, 0) != 0) return -1;
    json_skip_space(&j);
    if (j.p != j.end) return json_fail(&j, "text after the value");
    return 0;
}

// The value of `key` in object v, or nullptr (also when v is no object).
inline const JsonValue* json_get(const JsonValue* v, const char* key) {
    if (v == nullptr || v->kind != JSON_OBJECT) return nullptr;
    for (size_t i = 0; i < v->keys.size(); i++)
        if (v->keys[i] == key) return &v->items[i];
    return nullptr;
}

// Whether v is a whole number in [lo, hi]; its value in *out.
inline bool json_int(const JsonValue* v, int64_t lo, int64_t hi, int64_t* out) {
    if (v == nullptr || v->kind != JSON_NUMBER || !(v->number >= (double)lo) ||
        !(v->number <= (double)hi) || v->number != floor(v->number))
        return false;
    *out = (int64_t)v->number;
    return true;
}

// ---------------------------------------------------------------------------------------------
// Writing a whole file

// A file written atomically: into a temporary file next to it (atomic_open), then fsync and
// rename over the final name (atomic_commit), so a reader sees the old file or the whole new
// one. Each returns 0, or -1 with a message naming the path (the temporary file removed).
struct AtomicFile {
    std::string path, tmp;
    FILE* f;
};

inline int atomic_open(AtomicFile* a, const char* path, char* err, size_t err_size) {
    a->path = path;
    a->tmp = a->path + ".tmp" + std::to_string((long)getpid());
    a->f = fopen(a->tmp.c_str(), "wb");
    if (a->f == nullptr) {
        snprintf(err, err_size, "cannot create %s: %s", a->tmp.c_str(), strerror(errno));
        return -1;
    }
    return 0;
}

inline int atomic_write(AtomicFile* a, const void* data, size_t n, char* err, size_t err_size) {
    if (n == 0 || fwrite(data, 1, n, a->f) == n) return 0;
    snprintf(err, err_size, "cannot write %s: %s", a->tmp.c_str(), strerror(errno));
    fclose(a->f);
    unlink(a->tmp.c_str());
    return -1;
}

inline int atomic_commit(AtomicFile* a, char* err, size_t err_size) {
    const bool flushed = fflush(a->f) == 0 && fsync(fileno(a->f)) == 0;
    const int saved = errno;
    const bool closed = fclose(a->f) == 0;
    if (!flushed || !closed || rename(a->tmp.c_str(), a->path.c_str()) != 0) {
        snprintf(err, err_size, "cannot write %s: %s", a->path.c_str(),
                 strerror(flushed ? errno : saved));
        unlink(a->tmp.c_str());
        return -1;
    }
    return 0;
}

// Writes n bytes as the file at path, atomically.
inline int write_file_atomic(const char* path, const void* data, size_t n, char* err,
                             size_t err_size) {
    AtomicFile a;
    if (atomic_open(&a, path, err, err_size) != 0 || atomic_write(&a, data, n, err, err_size) != 0)
        return -1;
    return atomic_commit(&a, err, err_size);
}

// ---------------------------------------------------------------------------------------------
// safetensors

struct SafetensorsDtype {
    const char* name;
    int bytes;
};
static const SafetensorsDtype SAFETENSORS_DTYPES[] = {
    {"F64", 8}, {"F32", 4}, {"F16", 2},  {"BF16", 2},    {"I64", 8},
    {"I32", 4}, {"I16", 2}, {"I8", 1},   {"U64", 8},     {"U32", 4},
    {"U16", 2}, {"U8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};
constexpr uint64_t SAFETENSORS_MAX_HEADER = 100000000;  // the format's limit on N
constexpr int SAFETENSORS_MAX_DIMS = 8;

struct SafeTensor {
    std::string name;
    std::string dtype;  // one of SAFETENSORS_DTYPES
    std::vector<int64_t> shape;
    uint64_t begin, end;  // byte offsets into the data
};

struct SafetensorsFile {
    char path[1024];
    FILE* file;
    uint64_t data_start;  // 8 + N
    std::vector<SafeTensor> tensors;
    std::vector<std::pair<std::string, std::string>> metadata;  // "__metadata__"
    char error[1536];
};

inline void safetensors_close(SafetensorsFile* f) {
    if (f->file) fclose(f->file);
    f->file = nullptr;
}

inline int safetensors_fail(SafetensorsFile* f, const char* fmt, ...)
    __attribute__((format(printf, 2, 3)));
inline int safetensors_fail(SafetensorsFile* f, const char* fmt, ...) {
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    snprintf(f->error, sizeof(f->error), "safetensors file %s: %s", f->path, msg);
    safetensors_close(f);
    return -1;
}

inline int safetensors_dtype_bytes(const std::string& name) {
    for (const SafetensorsDtype& d : SAFETENSORS_DTYPES)
        if (name == d.name) return d.bytes;
    return 0;
}

// Opens and checks the file at path (see the top of this file). On failure it is closed.
inline int safetensors_open(SafetensorsFile* f, const char* path) {
    f->file = nullptr;
    f->tensors.clear();
    f->metadata.clear();
    snprintf(f->path, sizeof(f->path), "%s", path);
    int64_t size;
    char err[1024];
    f->file = fopen_regular(path, "safetensors file", &size, err, sizeof(err));
    if (f->file == nullptr) {
        snprintf(f->error, sizeof(f->error), "%s", err);
        return -1;
    }
    uint64_t n = 0;
    if (size < 8 || fread(&n, 8, 1, f->file) != 1)
        return safetensors_fail(f, "%lld bytes, too short for the 8-byte header length",
                                (long long)size);
    if (n > (uint64_t)size - 8)
        return safetensors_fail(f,
                                "its header length %llu runs past the end of the file (%lld bytes)",
                                (unsigned long long)n, (long long)size);
    if (n > SAFETENSORS_MAX_HEADER)
        return safetensors_fail(f, "its header length %llu is over the format's limit of %llu",
                                (unsigned long long)n, (unsigned long long)SAFETENSORS_MAX_HEADER);
    std::string text(n, '\0');
    if (n > 0 && fread(&text[0], 1, n, f->file) != n)
        return safetensors_fail(f, "cannot read its header: %s", strerror(errno));
    JsonValue header;
    if (json_parse(text.data(), text.size(), &header, err, sizeof(err)) != 0)
        return safetensors_fail(f, "its header is not valid JSON: %s", err);
    if (header.kind != JSON_OBJECT) return safetensors_fail(f, "its header is not a JSON object");
    f->data_start = 8 + n;
    const uint64_t data_bytes = (uint64_t)size - f->data_start;
    for (size_t i = 0; i < header.keys.size(); i++) {
        const std::string& name = header.keys[i];
        const JsonValue* v = &header.items[i];
        if (name == "__metadata__") {
            if (v->kind != JSON_OBJECT)
                return safetensors_fail(f, "its __metadata__ is not an object of strings");
            for (size_t k = 0; k < v->keys.size(); k++) {
                if (v->items[k].kind != JSON_STRING)
                    return safetensors_fail(f, "its __metadata__ entry \"%s\" is not a string",
                                            v->keys[k].c_str());
                f->metadata.emplace_back(v->keys[k], v->items[k].text);
            }
            continue;
        }
        SafeTensor t;
        t.name = name;
        const JsonValue* dtype = json_get(v, "dtype");
        const JsonValue* shape = json_get(v, "shape");
        const JsonValue* offsets = json_get(v, "data_offsets");
        if (v->kind != JSON_OBJECT || dtype == nullptr || dtype->kind != JSON_STRING ||
            shape == nullptr || shape->kind != JSON_ARRAY || offsets == nullptr ||
            offsets->kind != JSON_ARRAY || offsets->items.size() != 2)
            return safetensors_fail(
                f,
                "tensor %s: its entry needs \"dtype\" (a string), \"shape\" (an array) and "
                "\"data_offsets\" (two numbers)",
                name.c_str());
        t.dtype = dtype->text;
        const int elem = safetensors_dtype_bytes(t.dtype);
        if (elem == 0)
            return safetensors_fail(f,
                                    "tensor %s has dtype \"%s\", which safetensors does not "
                                    "define",
                                    name.c_str(), t.dtype.c_str());
        if (shape->items.size() > SAFETENSORS_MAX_DIMS)
            return safetensors_fail(f, "tensor %s has %zu dimensions (at most %d here)",
                                    name.c_str(), shape->items.size(), SAFETENSORS_MAX_DIMS);
        uint64_t numel = 1;
        for (const JsonValue& d : shape->items) {
            int64_t dim;
            if (!json_int(&d, 0, (int64_t)1 << 40, &dim))
                return safetensors_fail(f,
                                        "tensor %s: its shape holds something other than a "
                                        "size",
                                        name.c_str());
            t.shape.push_back(dim);
            // past the data's size the count only needs to stay too large (no overflow)
            if (dim == 0) numel = 0;
            else if (__builtin_mul_overflow(numel, (uint64_t)dim, &numel) || numel > data_bytes)
                numel = data_bytes + 1;
        }
        int64_t begin, end;
        if (!json_int(&offsets->items[0], 0, INT64_MAX / 2, &begin) ||
            !json_int(&offsets->items[1], 0, INT64_MAX / 2, &end) || end < begin)
            return safetensors_fail(f, "tensor %s: its data_offsets are not two ascending offsets",
                                    name.c_str());
        t.begin = (uint64_t)begin;
        t.end = (uint64_t)end;
        if (t.end - t.begin != numel * (uint64_t)elem)
            return safetensors_fail(
                f,
                "tensor %s: its data_offsets [%llu, %llu] span %llu bytes, its shape and "
                "dtype %s need %llu",
                name.c_str(), (unsigned long long)t.begin, (unsigned long long)t.end,
                (unsigned long long)(t.end - t.begin), t.dtype.c_str(),
                (unsigned long long)(numel * (uint64_t)elem));
        f->tensors.push_back(t);
    }
    // the tensors back to back from 0 to the end of the file
    std::vector<const SafeTensor*> order;
    for (const SafeTensor& t : f->tensors) order.push_back(&t);
    std::sort(order.begin(), order.end(), [](const SafeTensor* a, const SafeTensor* b) {
        return a->begin < b->begin || (a->begin == b->begin && a->end < b->end);
    });
    uint64_t at = 0;
    for (const SafeTensor* t : order) {
        if (t->begin != at)
            return safetensors_fail(f, "tensor %s starts at data byte %llu, where %s (%llu)",
                                    t->name.c_str(), (unsigned long long)t->begin,
                                    t->begin > at ? "a gap begins" : "it overlaps the one before",
                                    (unsigned long long)at);
        if (t->end > data_bytes)
            return safetensors_fail(
                f,
                "truncated: tensor %s's data ends at byte %llu of the file, which has %lld "
                "bytes",
                t->name.c_str(), (unsigned long long)(f->data_start + t->end), (long long)size);
        at = t->end;
    }
    if (at != data_bytes)
        return safetensors_fail(f, "%llu bytes after the last tensor's data",
                                (unsigned long long)(data_bytes - at));
    return 0;
}

inline const SafeTensor* safetensors_find(const SafetensorsFile* f, const char* name) {
    for (const SafeTensor& t : f->tensors)
        if (t.name == name) return &t;
    return nullptr;
}

// Elements [first, first + n) of tensor t, row-major, converted to float (F32, BF16, F16).
inline int safetensors_read(SafetensorsFile* f, const SafeTensor* t, uint64_t first, uint64_t n,
                            float* dst) {
    const int elem = safetensors_dtype_bytes(t->dtype);
    if (t->dtype != "F32" && t->dtype != "BF16" && t->dtype != "F16") {
        snprintf(f->error, sizeof(f->error),
                 "safetensors file %s: tensor %s has dtype %s; weights are read from F32, BF16 "
                 "or F16",
                 f->path, t->name.c_str(), t->dtype.c_str());
        return -1;
    }
    if ((first + n) * elem > t->end - t->begin) {
        snprintf(f->error, sizeof(f->error), "safetensors file %s: a read past tensor %s", f->path,
                 t->name.c_str());
        return -1;
    }
    std::vector<uint16_t> half(elem == 2 ? n : 0);
    void* into = elem == 4 ? (void*)dst : (void*)half.data();
    if (fseeko(f->file, (off_t)(f->data_start + t->begin + first * elem), SEEK_SET) != 0 ||
        fread(into, elem, n, f->file) != n) {
        snprintf(f->error, sizeof(f->error), "safetensors file %s: cannot read tensor %s: %s",
                 f->path, t->name.c_str(), ferror(f->file) ? strerror(errno) : "end of file");
        return -1;
    }
    for (uint64_t i = 0; elem == 2 && i < n; i++)
        dst[i] = t->dtype == "BF16" ? bf16_to_float(half[i]) : f16_to_float(half[i]);
    return 0;
}

// One tensor for safetensors_write: its name, shape and float values (written as F32).
struct SafetensorsOut {
    std::string name;
    std::vector<int64_t> shape;
    const float* data;
};

inline void json_put_string(std::string* out, const std::string& s) {
    out->push_back('"');
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            out->push_back('\\');
            out->push_back((char)c);
        } else if (c < 0x20) {
            char esc[8];
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            *out += esc;
        } else {
            out->push_back((char)c);
        }
    }
    out->push_back('"');
}

// Writes the tensors as F32 in the order given, with the metadata (string pairs).
inline int safetensors_write(const char* path, const std::vector<SafetensorsOut>& tensors,
                             const std::vector<std::pair<std::string, std::string>>& metadata,
                             char* err, size_t err_size) {
    std::string header = "{";
    if (!metadata.empty()) {
        header += "\"__metadata__\":{";
        for (size_t i = 0; i < metadata.size(); i++) {
            if (i) header += ",";
            json_put_string(&header, metadata[i].first);
            header += ":";
            json_put_string(&header, metadata[i].second);
        }
        header += "}";
    }
    uint64_t at = 0;
    for (const SafetensorsOut& t : tensors) {
        uint64_t numel = 1;
        if (header.size() > 1) header += ",";
        json_put_string(&header, t.name);
        header += ":{\"dtype\":\"F32\",\"shape\":[";
        for (size_t d = 0; d < t.shape.size(); d++) {
            header += (d ? "," : "") + std::to_string(t.shape[d]);
            numel *= (uint64_t)t.shape[d];
        }
        header += "],\"data_offsets\":[" + std::to_string(at) + "," +
                  std::to_string(at + 4 * numel) + "]}";
        at += 4 * numel;
    }
    header += "}";
    while ((8 + header.size()) % 8 != 0) header += " ";
    const uint64_t n = header.size();
    AtomicFile a;
    if (atomic_open(&a, path, err, err_size) != 0 || atomic_write(&a, &n, 8, err, err_size) != 0 ||
        atomic_write(&a, header.data(), header.size(), err, err_size) != 0)
        return -1;
    for (const SafetensorsOut& t : tensors) {
        uint64_t numel = 1;
        for (int64_t d : t.shape) numel *= (uint64_t)d;
        if (atomic_write(&a, t.data, 4 * numel, err, err_size) != 0) return -1;
    }
    return atomic_commit(&a, err, err_size);
}

// ---------------------------------------------------------------------------------------------
// llm.c's model files

constexpr int LLMC_MAGIC = 20240326;
constexpr int LLMC_HEADER_INTS = 256;
constexpr int LLMC_VERSION_FP32 = 3, LLMC_VERSION_BF16 = 5;
constexpr int LLMC_NUM_TENSORS = 16;

struct LlmcTensor {
    const char* name;    // llm.c's: "wte", "wpe", "ln1w", ..., "lnfb"
    bool per_layer;      // L of them back to back, (rows, cols) each
    int64_t rows, cols;  // cols 0: a vector of rows elements
    uint64_t offset;     // of its first element, in elements from the end of the header
};

struct LlmcFile {
    char path[1024];
    FILE* file;
    int version, elem_bytes;    // 3: 4 (fp32), 5: 2 (bf16)
    int maxT, V, L, NH, C, Vp;  // the header's sizes
    LlmcTensor tensors[LLMC_NUM_TENSORS];
    char error[1536];
};

inline void llmc_close(LlmcFile* f) {
    if (f->file) fclose(f->file);
    f->file = nullptr;
}

// The tensors of f's sizes in file order, with their offsets; returns the element count.
inline uint64_t llmc_tensors(LlmcFile* f) {
    const int64_t C = f->C, L = f->L;
    const LlmcTensor shapes[LLMC_NUM_TENSORS] = {
        {"wte", false, f->Vp, C, 0},    {"wpe", false, f->maxT, C, 0}, {"ln1w", true, C, 0, 0},
        {"ln1b", true, C, 0, 0},        {"qkvw", true, 3 * C, C, 0},   {"qkvb", true, 3 * C, 0, 0},
        {"attprojw", true, C, C, 0},    {"attprojb", true, C, 0, 0},   {"ln2w", true, C, 0, 0},
        {"ln2b", true, C, 0, 0},        {"fcw", true, 4 * C, C, 0},    {"fcb", true, 4 * C, 0, 0},
        {"fcprojw", true, C, 4 * C, 0}, {"fcprojb", true, C, 0, 0},    {"lnfw", false, C, 0, 0},
        {"lnfb", false, C, 0, 0}};
    uint64_t at = 0;
    for (int i = 0; i < LLMC_NUM_TENSORS; i++) {
        f->tensors[i] = shapes[i];
        f->tensors[i].offset = at;
        const uint64_t each =
            (uint64_t)shapes[i].rows * (uint64_t)(shapes[i].cols > 0 ? shapes[i].cols : 1);
        at += each * (shapes[i].per_layer ? (uint64_t)L : 1);
    }
    return at;
}

inline int llmc_fail(LlmcFile* f, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline int llmc_fail(LlmcFile* f, const char* fmt, ...) {
    char msg[1024];
    va_list args;
    va_start(args, fmt);
    vsnprintf(msg, sizeof(msg), fmt, args);
    va_end(args);
    snprintf(f->error, sizeof(f->error), "llm.c model file %s: %s", f->path, msg);
    llmc_close(f);
    return -1;
}

// Opens and checks the llm.c model file at path (see the top of this file).
inline int llmc_open(LlmcFile* f, const char* path) {
    f->file = nullptr;
    snprintf(f->path, sizeof(f->path), "%s", path);
    int64_t size;
    char err[1024];
    f->file = fopen_regular(path, "llm.c model file", &size, err, sizeof(err));
    if (f->file == nullptr) {
        snprintf(f->error, sizeof(f->error), "%s", err);
        return -1;
    }
    int32_t h[LLMC_HEADER_INTS];
    if (size < (int64_t)sizeof(h) || fread(h, sizeof(h), 1, f->file) != 1)
        return llmc_fail(f, "truncated: %lld bytes, less than its %zu-byte header", (long long)size,
                         sizeof(h));
    if (h[0] != LLMC_MAGIC)
        return llmc_fail(f, "bad magic %d (an llm.c model file starts with %d)", h[0], LLMC_MAGIC);
    f->version = h[1];
    if (f->version != LLMC_VERSION_FP32 && f->version != LLMC_VERSION_BF16)
        return llmc_fail(f,
                         "version %d; read here: %d (fp32) and %d (bf16), the versions with the "
                         "padded vocabulary",
                         f->version, LLMC_VERSION_FP32, LLMC_VERSION_BF16);
    f->elem_bytes = f->version == LLMC_VERSION_FP32 ? 4 : 2;
    f->maxT = h[2];
    f->V = h[3];
    f->L = h[4];
    f->NH = h[5];
    f->C = h[6];
    f->Vp = h[7];
    if (f->maxT < 1 || f->V < 1 || f->L < 1 || f->NH < 1 || f->C < 1 || f->Vp < f->V ||
        f->maxT > (1 << 24) || f->Vp > (1 << 26) || f->L > (1 << 16) || f->C > (1 << 20))
        return llmc_fail(f, "its header's sizes maxT %d V %d L %d NH %d C %d Vp %d are not a model",
                         f->maxT, f->V, f->L, f->NH, f->C, f->Vp);
    const uint64_t need = sizeof(h) + llmc_tensors(f) * f->elem_bytes;
    if ((uint64_t)size != need)
        return llmc_fail(f,
                         "%s: %lld bytes, where its header (maxT %d V %d Vp %d L %d C %d, %s) "
                         "gives %llu",
                         (uint64_t)size < need ? "truncated" : "longer than its tensors",
                         (long long)size, f->maxT, f->V, f->Vp, f->L, f->C,
                         f->elem_bytes == 4 ? "fp32" : "bf16", (unsigned long long)need);
    return 0;
}

// Elements [first, first + n) of the parameters (in file order, from the end of the header),
// as float.
inline int llmc_read(LlmcFile* f, uint64_t first, uint64_t n, float* dst) {
    std::vector<uint16_t> half(f->elem_bytes == 2 ? n : 0);
    void* into = f->elem_bytes == 4 ? (void*)dst : (void*)half.data();
    if (fseeko(f->file, (off_t)(LLMC_HEADER_INTS * 4 + first * f->elem_bytes), SEEK_SET) != 0 ||
        fread(into, f->elem_bytes, n, f->file) != n) {
        snprintf(f->error, sizeof(f->error), "llm.c model file %s: cannot read: %s", f->path,
                 ferror(f->file) ? strerror(errno) : "end of file");
        return -1;
    }
    for (uint64_t i = 0; i < half.size(); i++) dst[i] = bf16_to_float(half[i]);
    return 0;
}
