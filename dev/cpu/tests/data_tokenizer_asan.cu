// data_tokenizer.cu built with AddressSanitizer and UndefinedBehaviorSanitizer: the same checks,
// plus no out-of-bounds access, leak or undefined behaviour in llmc/tokenizer.h.
//! cucc: --asan --ubsan
//! cpu-only
//! run: python3 dev/data/make_fixture.py --what tokenizer --out build/cpu/tests/data_tokenizer_asan_fixture && ./prog build/cpu/tests/data_tokenizer_asan_fixture => pass /all \d+ cases match/
#include "data_tokenizer.cu"
