// Tests llmc/logger.h (the JSONL training log), in a scratch directory (argument 1):
// - strings: quote, backslash, control characters and DEL escaped; valid UTF-8 kept; each
//   maximal ill-formed subsequence replaced by one U+FFFD (expected strings written out here);
// - numbers: shortest form that reads back as the same float, null for NaN and infinities;
// - keys and commas, also inside a nested object;
// - 3000 random byte strings and floats checked by Python's own json module against
//   bytes.decode("utf-8", "replace") and the float's bits (an independent decoder);
// - resuming at step 5 after a crash that cut a line short keeps the header and the complete
//   lines of steps <= 5 only (not those of steps 10 and 11, which start like step 1, nor the
//   cut line '{"step":1' left of step 12's), and the resumed log ends up
//   byte-identical to an uninterrupted run's; resuming without a file asks for a header; a new
//   run replaces an old log; no temporary file is left; a bad path gives an error;
// - a log with a rewind (lines of timeline 1 marked "rewinds":1): resuming in timeline 1 keeps
//   timeline 0 whole and its own lines up to the step, resuming in timeline 0 drops timeline 1.
// Host code only.
//! run: ./prog build/cpu/tests/ckpt_logger_dir => pass /all logger checks passed/

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <string>
#include <vector>
#include "../../../llmc/logger.h"
#include "test_util.h"

static std::string read_file(const std::string& path) {
    std::string s;
    FILE* f = fopen(path.c_str(), "rb");
    if (f == NULL) return s;
    char buf[65536];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) s.append(buf, n);
    fclose(f);
    return s;
}

// The line a Logger builds, without writing it anywhere.
static Logger scratch;
static std::string escaped(const std::string& bytes) {
    logger_begin(&scratch);
    logger_string(&scratch, "s", bytes.data(), bytes.size());
    std::string line(scratch.line, scratch.line_len);
    return line.substr(6, line.size() - 7);  // {"s":"...  without the quotes and brace
}
static std::string number(float v) {
    logger_begin(&scratch);
    logger_float(&scratch, "x", v);
    return std::string(scratch.line + 5, scratch.line_len - 5);
}

static void test_escaping() {
    const std::string R = "\xEF\xBF\xBD";  // U+FFFD
    struct Case {
        std::string in, out;
        const char* what;
    };
    const Case cases[] = {
        {"plain text", "plain text", "ASCII"},
        {"a\"b\\c/", "a\\\"b\\\\c/", "quote and backslash"},
        {"\n\t\r\b\f", "\\n\\t\\r\\b\\f", "named control characters"},
        {std::string("\x00\x01\x1f\x7f", 4), "\\u0000\\u0001\\u001f\\u007f",
         "other controls and DEL"},
        {"h\xC3\xA9llo \xE2\x82\xAC \xF0\x9D\x84\x9E", "h\xC3\xA9llo \xE2\x82\xAC \xF0\x9D\x84\x9E",
         "2-, 3- and 4-byte UTF-8 kept"},
        {"\xEF\xBF\xBF\xF4\x8F\xBF\xBF", "\xEF\xBF\xBF\xF4\x8F\xBF\xBF",
         "U+FFFF and U+10FFFF kept"},
        {"\xFF", R, "byte FF"},
        {"a\x80z", "a" + R + "z", "lone continuation byte"},
        {"\xC0\xAF", R + R, "overlong C0 AF: two replacements"},
        {"\xE0\x80\xAF", R + R + R, "overlong E0 80 AF: three"},
        {"\xED\xA0\x80", R + R + R, "surrogate ED A0 80: three"},
        {"\xF4\x90\x80\x80", R + R + R + R, "above U+10FFFF: four"},
        {"\xE2\x82q", R + "q", "3-byte sequence cut short: one"},
        {"\xF0\x9F\x98", R, "4-byte sequence cut short at the end: one"},
        {"\xF0\x9F\x98\xF0\x9F\x98\x80", R + "\xF0\x9F\x98\x80", "cut short, then a valid emoji"},
        {"\xC2", R, "lead byte at the end"},
    };
    for (const Case& c : cases) {
        std::string got = escaped(c.in);
        expect(got == c.out, c.what, got == c.out ? "" : "got '" + got + "'");
    }
    logger_begin(&scratch);
    logger_int(&scratch, "step", 12);
    logger_float(&scratch, "loss", 2.5f);
    logger_string(&scratch, "k\"ey", "v", 1);
    logger_int(&scratch, "neg", -7);
    std::string line(scratch.line, scratch.line_len);
    expect(line == "{\"step\":12,\"loss\":2.5,\"k\\\"ey\":\"v\",\"neg\":-7",
           "keys, commas, integers", line);
    logger_begin(&scratch);
    logger_int(&scratch, "a", 1);
    logger_object_begin(&scratch, "bytes");
    logger_int(&scratch, "p", 2);
    logger_int(&scratch, "q", 3);
    logger_object_end(&scratch);
    logger_int(&scratch, "b", 4);
    line.assign(scratch.line, scratch.line_len);
    expect(line == "{\"a\":1,\"bytes\":{\"p\":2,\"q\":3},\"b\":4", "a nested object", line);
    struct Num {
        float v;
        const char* text;
    };
    const Num nums[] = {{0.1f, "0.1"},
                        {6e-4f, "0.0006"},
                        {1.0f / 3.0f, "0.33333334"},
                        {-2.0f, "-2"},
                        {1e30f, "1e+30"},
                        {0.0f, "0"},
                        {16777216.0f, "16777216"},
                        {10.0f, "10"},
                        {3e8f, "300000000"},
                        {1e9f, "1e+09"},
                        {NAN, "null"},
                        {INFINITY, "null"},
                        {-INFINITY, "null"}};
    for (const Num& n : nums) {
        std::string got = number(n.v);
        expect(got == n.text, (std::string("float ") + n.text).c_str(),
               got == n.text ? "" : "got " + got);
    }
}

static uint64_t rng_state = 99;
static uint32_t rand32() {
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rng_state >> 33);
}

static const char* PY_CHECK = R"PY(
import json, struct, sys
lines = open(sys.argv[1], encoding="utf-8").read().split("\n")  # strict: the log is valid UTF-8
facts = open(sys.argv[2]).read().split("\n")
assert lines[-1] == "" and facts[-1] == ""
bad = 0
for line, fact in zip(lines[:-1], facts[:-1]):
    obj = json.loads(line)
    hexbytes, floatbits = fact.split(" ")
    want = bytes.fromhex(hexbytes).decode("utf-8", "replace")
    x = struct.unpack("<f", bytes.fromhex(floatbits))[0]
    got_x = obj["x"]
    if x != x or x in (float("inf"), float("-inf")):
        same_x = got_x is None
    else:  # the number read back and rounded to float is the float written (-0 equals 0)
        same_x = got_x is not None and struct.unpack("<f", struct.pack("<f", got_x))[0] == x
    if obj["sample"] != want or not same_x:
        bad += 1
        if bad < 5:
            print("mismatch:", line, "want", repr(want), x)
print("python checked", len(lines) - 1, "lines,", bad, "mismatches")
sys.exit(1 if bad or len(lines) - 1 != int(sys.argv[3]) else 0)
)PY";

static void test_against_python(const std::string& dir) {
    std::string log_path = dir + "/random.jsonl", facts_path = dir + "/random.facts",
                script = dir + "/check.py";
    Logger lg;
    FILE* facts = fopen(facts_path.c_str(), "w");
    FILE* py = fopen(script.c_str(), "w");
    if (logger_open(&lg, log_path.c_str(), -1, 0) != 0 || facts == NULL || py == NULL) {
        expect(false, "open the random log", lg.error);
        return;
    }
    fputs(PY_CHECK, py);
    fclose(py);
    const int N = 3000;
    for (int i = 0; i < N; i++) {
        // Bytes biased to where UTF-8 is interesting: lead bytes, continuations, controls.
        std::string s;
        int len = rand32() % 12;
        static const uint8_t pool[] = {0x00, 0x0A, 0x1F, 0x22, 0x5C, 0x41, 0x7F, 0x80, 0x8F,
                                       0x90, 0x9F, 0xA0, 0xBF, 0xC0, 0xC1, 0xC2, 0xDF, 0xE0,
                                       0xE1, 0xED, 0xEF, 0xF0, 0xF1, 0xF4, 0xF5, 0xFF};
        for (int k = 0; k < len; k++)
            s += (char)(rand32() % 3 ? pool[rand32() % sizeof(pool)] : rand32() % 256);
        static const uint32_t special[] = {0x7FC00000u, 0x7F800000u, 0xFF800000u, 0x00000001u,
                                           0x80000000u, 0x7F7FFFFFu};  // nan, infs, tiny, -0, max
        uint32_t bits = rand32() % 4 == 0 ? special[rand32() % 6] : rand32();
        float x;
        memcpy(&x, &bits, 4);
        logger_begin(&lg);
        logger_int(&lg, "step", i);
        logger_string(&lg, "sample", s.data(), s.size());
        logger_float(&lg, "x", x);
        if (logger_end(&lg) != 0) {
            expect(false, "write a random line", lg.error);
            break;
        }
        for (unsigned char c : s) fprintf(facts, "%02x", c);
        fprintf(facts, " %02x%02x%02x%02x\n", bits & 0xff, (bits >> 8) & 0xff, (bits >> 16) & 0xff,
                bits >> 24);
    }
    fclose(facts);
    logger_close(&lg);
    std::string cmd =
        "python3 " + script + " " + log_path + " " + facts_path + " " + std::to_string(N);
    fflush(stdout);
    expect(system(cmd.c_str()) == 0, "Python's json and utf-8 decoder agree on 3000 random lines");
}

// The lines of one training step, as a trainer would log them (no timing fields).
static int log_step(Logger* lg, int step) {
    logger_begin_step(lg, step);
    logger_float(lg, "train_loss", 10.0f / (step + 1));
    logger_float(lg, "lr", 1e-3f * step);
    if (logger_end(lg) != 0) return -1;
    if (step % 3 == 0) {
        logger_begin_step(lg, step);
        logger_float(lg, "val_loss", 11.0f / (step + 1));
        if (logger_end(lg) != 0) return -1;
    }
    if (step % 5 == 0) {
        logger_begin_step(lg, step);
        std::string text = "sample at \"" + std::to_string(step) + "\"\n\xff";
        logger_string(lg, "sample", text.data(), text.size());
        if (logger_end(lg) != 0) return -1;
    }
    return 0;
}

static int log_header(Logger* lg) {
    logger_begin(lg);
    logger_string(lg, "model", "gpt2", 4);
    logger_int(lg, "layers", 12);
    logger_float(lg, "unigram_val_loss", 7.25f);
    return logger_end(lg);
}

static int count_temp_files(const std::string& dir) {
    int n = 0;
    DIR* d = opendir(dir.c_str());
    for (struct dirent* e; d != NULL && (e = readdir(d)) != NULL;)
        if (strstr(e->d_name, ".tmp") != NULL) n++;
    if (d != NULL) closedir(d);
    return n;
}

static void test_resume(const std::string& dir) {
    const int LAST = 14, RESUME = 5, CRASH = 12;
    std::string full = dir + "/full.jsonl", resumed = dir + "/resumed.jsonl";
    Logger lg;
    int rc = logger_open(&lg, full.c_str(), -1, 0);
    expect(rc == 0 && lg.needs_header, "a new log asks for a header", lg.error);
    rc = log_header(&lg);
    for (int s = 0; s <= LAST && rc == 0; s++) rc = log_step(&lg, s);
    expect(rc == 0 && logger_close(&lg) == 0, "write the uninterrupted log", lg.error);

    // The interrupted run: steps 0..CRASH-1 plus the start of step 12's line, cut short by the
    // crash inside the number, so that on its own it looks like step 1.
    rc = logger_open(&lg, resumed.c_str(), -1, 0);
    if (rc == 0) rc = log_header(&lg);
    for (int s = 0; s < CRASH && rc == 0; s++) rc = log_step(&lg, s);
    if (rc == 0 && (fputs("{\"step\":1", lg.file) < 0 || fflush(lg.file) != 0)) rc = -1;
    logger_close(&lg);
    expect(rc == 0, "write the interrupted log", lg.error);

    // Resume from the checkpoint of step RESUME.
    rc = logger_open(&lg, resumed.c_str(), RESUME, 0);
    expect(rc == 0 && !lg.needs_header, "resuming keeps the header", lg.error);
    std::string kept = read_file(resumed), want;
    {
        Logger ref;  // header and steps 0..RESUME, built independently into a string
        logger_open(&ref, (dir + "/ref.jsonl").c_str(), -1, 0);
        log_header(&ref);
        for (int s = 0; s <= RESUME; s++) log_step(&ref, s);
        logger_close(&ref);
        want = read_file(dir + "/ref.jsonl");
    }
    expect(kept == want, "after resume at step 5 the log holds the header and steps 0..5 only",
           kept == want ? "" : "got:\n" + kept);
    for (int s = RESUME + 1; s <= LAST && rc == 0; s++) rc = log_step(&lg, s);
    logger_close(&lg);
    std::string a = read_file(full), b = read_file(resumed);
    expect(rc == 0 && !a.empty() && a == b, "the resumed log equals the uninterrupted one",
           std::to_string(a.size()) + " and " + std::to_string(b.size()) + " bytes");

    // Resuming at a step beyond the log's end keeps everything.
    rc = logger_open(&lg, resumed.c_str(), 1000, 0);
    logger_close(&lg);
    expect(rc == 0 && read_file(resumed) == a, "resuming after the last step keeps every line");
    rc = logger_open(&lg, (dir + "/absent.jsonl").c_str(), 3, 0);
    logger_close(&lg);
    expect(rc == 0 && lg.needs_header, "resuming without a log file asks for a header");
    rc = logger_open(&lg, resumed.c_str(), -1, 0);
    logger_close(&lg);
    expect(rc == 0 && lg.needs_header && read_file(resumed).empty(),
           "a new run replaces an old log");
    expect(count_temp_files(dir) == 0, "no temporary files are left");
    rc = logger_open(&lg, (dir + "/no/such/dir/log.jsonl").c_str(), -1, 0);
    expect(rc != 0 && strstr(lg.error, "no/such/dir/log.jsonl") && strstr(lg.error, "No such file"),
           "a log in a missing directory fails with the path", lg.error);
    rc = logger_open(&lg, (dir + "/no/such/dir/log.jsonl").c_str(), 4, 0);
    expect(rc != 0 && strstr(lg.error, "No such file"), "... also when resuming", lg.error);
}

static void test_timelines(const std::string& dir) {
    const std::string path = dir + "/rewound.jsonl";
    Logger lg;
    // a run that rewound once: timeline 0 trains steps 0..8, then the rewind's line at step 4 of
    // timeline 1, which trains steps 5..8 again
    int rc = logger_open(&lg, path.c_str(), -1, 0);
    rc = rc || log_header(&lg);
    for (int s = 0; s <= 8 && rc == 0; s++) rc = log_step(&lg, s);
    lg.rewinds = 1;
    if (rc == 0) {
        logger_begin_step(&lg, 4);
        logger_int(&lg, "rewind_from", 8);
        rc = logger_end(&lg);
    }
    for (int s = 5; s <= 8 && rc == 0; s++) rc = log_step(&lg, s);
    logger_close(&lg);
    const std::string whole = read_file(path);
    expect(rc == 0 &&
               whole.find("{\"step\":4,\"rewinds\":1,\"rewind_from\":8}\n") != std::string::npos,
           "after a rewind the lines carry \"rewinds\" as their second key", whole);
    struct Case {
        int64_t step, rewinds;
        const char* what;
    } cases[] = {{6, 1, "resuming in timeline 1 at step 6 keeps timeline 0 whole"},
                 {6, 0, "resuming in timeline 0 at step 6 drops the rewind and timeline 1"},
                 {100, 1, "resuming past the last step keeps every line"}};
    for (const Case& c : cases) {
        Logger ref;
        const std::string ref_path = dir + "/rewound_ref.jsonl";
        rc = logger_open(&ref, ref_path.c_str(), -1, 0);
        // the reference: the run's lines written anew, each kept when its (rewinds, step) is
        // at most the resume point's
        rc = rc || log_header(&ref);
        for (int t = 0; t <= 1 && rc == 0; t++) {
            ref.rewinds = t;
            if (t == 1 && c.rewinds >= 1) {
                logger_begin_step(&ref, 4);
                logger_int(&ref, "rewind_from", 8);
                rc = logger_end(&ref);
            }
            for (int s = t == 0 ? 0 : 5; s <= 8 && rc == 0; s++)
                if (t < c.rewinds || (t == c.rewinds && s <= c.step)) rc = log_step(&ref, s);
        }
        logger_close(&ref);
        FILE* f = fopen(path.c_str(), "wb");
        if (f) fputs(whole.c_str(), f), fclose(f);
        rc = rc || logger_open(&lg, path.c_str(), c.step, c.rewinds);
        logger_close(&lg);
        const std::string kept = read_file(path), want = read_file(ref_path);
        expect(rc == 0 && kept == want && lg.rewinds == c.rewinds, c.what, "got:\n" + kept);
    }
}

int main(int argc, char** argv) {
    std::string dir = directory_argument(argc, argv, "SCRATCH_DIR", true);
    test_escaping();
    test_against_python(dir);
    test_resume(dir);
    test_timelines(dir);
    logger_close(&scratch);
    return test_report("logger");
}
