/*
fuzz/encode.cc: libFuzzer harness of the text encoder of llmc/tokenizer.h (what turns a
--prompt into tokens: UTF-8 decoding, GPT-2's pre-tokenizer, the byte-pair merges).

The input is the text. The tokenizer is loaded once, from the file that $FUZZ_TOKENIZER names
(fuzz/run.py gives it GPT-2's, written by dev/data/tokenizer.py, or a smaller gpt2-kind file
when GPT-2's data files are not installed). Every text is checked as tokenizer_check.h says.
Seeds: tokenizer_cases.py's texts (fuzz/run.py).
*/
#include "tokenizer_check.h"

static Tokenizer tok;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* path = getenv("FUZZ_TOKENIZER");
    if (path == NULL || path[0] == '\0') {
        fprintf(stderr, "fuzz/encode: set FUZZ_TOKENIZER to a tokenizer file (fuzz/run.py does)\n");
        exit(2);
    }
    if (tokenizer_load(&tok, path) != 0) {
        fprintf(stderr, "fuzz/encode: %s\n", tok.error);
        exit(2);
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check_encoding(&tok, data, size);
    return 0;
}
