// data_loader.cu built with AddressSanitizer and UndefinedBehaviorSanitizer: the same checks,
// plus no out-of-bounds access, leak or undefined behaviour in llmc/dataloader.h.
//! cucc: --asan --ubsan
//! cpu-only
//! run: python3 dev/data/make_fixture.py --what prepared --out build/cpu/tests/data_loader_asan_fixture && ./prog build/cpu/tests/data_loader_asan_fixture => pass /all dataloader checks passed/
#include "data_loader.cu"
