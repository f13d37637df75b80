// ckpt_commit.cu built with AddressSanitizer and UndefinedBehaviorSanitizer: the same checks,
// plus no out-of-bounds access, leak or undefined behaviour in llmc/checkpoint.h's directory
// handling and failure paths.
//! cucc: --asan --ubsan
//! cpu-only
//! run: ./prog build/cpu/tests/ckpt_commit_asan_dir => pass /all checkpoint commit checks passed/
#include "ckpt_commit.cu"
