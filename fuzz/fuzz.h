/*
fuzz/fuzz.h: what the libFuzzer harnesses in fuzz/ share.

A harness (fuzz/NAME.cc, one per parser) defines LLVMFuzzerTestOneInput and hands the fuzzer's
bytes to the parser's own entry point in llmc/. Those entry points take a path, so the input is
first written to a file (fuzz_write) in a scratch folder private to the process, made on first
use under $TMPDIR (fuzz/run.py points TMPDIR at build/fuzz/NAME/tmp and deletes it afterwards;
a crashed harness can leave only that folder behind). fuzz_check states what the parser
promises about what it accepted; a broken promise aborts, which libFuzzer reports as a crash
with the input that caused it.

Build and run: fuzz/run.py (or `make fuzz`), which also describes how to add a harness.
*/
#pragma once

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <string>

// Stops the run (a finding) when a promise of the parser does not hold.
inline void fuzz_check(bool ok, const char* what) {
    if (!ok) {
        fprintf(stderr, "fuzz_check failed: %s\n", what);
        abort();
    }
}

// Deletes the scratch folder and the files in it (it holds no subfolders).
inline void fuzz_remove_dir(const char* dir) {
    DIR* d = opendir(dir);
    if (d == NULL) return;
    for (struct dirent* e; (e = readdir(d)) != NULL;) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        unlink((std::string(dir) + "/" + e->d_name).c_str());
    }
    closedir(d);
    rmdir(dir);
}

// This process's scratch folder, created on first use and deleted at exit.
inline const char* fuzz_dir() {
    static std::string dir;
    if (dir.empty()) {
        const char* tmp = getenv("TMPDIR");
        std::string pattern = std::string(tmp != NULL && tmp[0] ? tmp : "/tmp") + "/fuzz_XXXXXX";
        fuzz_check(mkdtemp(&pattern[0]) != NULL, "cannot create a scratch folder under $TMPDIR");
        dir = pattern;
        atexit([] { fuzz_remove_dir(dir.c_str()); });
    }
    return dir.c_str();
}

// Writes data[0..n) to the scratch file `name` (replacing it) and returns its path.
inline std::string fuzz_write(const char* name, const void* data, size_t n) {
    std::string path = std::string(fuzz_dir()) + "/" + name;
    FILE* f = fopen(path.c_str(), "wb");
    fuzz_check(f != NULL, "cannot create a scratch file");
    fuzz_check((n == 0 || fwrite(data, 1, n, f) == n) && fclose(f) == 0,
               "cannot write a scratch file");
    return path;
}
