// ckpt_logger.cu built with AddressSanitizer and UndefinedBehaviorSanitizer: the same checks,
// plus no out-of-bounds access, leak or undefined behaviour in llmc/logger.h's escaping and
// resume rewriting.
//! cucc: --asan --ubsan
//! cpu-only
//! run: ./prog build/cpu/tests/ckpt_logger_asan_dir => pass /all logger checks passed/
#include "ckpt_logger.cu"
