// test_util.h: what the test programs in dev/cpu/tests share, so each file holds only its checks.
//   CUDA_CHECK(call)       stops the program (exit 1) with file:line, the call and CUDA's message
//                          (check_call does the same for the other libraries' check macros);
//   expect(ok, what, ...)  counts a check and prints one line for it, "ok   what" or "FAIL what";
//   expect_error(got, want, what)  the same for a call that must return the CUDA error `want`
//                          (and clears the last error it left);
//   test_report(name)      the closing line and the exit status of main;
//   directory_argument()   the directory named on the command line (a fixture or a scratch one).
// Valid CUDA: tests without `//! cpu-only` include it in their nvcc builds too.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>

// Stops the program when a library call failed, with file:line, the call and the library's message.
static void check_call(bool ok, const char* message, const char* call, const char* file, int line) {
    if (!ok) {
        fprintf(stderr, "%s:%d: %s failed: %s\n", file, line, call, message);
        exit(1);
    }
}

#define CUDA_CHECK(call) check_cuda((call), #call, __FILE__, __LINE__)

static void check_cuda(cudaError_t err, const char* call, const char* file, int line) {
    check_call(err == cudaSuccess, cudaGetErrorString(err), call, file, line);
}

static int test_checks = 0, test_failures = 0;

// Counts one check; prints it with the detail (a measured value, an error message) if there is one.
static void expect(bool ok, const char* what, const std::string& detail = "") {
    test_checks++;
    if (!ok) test_failures++;
    printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what, detail.empty() ? "" : ": ", detail.c_str());
}

// Checks that a call returned the CUDA error `want`; clears the last error it recorded.
static void expect_error(cudaError_t got, cudaError_t want, const char* what) {
    char line[256];
    snprintf(line, sizeof line, "%s: %s (got %s)", what, cudaGetErrorName(want),
             cudaGetErrorName(got));
    expect(got == want, line);
    cudaGetLastError();
}

// Prints "all NAME checks passed (N)" or "F of N NAME checks FAILED"; returns main's exit status.
static int test_report(const char* name) {
    if (test_failures) {
        printf("%d of %d %s checks FAILED\n", test_failures, test_checks, name);
        return 1;
    }
    printf("all %s checks passed (%d)\n", name, test_checks);
    return 0;
}

// The directory named by the only argument (`usage` describes it); `reset` empties it (creating
// it if needed) for use as scratch space. Exits with status 2 when the arguments are wrong or the
// directory cannot be prepared.
static std::string directory_argument(int argc, char** argv, const char* usage, bool reset) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s %s\n", argv[0], usage);
        exit(2);
    }
    std::string dir = argv[1];
    std::string command = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
    if (reset && system(command.c_str()) != 0) {
        fprintf(stderr, "cannot prepare %s\n", dir.c_str());
        exit(2);
    }
    return dir;
}
