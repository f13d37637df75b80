/*
fuzz/tokenizer.cc: libFuzzer harness of the tokenizer file parser (llmc/tokenizer.h).

The input is a tokenizer file, loaded with tokenizer_load. A rejection must come with a
message. When it is accepted:
- every id decodes to bytes inside the token table, and ids outside the vocabulary to NULL;
- a fixed set of texts (ASCII, contractions, whitespace runs, digits, multi-byte UTF-8, bytes
  that are not UTF-8) and the input's own first bytes encode into at most one id per byte,
  every id in the vocabulary; with the gpt2 kind they decode back to the text (each merge was
  checked to spell its two parts), with the byte kind every id is its byte.
Seeds: tokenizer files written by dev/data/tokenizer.py (fuzz/run.py).
*/
#include "tokenizer_check.h"

static const char* TEXTS[] = {
    "Hello world, it's 2024!",
    "they'll've   spaces\t\n\n  end  ",
    "caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 \xe2\x80\x94 x",
    "ab\xff\xfe \x80x caf\xc3 \xed\xa0\x80 \xc0\xaf \xf4\x90\x80\x80 '\xffs",
    "12345 67.89 'S 'T 're 'VE",
    "",
};

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string path = fuzz_write("tokenizer.bin", data, size);
    Tokenizer tok;
    if (tokenizer_load(&tok, path.c_str()) != 0) {
        fuzz_check(tok.error[0] != '\0', "tokenizer_load failed without a message");
        return 0;
    }
    const uint8_t* end = tok.token_data + tok.token_offset[tok.vocab_size];
    for (int id = 0; id < tok.vocab_size; id++) {
        size_t len = 0;
        const uint8_t* bytes = tokenizer_decode(&tok, id, &len);
        fuzz_check(bytes != NULL && bytes >= tok.token_data && bytes + len <= end,
                   "a token's bytes lie outside the table");
    }
    size_t len = 0;
    fuzz_check(tokenizer_decode(&tok, -1, &len) == NULL &&
                   tokenizer_decode(&tok, tok.vocab_size, &len) == NULL,
               "an id outside the vocabulary decodes");
    for (const char* text : TEXTS) check_encoding(&tok, (const uint8_t*)text, strlen(text));
    check_encoding(&tok, data, size < 256 ? size : 256);
    tokenizer_free(&tok);
    return 0;
}
