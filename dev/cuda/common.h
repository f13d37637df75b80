// dev/cuda/common.h: what every kernel harness in dev/cuda shares: the command line, seeded
// random inputs, host<->device copies, reading the PyTorch files some harnesses compare with, the
// correctness check against a float64 host reference, and the cudaEvent benchmark timer.
//
// A harness first includes train_gpt.cu with TRAIN_GPT_MODEL_ONLY defined (the model without the
// run in train_run.cuh; the production kernel is one of the variants, not a copy of it), then
// this file. floatX is bf16 by default and fp32 with -DENABLE_FP32, exactly as in the trainer.
//
// Every check is |got - ref| <= atol + rtol * |ref| per element, where ref is computed in double
// on the host from the very (rounded) inputs the GPU saw. NaN never passes. The harness prints
// the worst element's error next to its bound.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

// ---------------------------------------------------------------------------------------------
// Command line: ./harness [variant] [--bench] [--small] [--torch FILE]

struct Options {
    int variant;  // 0: every variant
    bool bench;   // also time each variant on the benchmark shape
    bool small;   // small shapes only (the CPU runtime, CI); the benchmark shape too is small
    const char* torch_file;  // a harness's PyTorch results (its *_torch.py writes them), or nullptr
};

inline Options parse_options(int argc, char** argv, int n_variants, const char* const* names) {
    Options o = {0, false, false, nullptr};
    bool usage_error = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bench") == 0) o.bench = true;
        else if (strcmp(argv[i], "--small") == 0) o.small = true;
        else if (strcmp(argv[i], "--torch") == 0 && i + 1 < argc) o.torch_file = argv[++i];
        else if (strcmp(argv[i], "--help") == 0) usage_error = true;
        else {
            char* end = nullptr;
            long v = strtol(argv[i], &end, 10);
            if (*argv[i] == '\0' || *end != '\0' || v < 1 || v > n_variants) {
                fprintf(stderr, "error: '%s' is neither a flag nor a variant number 1..%d\n",
                        argv[i], n_variants);
                exit(EXIT_FAILURE);
            }
            o.variant = (int)v;
        }
    }
    if (usage_error) {
        printf(
            "usage: %s [variant] [--bench] [--small] [--torch FILE]\n"
            "  variant       run only this variant (default: all)\n"
            "  --bench       also time each variant with cudaEvents on the benchmark shape\n"
            "  --small       small shapes only (for the CPU runtime)\n"
            "  --torch FILE  also check against PyTorch's results in FILE (harnesses with a\n"
            "                *_torch.py writer)\nvariants:\n",
            argv[0]);
        for (int v = 1; v <= n_variants; v++) printf("  %d  %s\n", v, names[v - 1]);
        exit(EXIT_SUCCESS);
    }
    return o;
}

inline bool variant_selected(const Options* o, int v) { return o->variant == 0 || o->variant == v; }

// The CPU runtime (dev/cpu) names its device "cucc CPU ..."; its timings say nothing about a GPU.
inline bool on_cpu_runtime() {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    return strncmp(prop.name, "cucc", 4) == 0;
}

inline void print_header(const char* harness) {
    cudaDeviceProp prop;
    CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    printf("%s (%s build) on %s\n", harness, PRECISION_NAME, prop.name);
}

// ---------------------------------------------------------------------------------------------
// Inputs: a seeded splitmix64 generator (the trainer's rng_next), values rounded to floatX on
// the host so the reference sees exactly what the device sees.

inline float uniform(uint64_t* rng, float lo, float hi) {
    return lo + (hi - lo) * (float)((rng_next(rng) >> 40) * (1.0 / 16777216.0));
}

inline std::vector<floatX> random_floatx(size_t n, uint64_t* rng, float lo, float hi) {
    std::vector<floatX> v(n);
    for (size_t i = 0; i < n; i++) v[i] = (floatX)uniform(rng, lo, hi);
    return v;
}

inline std::vector<float> random_float(size_t n, uint64_t* rng, float lo, float hi) {
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = uniform(rng, lo, hi);
    return v;
}

// The value a double becomes when stored as floatX (round to nearest even), as a double.
inline double round_floatx(double x) { return (double)(float)(floatX)(float)x; }

inline std::vector<double> to_double(const std::vector<floatX>& v) {
    std::vector<double> d(v.size());
    for (size_t i = 0; i < v.size(); i++) d[i] = (double)(float)v[i];
    return d;
}

// Grid-stride kernels (a thread loops over items i, i + grid size, ...) get launches of this many
// blocks next to their launcher's: far fewer threads than items, so every thread loops.
constexpr int STRIDE_GRID = 3;

// ---------------------------------------------------------------------------------------------
// Device buffers.

template <class T>
T* device_copy(const std::vector<T>& host) {
    T* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(T)));
    CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

// Copies the host array over the first host.size() elements of device array d.
template <class T>
void copy_to_device(T* d, const std::vector<T>& host) {
    CUDA_CHECK(cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
}

// n elements filled with all-ones bytes: NaN in fp32 and bf16, so an element a kernel fails to
// write cannot pass a check.
template <class T>
T* device_poisoned(size_t n) {
    T* d = nullptr;
    CUDA_CHECK(cudaMalloc(&d, n * sizeof(T)));
    CUDA_CHECK(cudaMemset(d, 0xff, n * sizeof(T)));
    return d;
}

inline void device_free(std::initializer_list<void*> pointers) {
    for (void* p : pointers) CUDA_CHECK(cudaFree(p));
}

// The device array as floats (floatX or float elements).
template <class T>
std::vector<float> host_floats(const T* d, size_t n) {
    std::vector<T> h(n);
    CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost));
    std::vector<float> f(n);
    for (size_t i = 0; i < n; i++) f[i] = (float)h[i];
    return f;
}

// ---------------------------------------------------------------------------------------------
// The files a harness's PyTorch script writes (dev/cuda/*_torch.py): an 8-byte magic, a uint32
// count of cases, then the cases; strings are a uint32 length and their bytes.

// Opens `path`, checks its magic (the file `writer` writes) and returns it with the case count.
inline FILE* torch_file_open(const char* path, const char* magic, const char* writer,
                             uint32_t* count) {
    FILE* f = FOPEN_CHECK(path, "rb");
    char have[8];
    FREAD_CHECK(have, 1, 8, f);
    if (memcmp(have, magic, 8) != 0) fatal("%s is not a %s file", path, writer);
    FREAD_CHECK(count, 4, 1, f);
    return f;
}

inline std::string torch_file_string(FILE* f, const char* path) {
    uint32_t len;
    FREAD_CHECK(&len, 4, 1, f);
    if (len > 4096) fatal("%s: a string of %u bytes", path, len);
    std::string s(len, '\0');
    FREAD_CHECK(&s[0], 1, len, f);
    return s;
}

// ---------------------------------------------------------------------------------------------
// Correctness.

// Unit roundoff of floatX storage: the largest relative error of rounding a value to nearest
// (bf16 keeps 8 significant bits, fp32 24).
constexpr double FLOATX_ROUNDOFF = FLOATX_IS_FP32 ? 0x1p-24 : 0x1p-8;

// bound = atol * scale + rtol * |ref|. scale is the sum of the absolute values of the terms that
// made the reference value (what a float computation's error grows with, however much the
// terms cancel); an empty scale vector means scale 1 for every element.
struct Tolerance {
    double atol, rtol;
};

// Checks got against ref element by element; prints the worst element and returns whether all
// passed (an empty selection passes, and says so).
inline bool check_close(const char* what, const std::vector<float>& got,
                        const std::vector<double>& ref, const std::vector<double>& scale,
                        Tolerance tol) {
    if (got.size() != ref.size() || (!scale.empty() && scale.size() != ref.size())) {
        printf("    %-10s FAIL: %zu values, reference has %zu\n", what, got.size(), ref.size());
        return false;
    }
    if (got.empty()) {
        printf("    %-10s no elements\n", what);
        return true;
    }
    size_t worst = 0, bad = 0;
    double worst_ratio = -1.0;
    auto bound = [&](size_t i) {
        return tol.atol * (scale.empty() ? 1.0 : scale[i]) + tol.rtol * fabs(ref[i]);
    };
    for (size_t i = 0; i < got.size(); i++) {
        double err = fabs((double)got[i] - ref[i]);
        double ratio = err == 0.0 ? 0.0 : err / bound(i);  // exact checks have bound 0
        if (std::isnan(ratio) || std::isnan((double)got[i])) ratio = INFINITY;
        if (ratio > 1.0) bad++;
        if (ratio > worst_ratio) {
            worst_ratio = ratio;
            worst = i;
        }
    }
    double worst_err = fabs((double)got[worst] - ref[worst]);
    printf(
        "    %-10s max err/bound %.3f at [%zu]: got %.7g ref %.7g |err| %.3g bound %.3g (atol "
        "%.1e%s rtol %.1e) %s",
        what, worst_ratio, worst, (double)got[worst], ref[worst], worst_err, bound(worst), tol.atol,
        scale.empty() ? "" : " x scale", tol.rtol, bad ? "FAIL" : "ok");
    if (bad) printf(" (%zu of %zu elements out of bounds)", bad, got.size());
    printf("\n");
    return bad == 0;
}

// Ends a harness: the verdict line that scripts grep for, and the exit status.
inline int finish(const char* harness, int failures) {
    if (failures) printf("%s: FAILED (%d checks)\n", harness, failures);
    else printf("%s: all checks passed\n", harness);
    return failures ? EXIT_FAILURE : EXIT_SUCCESS;
}

// ---------------------------------------------------------------------------------------------
// Benchmark: warmup runs, then `repeats` runs between two cudaEvents; milliseconds per run.
// launch() must only enqueue work on the default stream.

template <class Launch>
float time_ms(Launch launch, int warmup, int repeats) {
    for (int i = 0; i < warmup; i++) launch();
    CUDA_CHECK(cudaDeviceSynchronize());
    cudaEvent_t start, stop;
    CUDA_CHECK(cudaEventCreate(&start));
    CUDA_CHECK(cudaEventCreate(&stop));
    CUDA_CHECK(cudaEventRecord(start, 0));
    for (int i = 0; i < repeats; i++) launch();
    CUDA_CHECK(cudaEventRecord(stop, 0));
    CUDA_CHECK(cudaEventSynchronize(stop));
    CUDA_CHECK(cudaGetLastError());
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    CUDA_CHECK(cudaEventDestroy(start));
    CUDA_CHECK(cudaEventDestroy(stop));
    return ms / repeats;
}

// Warmup and repeat counts: plenty on a GPU, a few on the CPU runtime.
inline int bench_warmup() { return on_cpu_runtime() ? 1 : 10; }
inline int bench_repeats() { return on_cpu_runtime() ? 2 : 50; }

inline void print_bench_intro(const char* shape) {
    printf("benchmark: %s\n", shape);
    if (on_cpu_runtime()) printf("CPU runtime: timings are not GPU timings\n");
}

// One line per variant: time and either achieved bandwidth (bytes moved, memory-bound kernels) or
// achieved throughput (flops > 0, compute-bound kernels). The `bench` lines are what
// scripts/gpu_check.sh collects.
inline void print_bench(const char* harness, int variant, const char* name, float ms, double bytes,
                        double flops) {
    if (flops > 0)
        printf("bench %s variant %d: %9.4f ms %8.2f TFLOP/s  (%s)\n", harness, variant, ms,
               flops / (ms * 1e-3) / 1e12, name);
    else
        printf("bench %s variant %d: %9.4f ms %8.1f GB/s  (%s)\n", harness, variant, ms,
               bytes / (ms * 1e-3) / 1e9, name);
}

// Times every variant from first_variant on that the options select (launch(v) enqueues one run
// of variant v) and prints its line.
template <class Launch>
void bench_variants(const Options* o, const char* harness, const char* const* names, int n_variants,
                    double bytes, double flops, Launch launch, int first_variant = 1) {
    for (int v = first_variant; v <= n_variants; v++) {
        if (!variant_selected(o, v)) continue;
        float ms = time_ms([&] { launch(v); }, bench_warmup(), bench_repeats());
        print_bench(harness, v, names[v - 1], ms, bytes, flops);
    }
}
