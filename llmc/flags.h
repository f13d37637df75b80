/*
llmc/flags.h: a command line described by one table. Each entry names a flag, the field of the
program's configuration struct it sets, its type, its default, its allowed values (a range for
numbers, a list of choices or a length for strings), what part of the run it belongs to, and its
help line. Everything else reads the table: the defaults (flags_defaults), parsing
(flags_parse), checking every value against its bounds (flags_check: one function for every mode
of the program), --help (flags_print_usage), printing a value (flag_format) and reading one back
(flag_set), and comparing two configurations flag by flag (flags_differences), which is how a
resumed run and the ranks of one job prove they agree.

Rules of the command line: `--name value` or `--name=value`; a switch takes no value; a flag
given twice takes its last value; a number must be all digits (integers) or a finite number
(doubles) in the flag's range; an unknown flag is an error, never ignored. A byte count
(FLAG_BYTES) is a number with an optional unit, k, M, G or T (powers of 1024, either case: 80G
is 80 x 2^30 bytes), that comes to a whole number of bytes (1.5G is exact; 1.5 alone, or 0.1k,
is refused rather than rounded).

Host code only.
*/
#pragma once

#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

enum FlagType { FLAG_INT, FLAG_INT64, FLAG_BYTES, FLAG_DOUBLE, FLAG_STRING, FLAG_SWITCH };
// FLAG_BYTES: a byte count held in a long long (see the rules above).

// What part of a run a flag describes, for comparing two configurations.
enum FlagRole {
    FLAG_IDENTITY,  // the run itself (model, data, schedule, optimizer): a resumed run keeps it
    FLAG_PER_RANK,  // how each rank splits the global batch (--batch, --grad-accum): a resumed
                    // run may change it as long as the global batch stays the same
    FLAG_FREE,      // how long, what is logged, sampled and saved: a resumed run may change it
};

struct Flag {
    const char* name;  // "--lr"
    FlagType type;
    size_t field;         // offsetof in the configuration struct
    size_t capacity;      // FLAG_STRING: the field's size in bytes
    const char* default_value;  // as given on the command line ("" for a string, "off": a switch)
    double min, max;      // numbers: the allowed range, inclusive
    const char* choices;  // FLAG_STRING: allowed values separated by '|', or nullptr for any;
                          // FLAG_INT: a word the flag also takes ("auto", "all"): FLAG_WORD
    FlagRole role;
    const char* help;
};

// Integer and double range covering the whole type (for flags without a narrower bound).
constexpr double FLAG_INT_MIN = (double)INT32_MIN, FLAG_INT_MAX = (double)INT32_MAX;
// What an integer flag with a word among its choices holds when given the word (outside its
// range).
constexpr int FLAG_WORD = -1;

inline const Flag* flag_find(const Flag* flags, int count, const char* name, size_t name_len) {
    for (int i = 0; i < count; i++)
        if (strlen(flags[i].name) == name_len && strncmp(flags[i].name, name, name_len) == 0)
            return &flags[i];
    return nullptr;
}

inline bool flag_is_choice(const Flag* flag, const char* value) {
    const size_t n = strlen(value);
    for (const char* c = flag->choices; *c;) {
        const char* end = strchr(c, '|');
        const size_t len = end ? (size_t)(end - c) : strlen(c);
        if (len == n && strncmp(c, value, n) == 0) return true;
        if (end == nullptr) break;
        c = end + 1;
    }
    return false;
}

// The value of `flag` in config as text, in a form flag_set reads back exactly. Returns out.
inline const char* flag_format(const Flag* flag, const void* config, char* out, size_t len) {
    const char* field = (const char*)config + flag->field;
    switch (flag->type) {
        case FLAG_INT:
            if (flag->choices && *(const int*)field == FLAG_WORD)
                snprintf(out, len, "%s", flag->choices);
            else snprintf(out, len, "%d", *(const int*)field);
            break;
        case FLAG_INT64:
        case FLAG_BYTES:
            snprintf(out, len, "%lld", *(const long long*)field);
            break;
        case FLAG_DOUBLE: {  // the shortest of %g and %.17g that reads back as the same double
            const double v = *(const double*)field;
            snprintf(out, len, "%g", v);
            if (strtod(out, nullptr) != v) snprintf(out, len, "%.17g", v);
            break;
        }
        case FLAG_STRING:
            snprintf(out, len, "%s", field);
            break;
        case FLAG_SWITCH:
            snprintf(out, len, "%s", *(const int*)field ? "on" : "off");
            break;
    }
    return out;
}

// Largest byte count a FLAG_BYTES flag takes: 2^53, below which a double holds every whole
// number exactly (8 PiB).
constexpr double FLAG_BYTES_MAX = 9007199254740992.0;

// The bytes that `value` (a number with an optional unit k, M, G or T) comes to, or nullptr
// with a message in msg when it is no byte count or not a whole number of bytes.
inline const char* flag_parse_bytes(const Flag* flag, const char* value, long long* bytes,
                                    char* msg, size_t len) {
    char* end = nullptr;
    errno = 0;
    const double number = strtod(value, &end);
    const char* units = "kKmMgGtT";  // 2^10, 2^20, 2^30, 2^40 in pairs
    const char* unit_at = end != value && *end != '\0' ? strchr(units, *end) : nullptr;
    double unit = 1.0;
    if (unit_at != nullptr) {
        unit = std::ldexp(1.0, 10 * (1 + (int)(unit_at - units) / 2));
        end++;
    }
    const double v = number * unit;
    if (end == value || *end != '\0' || errno != 0 || !std::isfinite(v))
        snprintf(msg, len,
                 "%s: '%s' is not a byte count: a number with an optional unit k, M, G or T "
                 "(powers of 1024), e.g. 80G, 512M or 4e9",
                 flag->name, value);
    else if (std::fabs(v) > FLAG_BYTES_MAX)
        snprintf(msg, len, "%s: '%s' is more than 2^53 bytes", flag->name, value);
    else if (v != std::floor(v))
        snprintf(msg, len, "%s: '%s' is %.15g bytes, not a whole number of bytes", flag->name,
                 value, v);
    else {
        *bytes = (long long)v;
        return nullptr;
    }
    return msg;
}

// Sets `flag` in config from text. Returns an error message in msg, or nullptr. The range and
// choices are not checked here (flags_check does that for every flag, given or default).
inline const char* flag_set(const Flag* flag, void* config, const char* value, char* msg,
                            size_t len) {
    char* field = (char*)config + flag->field;
    char* end = nullptr;
    errno = 0;
    bool ok = *value != '\0';
    switch (flag->type) {
        case FLAG_INT: {
            if (flag->choices && flag_is_choice(flag, value)) {
                *(int*)field = FLAG_WORD;
                return nullptr;
            }
            long long v = strtoll(value, &end, 10);
            ok = ok && *end == '\0' && errno == 0 && v >= INT32_MIN && v <= INT32_MAX;
            if (ok) *(int*)field = (int)v;
            break;
        }
        case FLAG_INT64: {
            long long v = strtoll(value, &end, 10);
            ok = ok && *end == '\0' && errno == 0;
            if (ok) *(long long*)field = v;
            break;
        }
        case FLAG_BYTES:
            return flag_parse_bytes(flag, value, (long long*)field, msg, len);
        case FLAG_DOUBLE: {
            double v = strtod(value, &end);
            ok = ok && *end == '\0' && errno == 0 && std::isfinite(v);
            if (ok) *(double*)field = v;
            break;
        }
        case FLAG_STRING:
            if (strlen(value) >= flag->capacity) {
                snprintf(msg, len, "%s value is too long (at most %zu characters)", flag->name,
                         flag->capacity - 1);
                return msg;
            }
            snprintf(field, flag->capacity, "%s", value);
            return nullptr;
        case FLAG_SWITCH:
            ok = strcmp(value, "on") == 0 || strcmp(value, "off") == 0;
            if (ok) *(int*)field = strcmp(value, "on") == 0;
            break;
    }
    if (ok) return nullptr;
    snprintf(msg, len, "%s: '%s' is not a%s", flag->name, value,
             flag->type == FLAG_DOUBLE   ? " finite number"
             : flag->type == FLAG_SWITCH ? " switch value (on or off)"
                                         : "n integer in range");
    return msg;
}

// Sets every flag in config (of `size` bytes) to its default, and the bytes no flag sets to zero
// (so that two configurations compare exactly). Returns an error message naming a default that
// does not parse, or nullptr.
inline const char* flags_defaults(const Flag* flags, int count, void* config, size_t size,
                                  char* msg, size_t len) {
    memset(config, 0, size);
    for (int i = 0; i < count; i++)
        if (const char* err = flag_set(&flags[i], config, flags[i].default_value, msg, len))
            return err;
    return nullptr;
}

// Parses argv[1..argc) into config, which holds the defaults. Returns an error message or
// nullptr.
inline const char* flags_parse(const Flag* flags, int count, void* config, int argc, char** argv,
                               char* msg, size_t len) {
    for (int i = 1; i < argc; i++) {
        const char* arg = argv[i];
        const char* eq = strchr(arg, '=');
        const Flag* flag = flag_find(flags, count, arg, eq ? (size_t)(eq - arg) : strlen(arg));
        if (flag == nullptr) {
            snprintf(msg, len, "unknown flag '%s' (see --help)", arg);
            return msg;
        }
        if (flag->type == FLAG_SWITCH) {
            if (eq) {
                snprintf(msg, len, "%s takes no value", flag->name);
                return msg;
            }
            *(int*)((char*)config + flag->field) = 1;
            continue;
        }
        const char* value = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : nullptr);
        if (value == nullptr) {
            snprintf(msg, len, "%s needs a value", flag->name);
            return msg;
        }
        if (const char* err = flag_set(flag, config, value, msg, len)) return err;
    }
    return nullptr;
}

// Checks every flag's value against its range or choices. Returns an error message naming the
// first flag out of bounds, or nullptr.
inline const char* flags_check(const Flag* flags, int count, const void* config, char* msg,
                               size_t len) {
    for (int i = 0; i < count; i++) {
        const Flag* f = &flags[i];
        const char* field = (const char*)config + f->field;
        double v = 0.0;
        switch (f->type) {
            case FLAG_INT:
                if (f->choices && *(const int*)field == FLAG_WORD) continue;
                v = *(const int*)field;
                break;
            case FLAG_INT64:
            case FLAG_BYTES:
                v = (double)*(const long long*)field;
                break;
            case FLAG_DOUBLE:
                v = *(const double*)field;
                break;
            case FLAG_STRING:
                if (f->choices && !flag_is_choice(f, field)) {
                    snprintf(msg, len, "%s '%s' is not one of %s", f->name, field, f->choices);
                    return msg;
                }
                continue;
            case FLAG_SWITCH:
                continue;
        }
        if (!(v >= f->min && v <= f->max)) {
            char value[64];
            flag_format(f, config, value, sizeof(value));
            if (f->max >= (f->type == FLAG_DOUBLE ? INFINITY : FLAG_INT_MAX))
                snprintf(msg, len, "%s must be >= %.15g (got %s)", f->name, f->min, value);
            else
                snprintf(msg, len, "%s must be in [%.15g, %.15g] (got %s)", f->name, f->min, f->max,
                         value);
            return msg;
        }
    }
    return nullptr;
}

// --help: one line per flag with its help text, allowed values and the default (from
// `defaults`, a configuration holding them).
inline void flags_print_usage(FILE* out, const Flag* flags, int count, const void* defaults) {
    for (int i = 0; i < count; i++) {
        const Flag* f = &flags[i];
        char value[600];
        flag_format(f, defaults, value, sizeof(value));
        fprintf(out, "  %-20s %s", f->name, f->help);
        if (f->choices) fprintf(out, " [%s]", f->choices);
        if (f->type == FLAG_STRING) fprintf(out, " (default \"%s\")\n", value);
        else fprintf(out, " (default %s)\n", value);
    }
}

// Whether `flag` has another value in configuration a than in b, both formatted into va and vb
// (len bytes each).
inline bool flag_differs(const Flag* flag, const void* a, const void* b, char* va, char* vb,
                         size_t len) {
    flag_format(flag, a, va, len);
    flag_format(flag, b, vb, len);
    return strcmp(va, vb) != 0;
}

// Writes one line "  --flag: A vs B" into out (of len bytes, appended after what is there)
// for every flag whose role is in role_mask (1 << FlagRole) and whose value differs between
// configurations a and b, with the labels naming each side. Returns the number of differences.
inline int flags_differences(const Flag* flags, int count, const void* a, const void* b,
                             unsigned role_mask, const char* label_a, const char* label_b,
                             char* out, size_t len) {
    int differences = 0;
    for (int i = 0; i < count; i++) {
        const Flag* f = &flags[i];
        char va[600], vb[600];
        if (!(role_mask & (1u << f->role)) || !flag_differs(f, a, b, va, vb, sizeof(va))) continue;
        differences++;
        const size_t used = strlen(out);
        if (used + 1 < len)
            snprintf(out + used, len - used, "\n  %s: %s %s, %s %s", f->name, va, label_a, vb,
                     label_b);
    }
    return differences;
}

// A set of flags by index: bit i of word i / 64 for flag i (up to FLAG_MASK_BITS flags).
constexpr int FLAG_MASK_WORDS = 2, FLAG_MASK_BITS = 64 * FLAG_MASK_WORDS;
struct FlagMask {
    uint64_t words[FLAG_MASK_WORDS];
};
inline bool flag_mask_has(const FlagMask* m, int i) { return (m->words[i / 64] >> (i % 64)) & 1; }

// The flags that differ between configurations a and b, as flags_differences counts them: flag
// i's bit is set when flags[i] differs.
inline FlagMask flags_difference_mask(const Flag* flags, int count, const void* a, const void* b,
                                      unsigned role_mask) {
    FlagMask mask = {};
    for (int i = 0; i < count && i < FLAG_MASK_BITS; i++) {
        char va[600], vb[600];
        if ((role_mask & (1u << flags[i].role)) &&
            flag_differs(&flags[i], a, b, va, vb, sizeof(va)))
            mask.words[i / 64] |= 1ull << (i % 64);
    }
    return mask;
}
