// Tests llmc/tokenizer.h against the Python tokenizer (dev/data/tokenizer.py, itself checked
// against tiktoken by dev/data/test_tokenizer.py): every case that dev/data/make_fixture.py
// writes (tricky strings, random strings, invalid UTF-8, all of Jane Austen) must encode to
// the same ids and decode back to the same bytes. Then damaged tokenizer files (wrong magic,
// wrong version, truncated anywhere, trailing bytes, a merge that does not spell its result,
// counts the file cannot hold) and files that are not regular (a FIFO, without blocking; a
// directory) must be rejected with a message saying what is wrong.
// Host code only: the CPU runtime and nvcc build it alike.
//! run: python3 dev/data/make_fixture.py --what tokenizer --out build/cpu/tests/data_tokenizer_fixture && ./prog build/cpu/tests/data_tokenizer_fixture => pass /all \d+ cases match/

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <string>
#include <vector>
#include "../../../llmc/tokenizer.h"
#include "test_util.h"

static std::string read_file(const std::string& path) {
    FILE* f = fopen(path.c_str(), "rb");
    if (f == NULL) {
        fprintf(stderr, "cannot open %s (run dev/data/make_fixture.py first)\n", path.c_str());
        exit(1);
    }
    std::string data;
    char buf[1 << 16];
    size_t n;
    while ((n = fread(buf, 1, sizeof(buf), f)) > 0) data.append(buf, n);
    if (ferror(f)) {
        fprintf(stderr, "error reading %s\n", path.c_str());
        exit(1);
    }
    fclose(f);
    return data;
}

static void write_file(const std::string& path, const std::string& data) {
    FILE* f = fopen(path.c_str(), "wb");
    if (f == NULL || fwrite(data.data(), 1, data.size(), f) != data.size() || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path.c_str());
        exit(1);
    }
}

// Reads little-endian uint32 at *pos of the cases file, checking the bounds.
static uint32_t take_u32(const std::string& d, size_t* pos) {
    if (*pos + 4 > d.size()) {
        fprintf(stderr, "cases file is truncated\n");
        exit(1);
    }
    uint32_t v;
    memcpy(&v, d.data() + *pos, 4);
    *pos += 4;
    return v;
}

// Runs every case of a cases file; returns the number of cases.
static int check_cases(const Tokenizer* tok, const std::string& path) {
    std::string d = read_file(path);
    size_t pos = 0;
    uint32_t count = take_u32(d, &pos);
    int mismatches = 0;
    size_t tokens = 0, bytes = 0;
    double seconds = 0;
    for (uint32_t c = 0; c < count; c++) {
        uint32_t name_len = take_u32(d, &pos);
        std::string name = d.substr(pos, name_len);
        pos += name_len;
        uint32_t text_len = take_u32(d, &pos);
        std::string text = d.substr(pos, text_len);
        pos += text_len;
        uint32_t ntok = take_u32(d, &pos);
        if (pos + 4ull * ntok > d.size()) {
            fprintf(stderr, "%s is truncated\n", path.c_str());
            exit(1);
        }
        std::vector<int> expected(ntok + 1);  // copied: the ids are not 4-byte aligned in the file
        memcpy(expected.data(), d.data() + pos, 4ull * ntok);
        pos += 4ull * ntok;

        int* got = (int*)malloc((text_len + 1) * sizeof(int));
        clock_t t0 = clock();
        size_t n = tokenizer_encode(tok, text.data(), text.size(), got);
        seconds += (double)(clock() - t0) / CLOCKS_PER_SEC;
        tokens += n;
        bytes += text.size();
        bool same = n == ntok && memcmp(got, expected.data(), n * sizeof(int)) == 0;
        std::string decoded;
        for (uint32_t k = 0; k < ntok; k++) {
            size_t len = 0;
            const uint8_t* b = tokenizer_decode(tok, expected[k], &len);
            if (b != NULL) decoded.append((const char*)b, len);
        }
        bool round_trip = decoded == text;
        if ((!same || !round_trip) && mismatches++ < 5) {
            size_t k = 0;
            while (k < n && k < ntok && got[k] == expected[k]) k++;
            printf(
                "  case '%s': %s; %zu tokens, expected %u, first difference at token %zu (got %d, "
                "expected %d)\n",
                name.c_str(), same ? "decode differs" : "encode differs", n, ntok, k,
                k < n ? got[k] : -1, k < ntok ? expected[k] : -1);
        }
        free(got);
    }
    char detail[256];
    snprintf(detail, sizeof(detail), "%d of %u cases differ (%zu bytes -> %zu tokens, %.2f MB/s)",
             mismatches, count, bytes, tokens, bytes / 1e6 / (seconds > 0 ? seconds : 1e-9));
    expect(mismatches == 0 && pos == d.size(), path.c_str(), detail);
    return (int)count;
}

// Loading `data` (written to `path`) must fail with a message containing `needle`.
static void expect_rejected(const std::string& path, const std::string& data, const char* what,
                            const char* needle) {
    write_file(path, data);
    Tokenizer tok;
    int rc = tokenizer_load(&tok, path.c_str());
    char detail[700];
    snprintf(detail, sizeof(detail), "rc %d, message \"%s\"", rc, rc == 0 ? "" : tok.error);
    expect(rc != 0 && strstr(tok.error, needle) != NULL, what, detail);
    if (rc == 0) tokenizer_free(&tok);
}

static void set_i32(std::string* d, size_t offset, int32_t v) { memcpy(&(*d)[offset], &v, 4); }

int main(int argc, char** argv) {
    std::string dir =
        directory_argument(argc, argv, "FIXTURE_DIR (written by dev/data/make_fixture.py)", false);
    int cases = 0;
    for (const char* name : {"gpt2", "byte"}) {
        Tokenizer tok;
        std::string path = dir + "/" + name + ".tok";
        if (tokenizer_load(&tok, path.c_str()) != 0) {
            fprintf(stderr, "%s\n", tok.error);
            return 1;
        }
        printf("%s: kind %d, vocab %d, eot %d, %d merges, %d code point ranges\n", path.c_str(),
               tok.kind, tok.vocab_size, tok.eot, tok.num_merges, tok.num_ranges);
        cases += check_cases(&tok, dir + "/" + name + "_cases.bin");
        size_t len = 0;
        const uint8_t* eot = tokenizer_decode(&tok, tok.eot, &len);
        expect(std::string((const char*)eot, len) == "<|endoftext|>",
               "eot decodes to <|endoftext|>");
        expect(tokenizer_decode(&tok, tok.vocab_size, &len) == NULL &&
                   tokenizer_decode(&tok, -1, &len) == NULL,
               "ids outside the vocab decode to NULL");
        tokenizer_free(&tok);
    }

    // Damaged files, made from the good gpt2 file. Its layout: 16 int32 header, then the
    // tokens, then 12-byte merges, then 12-byte code point ranges.
    std::string good = read_file(dir + "/gpt2.tok");
    std::string bad_path = dir + "/damaged.tok";
    int32_t num_merges, num_ranges;
    memcpy(&num_merges, &good[20], 4);
    memcpy(&num_ranges, &good[24], 4);
    size_t ranges_at = good.size() - 12 * (size_t)num_ranges,
           merges_at = ranges_at - 12 * (size_t)num_merges;
    std::string d = good;
    set_i32(&d, 0, 20240520);
    expect_rejected(bad_path, d, "rejects a shard passed as tokenizer (wrong magic)",
                    "not a tokenizer file");
    d = good;
    set_i32(&d, 4, 2);
    expect_rejected(bad_path, d, "rejects version 2", "version 2");
    d = good;
    set_i32(&d, 16, 60000);
    expect_rejected(bad_path, d, "rejects eot >= vocab", "invalid header");
    expect_rejected(bad_path, good.substr(0, 40), "rejects a file cut in the header", "truncated");
    expect_rejected(bad_path, good.substr(0, 5000), "rejects a file cut in the tokens",
                    "truncated");
    expect_rejected(bad_path, good.substr(0, merges_at + 100), "rejects a file cut in the merges",
                    "truncated");
    expect_rejected(bad_path, good.substr(0, good.size() - 1), "rejects a file cut in the ranges",
                    "truncated");
    expect_rejected(bad_path, good + "x", "rejects trailing bytes", "unexpected bytes");
    d = good;
    set_i32(&d, merges_at + 12 * 1000 + 8, 50);  // merge 1000's result becomes token 50
    expect_rejected(bad_path, d, "rejects a merge that does not spell its result",
                    "does not spell");
    d = good;
    set_i32(&d, ranges_at + 12 * 5 + 8, 7);
    expect_rejected(bad_path, d, "rejects an invalid code point class", "code point range");
    expect_rejected(bad_path, "", "rejects an empty file", "truncated");
    Tokenizer tok;
    // Counts the file cannot hold are refused before anything is allocated for them (the
    // message comes from the header check, which runs before the first allocation).
    d = good;
    set_i32(&d, 20, INT32_MAX);
    expect_rejected(bad_path, d, "rejects a merge count the file cannot hold, before allocating",
                    "is truncated: its header says 50257 tokens, 2147483647 merges");
    d = good;
    set_i32(&d, 24, INT32_MAX);
    expect_rejected(bad_path, d, "rejects a range count the file cannot hold, before allocating",
                    "is truncated: its header says 50257 tokens, 50000 merges and 2147483647");
    expect_rejected(bad_path, good.substr(0, 64), "rejects a header with no tables after it",
                    "is truncated: its header says 50257 tokens");
    // Not regular files: refused before they are read; a FIFO must not block the open.
    alarm(60);
    std::string fifo = dir + "/fifo.tok", folder = dir + "/folder.tok";
    mkfifo(fifo.c_str(), 0644);  // EEXIST on a rerun: the FIFO is there
    mkdir(folder.c_str(), 0755);
    for (const std::string& path : {fifo, folder}) {
        int rc = tokenizer_load(&tok, path.c_str());
        const char* kind = path == fifo ? "it is a FIFO (named pipe), not a regular file"
                                        : "it is a directory, not a regular file";
        expect(rc != 0 && strstr(tok.error, ("cannot open tokenizer file " + path).c_str()) &&
                   strstr(tok.error, kind) != NULL,
               path == fifo ? "rejects a FIFO, without blocking" : "rejects a directory",
               tok.error);
    }
    alarm(0);
    int rc = tokenizer_load(&tok, (dir + "/no_such_file.tok").c_str());
    expect(rc != 0 && strstr(tok.error, "cannot open") != NULL, "rejects a missing file",
           tok.error);

    if (test_report("tokenizer") != 0) return 1;
    printf("all %d cases match\n", cases);
    return 0;
}
