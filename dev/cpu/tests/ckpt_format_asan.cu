// ckpt_format.cu built with AddressSanitizer and UndefinedBehaviorSanitizer: the same checks,
// plus no out-of-bounds access, leak or undefined behaviour in llmc/checkpoint.h while it
// parses damaged, truncated and malformed files.
//! cucc: --asan --ubsan
//! cpu-only
//! run: ./prog build/cpu/tests/ckpt_format_asan_dir => pass /all checkpoint format checks passed/
#include "ckpt_format.cu"
