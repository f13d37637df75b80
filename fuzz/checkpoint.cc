/*
fuzz/checkpoint.cc: libFuzzer harness of the checkpoint reader (llmc/checkpoint.h).

The input is a checkpoint file. It is read twice: as it is, and with its trailer's file size
and CRC set to match it, so that mutations get past the checksum to the section table and the
configuration (a random change would almost never keep the CRC right). Each time:
- ckpt_open checks its integrity alone (no configuration: what --resume latest asks of each
  candidate) and ckpt_peek_config (sample mode's first look) reads its configuration;
- ckpt_open verifies it against the peeked configuration and against a fixed one; a mismatch
  names the differing fields of FIELDS (one of each type; `spare` is in no field, so a
  difference there is reported as other bytes); an open never succeeds on a file whose
  integrity check failed;
- when it is intact, every section is looked up and read whole and in two parts that must
  agree, and a read of the wrong size or past the end is refused;
- ckpt_find_latest over the folder finds it when it is intact, and skips it (freeing what it
  read) when it is a manifest whose "save" section names shard files (the folder has none), or
  one of the older format, with a "shards" section and no "save".
Every refusal must come with a message.

Seeds: with FUZZ_WRITE_SEEDS=DIR set, this program writes its seed corpus into DIR with the
writer of llmc/checkpoint.h and exits (fuzz/run.py does this before fuzzing).
*/
#include <stddef.h>

#include <vector>

#include "../llmc/checkpoint.h"
#include "fuzz.h"

// The configuration block of the fuzzed checkpoints: fixed-size fields, no padding.
struct FuzzConfig {
    int32_t layers, heads;
    int64_t tokens;
    float lr;
    int32_t spare;
    double decay;
};
static_assert(sizeof(FuzzConfig) == 32, "FuzzConfig must have no padding");
static const CkptField FIELDS[] = {
    {"layers", offsetof(FuzzConfig, layers), CKPT_INT32},
    {"heads", offsetof(FuzzConfig, heads), CKPT_INT32},
    {"tokens", offsetof(FuzzConfig, tokens), CKPT_INT64},
    {"lr", offsetof(FuzzConfig, lr), CKPT_FLOAT32},
    {"decay", offsetof(FuzzConfig, decay), CKPT_FLOAT64},
};
static const int NUM_FIELDS = sizeof(FIELDS) / sizeof(FIELDS[0]);
static const FuzzConfig DEFAULT_CONFIG = {2, 4, 1 << 20, 3e-4f, 0, 0.1};

// Reads every section of an open checkpoint, whole and in two parts.
static void read_sections(CheckpointReader* r) {
    for (uint64_t i = 0; i < r->section_count; i++) {
        const CkptSectionInfo* s = ckpt_lookup(r, r->sections[i].name);
        fuzz_check(s != NULL && strcmp(s->name, r->sections[i].name) == 0,
                   "a listed section is not found");
        const size_t n = (size_t)s->size;
        const uint64_t offset = s->offset;
        fuzz_check(offset + n <= r->file_size, "a section lies past the end of the file");
        std::vector<uint8_t> whole(n + 1), parts(n + 1);
        fuzz_check(ckpt_read_section(r, s->name, whole.data(), n) == 0, "a section does not read");
        fuzz_check(
            ckpt_read_section_part(r, s->name, 0, parts.data(), n / 2) == 0 &&
                ckpt_read_section_part(r, s->name, n / 2, parts.data() + n / 2, n - n / 2) == 0,
            "a section does not read in parts");
        fuzz_check(memcmp(whole.data(), parts.data(), n) == 0, "a section read in parts differs");
        fuzz_check(ckpt_read_section(r, s->name, whole.data(), n + 1) != 0 &&
                       ckpt_read_section_part(r, s->name, n / 2 + 1, parts.data(), n - n / 2) != 0,
                   "a read of the wrong size or past a section's end is accepted");
    }
    fuzz_check(ckpt_lookup(r, "no such section") == NULL && r->error[0] != '\0',
               "a missing section is found");
}

static void exercise(const std::string& path) {
    CheckpointReader r;
    const bool intact = ckpt_open(&r, path.c_str(), NULL, 0, NULL, 0) == 0;
    fuzz_check(intact || (r.error[0] != '\0' && r.file == NULL),
               "ckpt_open failed without a message");
    // a manifest's shards: a "save" section names files that must exist, be intact and be of its
    // save (here there are none, so a manifest is always incomplete)
    bool shards_intact = false;
    if (intact) {
        read_sections(&r);
        shards_intact = ckpt_shards_intact(&r) == 0;
        fuzz_check(shards_intact || r.error[0] != '\0',
                   "ckpt_shards_intact failed without a message");
        ckpt_close(&r);
    }
    FuzzConfig peeked;
    char err[CKPT_ERROR_BYTES] = "";
    const bool has_config =
        ckpt_peek_config(path.c_str(), &peeked, sizeof(peeked), err, sizeof(err)) == 0;
    fuzz_check(has_config || err[0] != '\0', "ckpt_peek_config failed without a message");
    const FuzzConfig* configs[2] = {has_config ? &peeked : NULL, &DEFAULT_CONFIG};
    for (const FuzzConfig* config : configs) {
        if (config == NULL) continue;
        if (ckpt_open(&r, path.c_str(), config, sizeof(*config), FIELDS, NUM_FIELDS) != 0) {
            fuzz_check(r.error[0] != '\0' && r.file == NULL, "ckpt_open failed without a message");
            continue;
        }
        fuzz_check(intact, "ckpt_open accepts with a configuration what fails its integrity check");
        ckpt_close(&r);
    }
    if (intact) {  // a damaged newest checkpoint would be skipped with a warning on stderr
        char found[CKPT_PATH_BYTES];
        uint64_t step = 0;
        const int latest =
            ckpt_find_latest(fuzz_dir(), UINT64_MAX, found, sizeof(found), &step, err, sizeof(err));
        if (shards_intact)
            fuzz_check(latest == 1 && step == 1 && path == found,
                       "ckpt_find_latest does not find an intact checkpoint");
        else
            fuzz_check(latest == 0, "ckpt_find_latest takes a checkpoint whose shards are missing");
    }
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const char* name = "ckpt_step00000001.bin";
    exercise(fuzz_write(name, data, size));
    if (size >= CKPT_HEADER_BYTES + CKPT_TRAILER_BYTES) {
        std::vector<uint8_t> fixed(data, data + size);
        ckpt_put_u64(fixed.data() + size - 16, size);
        ckpt_put_u64(fixed.data() + size - 8, ckpt_crc32(0, fixed.data(), size - 8));
        exercise(fuzz_write(name, fixed.data(), size));
    }
    return 0;
}

// ---------------------------------------------------------------------------------------------
// Seed corpus: checkpoints of several shapes, written by llmc/checkpoint.h's writer.

static void write_seed(const char* dir, uint64_t step, const void* config, size_t config_size,
                       int sections, size_t section_bytes) {
    CheckpointWriter w;
    std::vector<uint8_t> bytes(section_bytes);
    for (size_t i = 0; i < section_bytes; i++) bytes[i] = (uint8_t)(i * 37 + step);
    const char* names[] = {"params", "adam_m", "adam_v", "run", "data"};
    int rc = ckpt_writer_begin(&w, dir, step, config, config_size);
    for (int k = 0; k < sections && rc == 0; k++)
        rc = ckpt_write_section(&w, names[k % 5], bytes.data(), k == 1 ? 0 : section_bytes);
    if (rc == 0) rc = ckpt_writer_commit(&w, 0);
    if (rc != 0) {
        fprintf(stderr, "fuzz/checkpoint: cannot write a seed: %s\n", w.error);
        exit(1);
    }
}

// A sharded checkpoint's manifest: its "save" section names `shards` shard files, which the
// fuzzer's folder never holds, so ckpt_find_latest must skip it (and free what it read).
static void write_manifest_seed(const char* dir, uint64_t step, uint64_t shards) {
    CheckpointWriter w;
    const CkptSave save = {{0x0123456789abcdefull, step}, shards, CKPT_MANIFEST};
    int rc = ckpt_writer_begin_part(&w, dir, step, &save, &DEFAULT_CONFIG, sizeof(DEFAULT_CONFIG));
    if (rc == 0) rc = ckpt_write_section(&w, "run", &step, sizeof(step));
    if (rc == 0) rc = ckpt_writer_commit(&w, 0);
    if (rc != 0) {
        fprintf(stderr, "fuzz/checkpoint: cannot write a seed: %s\n", w.error);
        exit(1);
    }
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* dir = getenv("FUZZ_WRITE_SEEDS");
    if (dir == NULL || dir[0] == '\0') return 0;
    const FuzzConfig other = {3, 1, 77, 1e-2f, 5, 0.0};
    const uint8_t small[12] = {1, 2, 3};
    write_seed(dir, 1, &DEFAULT_CONFIG, sizeof(DEFAULT_CONFIG), 5, 40);
    write_seed(dir, 2, &other, sizeof(other), 3, 100);
    write_seed(dir, 3, &DEFAULT_CONFIG, sizeof(DEFAULT_CONFIG), 0, 0);
    write_seed(dir, 4, small, sizeof(small), 2, 8);
    write_seed(dir, 5, NULL, 0, 1, 300);
    write_manifest_seed(dir, 6, 2);
    printf("fuzz/checkpoint: wrote 6 seed checkpoints into %s\n", dir);
    exit(0);
}
