// nccl_test_util.h: test_util.h plus the check for NCCL calls used by the nccl_*.cu tests:
// NCCL_CHECK(call) stops the program (exit 1) with file:line, the call and NCCL's message.
#pragma once

#include <nccl.h>

#include "test_util.h"

#define NCCL_CHECK(call) check_nccl((call), #call, __FILE__, __LINE__)

static void check_nccl(ncclResult_t result, const char* call, const char* file, int line) {
    check_call(result == ncclSuccess, ncclGetErrorString(result), call, file, line);
}
