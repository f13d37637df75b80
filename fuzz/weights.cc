/*
fuzz/weights.cc: libFuzzer harness of the pretrained weights' parsers (llmc/weights_io.h).

The input is read three ways:
- as a safetensors file (safetensors_open): a rejection must come with a message; when it is
  accepted, every tensor lies inside the file's data (its offsets checked against the size),
  each tensor of F32, BF16 or F16 reads whole, and one of any other dtype is refused with a
  message;
- as an llm.c model file (llmc_open): a rejection must come with a message; when accepted, its
  tensors end exactly at the end of the file, and the first and last elements read;
- as JSON text (json_parse): a rejection must come with a message.
Seeds: with FUZZ_WRITE_SEEDS=DIR set, this program writes its seed corpus into DIR with the
writer of llmc/weights_io.h (safetensors files of F32 tensors) and llm.c files of a tiny model,
and exits (fuzz/run.py does this before fuzzing).
*/
#include <string>
#include <vector>

#include "../llmc/weights_io.h"
#include "fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string path = fuzz_write("weights.bin", data, size);
    SafetensorsFile st;
    if (safetensors_open(&st, path.c_str()) != 0) {
        fuzz_check(st.error[0] != '\0', "safetensors_open failed without a message");
    } else {
        std::vector<float> values;
        for (const SafeTensor& t : st.tensors) {
            fuzz_check(t.begin <= t.end && st.data_start + t.end <= size,
                       "an accepted tensor lies outside the file");
            const int elem = safetensors_dtype_bytes(t.dtype);
            const uint64_t n = (t.end - t.begin) / elem;
            values.resize(n);
            const bool readable = t.dtype == "F32" || t.dtype == "BF16" || t.dtype == "F16";
            st.error[0] = '\0';
            const int rc = safetensors_read(&st, &t, 0, n, values.data());
            fuzz_check(readable ? rc == 0 : rc != 0 && st.error[0] != '\0',
                       "a tensor of a float dtype does not read, or another dtype reads");
        }
        safetensors_close(&st);
    }
    LlmcFile lf;
    if (llmc_open(&lf, path.c_str()) != 0) {
        fuzz_check(lf.error[0] != '\0', "llmc_open failed without a message");
    } else {
        const uint64_t count = llmc_tensors(&lf);
        fuzz_check(LLMC_HEADER_INTS * 4 + count * lf.elem_bytes == size,
                   "an accepted llm.c file is not exactly its tensors");
        float first, last;
        fuzz_check(count == 0 || (llmc_read(&lf, 0, 1, &first) == 0 &&
                                  llmc_read(&lf, count - 1, 1, &last) == 0),
                   "an accepted llm.c file does not read");
        llmc_close(&lf);
    }
    JsonValue v;
    char err[256] = "";
    if (json_parse((const char*)data, size, &v, err, sizeof(err)) != 0)
        fuzz_check(err[0] != '\0', "json_parse failed without a message");
    return 0;
}

// A tiny llm.c model file: maxT 4, V 5 (Vp 8), L 1, NH 1, C 2, its elements 0, 1, 2, ...
static void write_llmc_seed(const char* dir, int version) {
    LlmcFile f = {};
    f.maxT = 4, f.V = 5, f.L = 1, f.NH = 1, f.C = 2, f.Vp = 8;
    f.elem_bytes = version == LLMC_VERSION_FP32 ? 4 : 2;
    const uint64_t count = llmc_tensors(&f);
    std::vector<uint8_t> file(LLMC_HEADER_INTS * 4 + count * f.elem_bytes);
    const int32_t header[8] = {LLMC_MAGIC, version, f.maxT, f.V, f.L, f.NH, f.C, f.Vp};
    memcpy(file.data(), header, sizeof(header));
    for (uint64_t i = 0; i < count; i++) {
        const float v = (float)i;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        const uint16_t high = (uint16_t)(bits >> 16);  // exact: small integers
        memcpy(file.data() + LLMC_HEADER_INTS * 4 + i * f.elem_bytes,
               f.elem_bytes == 4 ? (const void*)&v : (const void*)&high, f.elem_bytes);
    }
    char err[1024];
    const std::string path = std::string(dir) + "/llmc_v" + std::to_string(version) + ".bin";
    if (write_file_atomic(path.c_str(), file.data(), file.size(), err, sizeof(err)) != 0) {
        fprintf(stderr, "fuzz/weights: cannot write a seed: %s\n", err);
        exit(1);
    }
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* dir = getenv("FUZZ_WRITE_SEEDS");
    if (dir == NULL || dir[0] == '\0') return 0;
    const float a[6] = {1.0f, -2.0f, 0.5f, 3.0f, 0.0f, -0.25f}, b[3] = {7.0f, 8.0f, 9.0f};
    const std::vector<SafetensorsOut> two = {{"transformer.wte.weight", {2, 3}, a},
                                             {"h.0.ln_1.bias", {3}, b}};
    const std::vector<SafetensorsOut> scalar = {{"x", {}, b}, {"empty", {0, 4}, b}};
    char err[1024];
    if (safetensors_write((std::string(dir) + "/two.safetensors").c_str(), two, {{"format", "pt"}},
                          err, sizeof(err)) != 0 ||
        safetensors_write((std::string(dir) + "/scalar.safetensors").c_str(), scalar, {}, err,
                          sizeof(err)) != 0) {
        fprintf(stderr, "fuzz/weights: cannot write a seed: %s\n", err);
        exit(1);
    }
    write_llmc_seed(dir, LLMC_VERSION_FP32);
    write_llmc_seed(dir, LLMC_VERSION_BF16);
    printf("fuzz/weights: wrote 4 seeds into %s\n", dir);
    exit(0);
}
