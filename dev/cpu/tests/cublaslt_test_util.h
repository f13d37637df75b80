// cublaslt_test_util.h: test_util.h plus the check for cuBLASLt calls used by the cublaslt_*.cu
// tests: CUBLAS_CHECK(call) stops the program (exit 1) with file:line, the call and the status
// name; expect_status counts a check that a call returned a given status. Valid CUDA: a native
// build links the real cuBLASLt (-lcublasLt).
#pragma once

#include <cublasLt.h>

#include "test_util.h"

#define CUBLAS_CHECK(call) check_cublas((call), #call, __FILE__, __LINE__)

static void check_cublas(cublasStatus_t status, const char* call, const char* file, int line) {
    check_call(status == CUBLAS_STATUS_SUCCESS, cublasLtGetStatusName(status), call, file, line);
}

// One check: `got` must be `want`; prints the status returned (and the one wanted, on a failure).
static void expect_status(cublasStatus_t got, cublasStatus_t want, const char* what) {
    std::string detail = cublasLtGetStatusName(got);
    if (got != want) detail += std::string(" (want ") + cublasLtGetStatusName(want) + ")";
    expect(got == want, what, detail);
}
