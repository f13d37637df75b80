/*
fuzz/tokenizer_check.h: the check of an encoding that both tokenizer harnesses make
(fuzz/tokenizer.cc on fuzzed tokenizer files, fuzz/encode.cc on fuzzed text): at most one id
per byte, every id in the vocabulary; with the gpt2 kind the ids decode back to the text (the
loader checked that each merge spells its two parts), with the byte kind every id is its byte.
*/
#pragma once

#include <vector>

#include "../llmc/tokenizer.h"
#include "fuzz.h"

// Encodes text[0..len) with tok and checks the ids.
inline void check_encoding(const Tokenizer* tok, const uint8_t* text, size_t len) {
    std::vector<int> ids(len + 1);
    size_t n = tokenizer_encode(tok, (const char*)text, len, ids.data());
    fuzz_check(n <= len, "more tokens than bytes");
    std::vector<uint8_t> back;
    for (size_t i = 0; i < n; i++) {
        size_t piece = 0;
        const uint8_t* bytes = tokenizer_decode(tok, ids[i], &piece);
        fuzz_check(bytes != NULL, "an encoded id is outside the vocabulary");
        back.insert(back.end(), bytes, bytes + piece);
        if (tok->kind == TOKENIZER_KIND_BYTE)
            fuzz_check(ids[i] == text[i], "a byte id is not its byte");
    }
    if (tok->kind == TOKENIZER_KIND_GPT2)
        fuzz_check(back.size() == len && (len == 0 || memcmp(back.data(), text, len) == 0),
                   "a text does not decode back to itself");
}
