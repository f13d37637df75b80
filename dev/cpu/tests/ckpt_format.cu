// Tests llmc/checkpoint.h's file format and its checks, in a scratch directory (argument 1,
// emptied first):
// - the CRC-32 gives the standard check value and equals a bit-at-a-time CRC written here;
// - a round trip returns every section, the step and the configuration, for sections written
//   whole or in pieces, empty ones, ones larger than the I/O chunk, and read whole or in parts;
// - the file is laid out as the header comment documents (parsed here independently, CRC
//   recomputed with the bitwise CRC);
// - every single-byte corruption at every position is rejected, with the message the damaged
//   field calls for (checksum for all but magic, version, end marker and size);
// - truncation at every length and appended bytes are rejected as such;
// - another version, another file type, malformed tables (with a valid CRC) are rejected;
// - a different configuration is rejected, naming the fields that differ when given a table;
// - a missing section, a wrong size, an out-of-range part, and writer misuse (duplicate or bad
//   names, too many or too few bytes) give errors and leave no temporary file;
// - a FIFO (without blocking) or a directory is refused by ckpt_open and ckpt_peek_config and
//   skipped by ckpt_find_latest; ckpt_peek_config reads the configuration and refuses one of
//   another size or a cut file.
// Host code only.
//! run: ./prog build/cpu/tests/ckpt_format_dir => pass /all checkpoint format checks passed/

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "../../../llmc/checkpoint.h"
#include "test_util.h"

// Bit-at-a-time reflected CRC-32, polynomial 0xEDB88320: the definition, no tables.
static uint32_t crc32_bitwise(const uint8_t* p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return ~crc;
}

static uint64_t rng_state = 0x1234567;
static uint32_t rand32() {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}
static std::vector<uint8_t> random_bytes(size_t n) {
    std::vector<uint8_t> v(n);
    for (auto& b : v) b = (uint8_t)rand32();
    return v;
}

// A configuration of fixed-size fields without padding, with a field table.
typedef struct {
    int32_t layers, heads, channels, vocab;
    int64_t max_seq;
    double beta2;
    float lr;
    int32_t zero_stage;
} TestConfig;
static_assert(sizeof(TestConfig) == 40, "TestConfig must have no padding");
static const CkptField CONFIG_FIELDS[] = {
    {"layers", offsetof(TestConfig, layers), CKPT_INT32},
    {"heads", offsetof(TestConfig, heads), CKPT_INT32},
    {"channels", offsetof(TestConfig, channels), CKPT_INT32},
    {"vocab", offsetof(TestConfig, vocab), CKPT_INT32},
    {"max_seq", offsetof(TestConfig, max_seq), CKPT_INT64},
    {"beta2", offsetof(TestConfig, beta2), CKPT_FLOAT64},
    {"lr", offsetof(TestConfig, lr), CKPT_FLOAT32},
    {"zero_stage", offsetof(TestConfig, zero_stage), CKPT_INT32},
};
static const int NUM_CONFIG_FIELDS = sizeof(CONFIG_FIELDS) / sizeof(CONFIG_FIELDS[0]);

static TestConfig base_config() {
    TestConfig c = {2, 4, 128, 50257, 1024, 0.95, 6e-4f, 1};
    return c;
}

static std::vector<uint8_t> read_file(const std::string& path) {
    std::vector<uint8_t> v;
    FILE* f = fopen(path.c_str(), "rb");
    if (f == NULL) return v;
    uint8_t buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) v.insert(v.end(), buf, buf + n);
    fclose(f);
    return v;
}

static void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
    FILE* f = fopen(path.c_str(), "wb");
    if (f == NULL || (!bytes.empty() && fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) ||
        fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path.c_str());
        exit(1);
    }
}

static uint64_t get_u64(const std::vector<uint8_t>& b, size_t at) {
    uint64_t v = 0;
    for (int k = 7; k >= 0; k--) v = (v << 8) | b[at + k];  // little-endian, spelled out
    return v;
}
static void set_u64(std::vector<uint8_t>& b, size_t at, uint64_t v) {
    for (int k = 0; k < 8; k++) b[at + k] = (uint8_t)(v >> (8 * k));
}
static void reseal(std::vector<uint8_t>& b) {  // recomputes the stored CRC after an edit
    set_u64(b, b.size() - 8, crc32_bitwise(b.data(), b.size() - 8));
}

// Tries to open path with the base configuration; returns the error ("" when it opened).
static std::string open_error(const std::string& path, const TestConfig* config = NULL,
                              bool with_table = true) {
    TestConfig c = config ? *config : base_config();
    CheckpointReader r;
    if (ckpt_open(&r, path.c_str(), &c, sizeof(c), with_table ? CONFIG_FIELDS : NULL,
                  with_table ? NUM_CONFIG_FIELDS : 0) == 0) {
        ckpt_close(&r);
        return "";
    }
    expect(r.file == NULL, "a failed open leaves the reader closed");
    return r.error;
}

static bool contains(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

static int count_temp_files(const char* dir) {
    int n = 0;
    DIR* d = opendir(dir);
    for (struct dirent* e; d != NULL && (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".tmp") != NULL) n++;
    if (d != NULL) closedir(d);
    return n;
}

static void test_crc() {
    expect(ckpt_crc32(0, "123456789", 9) == 0xCBF43926u, "CRC-32 check value of \"123456789\"");
    expect(ckpt_crc32(0, "", 0) == 0, "CRC-32 of nothing is 0");
    int bad = 0;
    for (size_t n = 0; n < 300; n++) {
        std::vector<uint8_t> d = random_bytes(n);
        size_t cut = n ? rand32() % n : 0;  // chained over two pieces
        uint32_t c = ckpt_crc32(ckpt_crc32(0, d.data(), cut), d.data() + cut, n - cut);
        if (c != crc32_bitwise(d.data(), n) || ckpt_crc32(0, d.data(), n) != c) bad++;
    }
    std::vector<uint8_t> big = random_bytes(1 << 20);
    expect(
        bad == 0 && ckpt_crc32(0, big.data(), big.size()) == crc32_bitwise(big.data(), big.size()),
        "slicing-by-8 CRC equals the bitwise CRC (lengths 0..299 in two pieces, and 1 MiB)");
}

static void test_round_trip(const std::string& dir) {
    TestConfig config = base_config();
    std::vector<uint8_t> params = random_bytes(1000), rng = random_bytes(8);
    std::vector<uint8_t> big = random_bytes(2 * CKPT_IO_CHUNK + 123);  // crosses the I/O chunk
    CheckpointWriter w;
    int rc = ckpt_writer_begin(&w, dir.c_str(), 77, &config, sizeof(config));
    if (rc == 0) rc = ckpt_write_section(&w, "params", params.data(), params.size());
    if (rc == 0) rc = ckpt_write_section(&w, "empty", NULL, 0);
    if (rc == 0) rc = ckpt_section_begin(&w, "big", big.size());
    for (size_t done = 0; rc == 0 && done < big.size();) {  // pieces of uneven sizes
        size_t n = std::min(big.size() - done, (size_t)(rand32() % 3000000) + 1);
        rc = ckpt_section_write(&w, big.data() + done, n);
        done += n;
    }
    if (rc == 0) rc = ckpt_write_section(&w, "rng", rng.data(), rng.size());
    if (rc == 0) rc = ckpt_writer_commit(&w, 0);
    expect(rc == 0, "write a checkpoint with four sections", rc ? w.error : "");
    std::string path = dir + "/ckpt_step00000077.bin";
    expect(count_temp_files(dir.c_str()) == 0, "no temporary file after commit");

    CheckpointReader r;
    rc = ckpt_open(&r, path.c_str(), &config, sizeof(config), CONFIG_FIELDS, NUM_CONFIG_FIELDS);
    expect(rc == 0, "open it", rc ? r.error : "");
    if (rc != 0) return;
    expect(r.step == 77, "step read back");
    std::vector<uint8_t> p2(params.size()), r2(rng.size()), b2(big.size());
    rc = ckpt_read_section(&r, "rng", r2.data(), r2.size());  // any order
    if (rc == 0) rc = ckpt_read_section(&r, "params", p2.data(), p2.size());
    if (rc == 0) rc = ckpt_read_section(&r, "empty", NULL, 0);
    if (rc == 0) rc = ckpt_read_section(&r, "big", b2.data(), b2.size());
    expect(rc == 0 && p2 == params && r2 == rng && b2 == big, "every section reads back equal",
           rc ? r.error : "");
    std::vector<uint8_t> part(5000);
    rc = ckpt_read_section_part(&r, "big", CKPT_IO_CHUNK - 100, part.data(), part.size());
    expect(rc == 0 && memcmp(part.data(), big.data() + CKPT_IO_CHUNK - 100, part.size()) == 0,
           "a part of a section reads back equal");
    rc = ckpt_read_section_part(&r, "big", big.size() - 10, part.data(), 11);
    expect(rc != 0 && contains(r.error, "cannot read 11 at byte"), "a part past the end fails",
           r.error);
    rc = ckpt_read_section(&r, "nope", part.data(), 1);
    expect(rc != 0 && contains(r.error, "has no section 'nope'"), "a missing section fails",
           r.error);
    rc = ckpt_read_section(&r, "params", p2.data(), params.size() - 1);
    expect(
        rc != 0 && contains(r.error, "section 'params' has 1000 bytes, this program expects 999"),
        "a wrong section size fails", r.error);
    ckpt_close(&r);

    // The layout, parsed here from the documented format.
    std::vector<uint8_t> f = read_file(path);
    size_t pos = 32 + sizeof(config);
    bool ok = f.size() > 64 && memcmp(f.data(), "GPT-CKPT", 8) == 0 && get_u64(f, 8) == 1 &&
              get_u64(f, 16) == 77 && get_u64(f, 24) == sizeof(config) &&
              memcmp(f.data() + 32, &config, sizeof(config)) == 0;
    const char* names[] = {"params", "empty", "big", "rng"};
    const std::vector<uint8_t>* datas[] = {&params, NULL, &big, &rng};
    for (int i = 0; ok && i < 4; i++) {
        size_t len = strlen(names[i]);
        ok = memcmp(f.data() + pos, names[i], len) == 0;
        for (size_t k = len; k < 64; k++) ok = ok && f[pos + k] == 0;
        size_t size = datas[i] ? datas[i]->size() : 0;
        ok = ok && get_u64(f, pos + 64) == size &&
             (size == 0 || memcmp(f.data() + pos + 72, datas[i]->data(), size) == 0);
        pos += 72 + size;
    }
    ok = ok && pos + 32 == f.size() && memcmp(f.data() + pos, "CKPT-END", 8) == 0 &&
         get_u64(f, pos + 8) == 4 && get_u64(f, pos + 16) == f.size() &&
         get_u64(f, pos + 24) == crc32_bitwise(f.data(), f.size() - 8);
    expect(ok, "the file is laid out as documented, CRC-32 over all but its last 8 bytes");
    remove(path.c_str());
}

// A small checkpoint, so every byte position can be damaged.
static std::string write_small(const std::string& dir, uint64_t step) {
    TestConfig config = base_config();
    std::vector<uint8_t> a = random_bytes(40), b = random_bytes(3);
    CheckpointWriter w;
    int rc = ckpt_writer_begin(&w, dir.c_str(), step, &config, sizeof(config));
    if (rc == 0) rc = ckpt_write_section(&w, "a", a.data(), a.size());
    if (rc == 0) rc = ckpt_write_section(&w, "b", b.data(), b.size());
    if (rc == 0) rc = ckpt_writer_commit(&w, 0);
    if (rc != 0) {
        fprintf(stderr, "cannot write the small checkpoint: %s\n", w.error);
        exit(1);
    }
    char path[CKPT_PATH_BYTES];
    ckpt_final_name(path, sizeof(path), dir.c_str(), step);
    return path;
}

static void test_corruption(const std::string& dir) {
    std::string good = write_small(dir, 1), bad = dir + "/damaged.bin";
    std::vector<uint8_t> f = read_file(good);
    const size_t n = f.size();
    expect(open_error(good).empty(), "the small checkpoint opens", open_error(good));
    int wrong = 0, tried = 0;
    std::string first_wrong;
    for (size_t i = 0; i < n; i++) {
        for (uint8_t mask : {0x01, 0x80, 0xFF}) {
            std::vector<uint8_t> g = f;
            g[i] ^= mask;
            write_file(bad, g);
            std::string e = open_error(bad);
            const char* want = i < 8                       ? "is not a checkpoint file"
                               : i < 16                    ? "has format version"
                               : i >= n - 32 && i < n - 24 ? "no end marker"
                               : i >= n - 16 && i < n - 8  ? "is truncated: its trailer says"
                                                           : "checksum mismatch";
            tried++;
            if (!contains(e, want) || !contains(e, bad.c_str())) {
                if (wrong++ == 0)
                    first_wrong =
                        "byte " + std::to_string(i) + ": '" + e + "', want '" + want + "'";
            }
        }
    }
    char detail[160];
    snprintf(detail, sizeof(detail), "%d of %d damaged files rejected with the right message",
             tried - wrong, tried);
    expect(wrong == 0, "every flipped byte (3 masks, every position) is rejected",
           wrong ? first_wrong : std::string(detail));

    wrong = 0;
    for (size_t len = 0; len < n; len++) {
        write_file(bad, std::vector<uint8_t>(f.begin(), f.begin() + len));
        std::string e = open_error(bad);
        if (!contains(e, "truncated") && wrong++ == 0)
            first_wrong = "length " + std::to_string(len) + ": '" + e + "'";
    }
    expect(wrong == 0, "truncation at every length is reported as truncation",
           wrong ? first_wrong : "");
    std::vector<uint8_t> longer = f;
    longer.push_back(0);
    write_file(bad, longer);
    expect(contains(open_error(bad), "has bytes appended"), "an appended byte is rejected",
           open_error(bad));

    std::vector<uint8_t> v2 = f;
    set_u64(v2, 8, 2);
    reseal(v2);
    write_file(bad, v2);
    expect(contains(open_error(bad), "has format version 2, this program reads version 1"),
           "a version-2 file (valid CRC) is rejected", open_error(bad));
    const std::string json_line = "{\"step\": 1, \"not\": \"a checkpoint\"}\n";
    write_file(bad, std::vector<uint8_t>(json_line.begin(), json_line.end()));
    expect(contains(open_error(bad), "is not a checkpoint file"),
           "another kind of file is rejected", open_error(bad));
    expect(contains(open_error(dir + "/absent.bin"), "No such file or directory"),
           "a missing file is reported with errno text", open_error(dir + "/absent.bin"));

    // Malformed tables behind a valid CRC (what a faulty writer could produce).
    std::vector<uint8_t> m = f;
    set_u64(m, n - 24, 3);  // section count 3, the file has 2
    reseal(m);
    write_file(bad, m);
    expect(contains(open_error(bad), "is malformed"), "a wrong section count is rejected",
           open_error(bad));
    m = f;
    size_t second = 32 + sizeof(TestConfig) + 72 + 40;  // header of section "b"
    set_u64(m, second + 64, 4);                         // "b" claims 4 bytes, has 3
    reseal(m);
    write_file(bad, m);
    expect(contains(open_error(bad), "is malformed"), "a wrong section size is rejected",
           open_error(bad));
    m = f;
    set_u64(m, 24, 1000);  // config larger than the file
    reseal(m);
    write_file(bad, m);
    expect(contains(open_error(bad), "is malformed"), "a config size past the end is rejected",
           open_error(bad));
    remove(bad.c_str());
    remove(good.c_str());
}

static void test_config_mismatch(const std::string& dir) {
    std::string path = write_small(dir, 2);
    TestConfig other = base_config();
    other.layers = 3;
    other.lr = 1e-3f;
    other.max_seq = 2048;
    std::string e = open_error(path, &other);
    expect(contains(e, "was written for a different model configuration") &&
               contains(e, "layers: 2 in the checkpoint, 3 here") &&
               contains(e, "max_seq: 1024 in the checkpoint, 2048 here") &&
               contains(e, "lr: 0.000600000028 in the checkpoint, 0.00100000005 here") &&
               !contains(e, "heads") && !contains(e, "other bytes"),
           "a different configuration names exactly the fields that differ", e);
    e = open_error(path, &other, false);
    expect(contains(e, "was written for a different model configuration; the stored bytes differ"),
           "without a field table the mismatch is still reported", e);
    // A table that covers only part of the struct: the rest is reported as other bytes.
    TestConfig c = base_config();
    c.heads = 8;
    c.zero_stage = 2;
    CheckpointReader r;
    int rc = ckpt_open(&r, path.c_str(), &c, sizeof(c), CONFIG_FIELDS, 1);
    expect(rc != 0 && contains(r.error, "different model configuration; the stored bytes differ"),
           "differences outside the field table are reported", r.error);
    c = base_config();
    c.layers = 5;
    c.heads = 8;
    rc = ckpt_open(&r, path.c_str(), &c, sizeof(c), CONFIG_FIELDS, 1);
    expect(
        rc != 0 && contains(r.error, "layers: 2 in the checkpoint, 5 here; and other bytes differ"),
        "named and unnamed differences together", r.error);
    int32_t small_config[3] = {2, 4, 128};
    rc = ckpt_open(&r, path.c_str(), small_config, sizeof(small_config), NULL, 0);
    expect(rc != 0 && contains(r.error,
                               "different model configuration (its config has 40 bytes, "
                               "this program's 12)"),
           "a configuration of another size is rejected", r.error);
    remove(path.c_str());

    // No configuration at all is a configuration too.
    CheckpointWriter w;
    rc = ckpt_writer_begin(&w, dir.c_str(), 5, NULL, 0);
    if (rc == 0) rc = ckpt_write_section(&w, "s", small_config, sizeof(small_config));
    if (rc == 0) rc = ckpt_writer_commit(&w, 0);
    path = dir + "/ckpt_step00000005.bin";
    int32_t back[3] = {0};
    if (rc == 0) rc = ckpt_open(&r, path.c_str(), NULL, 0, NULL, 0);
    if (rc == 0) rc = ckpt_read_section(&r, "s", back, sizeof(back));
    ckpt_close(&r);
    expect(rc == 0 && memcmp(back, small_config, sizeof(back)) == 0,
           "a checkpoint without a configuration round-trips", rc ? r.error : "");
    e = open_error(path);
    expect(contains(e, "its config has 0 bytes, this program's 40"),
           "... and is rejected where a configuration is expected", e);
    remove(path.c_str());
}

static void test_writer_misuse(const std::string& dir) {
    TestConfig config = base_config();
    uint8_t data[16] = {0};
    CheckpointWriter w;
    struct Case {
        const char* what;
        const char* message;
    };
    const Case cases[] = {
        {"a section written twice", "section 'x' written twice"},
        {"an empty section name", "must have 1 to 63 characters"},
        {"a 64-character section name", "must have 1 to 63 characters"},
        {"more bytes than declared", "given 6 bytes more than declared"},
        {"a new section before the last is complete", "section 'x' is missing 6 bytes"},
        {"commit with an incomplete section", "section 'x' is missing 16 bytes"},
    };
    std::string long_name(64, 'n');
    for (int k = 0; k < 6; k++) {
        int rc = ckpt_writer_begin(&w, dir.c_str(), 3, &config, sizeof(config));
        if (rc == 0) {
            switch (k) {
                case 0:
                    if (ckpt_write_section(&w, "x", data, 4) == 0)
                        rc = ckpt_write_section(&w, "x", data, 4);
                    break;
                case 1:
                    rc = ckpt_write_section(&w, "", data, 4);
                    break;
                case 2:
                    rc = ckpt_write_section(&w, long_name.c_str(), data, 4);
                    break;
                case 3:
                    if (ckpt_section_begin(&w, "x", 10) == 0) rc = ckpt_section_write(&w, data, 16);
                    break;
                case 4:
                    if (ckpt_section_begin(&w, "x", 10) == 0 &&
                        ckpt_section_write(&w, data, 4) == 0)
                        rc = ckpt_section_begin(&w, "y", 1);
                    break;
                case 5:
                    if (ckpt_section_begin(&w, "x", 16) == 0) rc = ckpt_writer_commit(&w, 0);
                    break;
            }
        }
        expect(rc != 0 && contains(w.error, cases[k].message), cases[k].what, w.error);
        std::string first = w.error;
        int again = ckpt_write_section(&w, "later", data, 1);
        expect(again != 0 && first == w.error,
               "calls after a failure fail and keep the first message");
        expect(count_temp_files(dir.c_str()) == 0 && w.file == NULL,
               "the failed checkpoint's temporary file is gone");
    }
    char path[CKPT_PATH_BYTES];
    ckpt_final_name(path, sizeof(path), dir.c_str(), 3);
    expect(access(path, F_OK) != 0, "no checkpoint was committed by the failed writers");
    int rc = ckpt_writer_begin(&w, dir.c_str(), 4, &config, sizeof(config));
    ckpt_writer_abort(&w);
    expect(rc == 0 && count_temp_files(dir.c_str()) == 0, "abort removes the temporary file");
}

// Files that are not regular are refused before they are read, by every reader: ckpt_open,
// ckpt_peek_config and ckpt_find_latest (which skips them). A FIFO must not block the open
// (SIGALRM ends a hang as a failure).
static void test_special_files(const std::string& dir) {
    alarm(60);
    std::string special = dir + "/special";
    mkdir(special.c_str(), 0755);
    std::string good = write_small(special, 1);
    std::string fifo = special + "/ckpt_step00000002.bin",
                folder = special + "/ckpt_step00000003.bin";
    mkfifo(fifo.c_str(), 0644);
    mkdir(folder.c_str(), 0755);
    const char* fifo_kind = "it is a FIFO (named pipe), not a regular file";
    const char* folder_kind = "it is a directory, not a regular file";
    std::string e = open_error(fifo);
    expect(contains(e, ("cannot open checkpoint " + fifo).c_str()) && contains(e, fifo_kind),
           "ckpt_open refuses a FIFO, without blocking", e);
    e = open_error(folder);
    expect(contains(e, folder_kind), "ckpt_open refuses a directory", e);
    uint64_t step = 0;
    char path[CKPT_PATH_BYTES], err[CKPT_ERROR_BYTES] = "";
    int found =
        ckpt_find_latest(special.c_str(), UINT64_MAX, path, sizeof(path), &step, err, sizeof(err));
    expect(found == 1 && step == 1 && good == path,
           "ckpt_find_latest skips a FIFO and a directory under checkpoint names (warnings above)");

    // Each call before its check: the order in which a call's arguments are evaluated is
    // unspecified, and the message is one of them.
    TestConfig peeked, want = base_config();
    int rc = ckpt_peek_config(good.c_str(), &peeked, sizeof(peeked), err, sizeof(err));
    expect(rc == 0 && memcmp(&peeked, &want, sizeof(want)) == 0,
           "ckpt_peek_config reads the stored configuration", rc == 0 ? "" : err);
    rc = ckpt_peek_config(good.c_str(), &peeked, sizeof(peeked) - 4, err, sizeof(err));
    expect(rc != 0 && contains(err, "has a 40-byte configuration, this program's has 36 bytes"),
           "ckpt_peek_config refuses a configuration of another size", err);
    rc = ckpt_peek_config(fifo.c_str(), &peeked, sizeof(peeked), err, sizeof(err));
    expect(rc != 0 && contains(err, fifo_kind), "ckpt_peek_config refuses a FIFO, without blocking",
           err);
    std::vector<uint8_t> bytes = read_file(good);
    std::string cut = dir + "/cut.bin";
    write_file(cut, std::vector<uint8_t>(bytes.begin(), bytes.begin() + 50));
    rc = ckpt_peek_config(cut.c_str(), &peeked, sizeof(peeked), err, sizeof(err));
    expect(rc != 0 && contains(err, "is not a checkpoint file, or is truncated"),
           "ckpt_peek_config refuses a file cut in its configuration", err);
    alarm(0);
}

int main(int argc, char** argv) {
    std::string dir = directory_argument(argc, argv, "SCRATCH_DIR", true);
    test_crc();
    test_round_trip(dir);
    test_corruption(dir);
    test_config_mismatch(dir);
    test_writer_misuse(dir);
    test_special_files(dir);
    return test_report("checkpoint format");
}
