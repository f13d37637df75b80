// The simulated devices' compute capability, CUCC_COMPUTE_CAPABILITY (default 9.0): every device
// reports the one wanted on the command line through cudaGetDeviceProperties (major, minor, and
// a name saying it) and cudaDeviceGetAttribute; the H100's sizes stay. A value that is not one of
// CUDA 13's compute capabilities stops the program at the first CUDA call, naming the variable.
//! cpu-only
//! run: ./prog 9.0 => pass /all compute capability checks passed/
//! run: CUCC_COMPUTE_CAPABILITY=10.0 ./prog 10.0 => pass /all compute capability checks passed/
//! run: CUCC_COMPUTE_CAPABILITY=12.1 CUCC_DEVICES=3 ./prog 12.1 => pass /all compute capability checks passed/
//! run: CUCC_COMPUTE_CAPABILITY=10 ./prog 10.0 => fail /CUCC_COMPUTE_CAPABILITY=10: expected one of CUDA 13's compute capabilities: 7\.5, .*10\.0/
//! run: CUCC_COMPUTE_CAPABILITY=9.5 ./prog 9.5 => fail /CUCC_COMPUTE_CAPABILITY=9\.5: expected one of/
//! run: CUCC_COMPUTE_CAPABILITY=10.0x ./prog 10.0 => fail /CUCC_COMPUTE_CAPABILITY=10\.0x: expected one of/
#include <cstdio>
#include <cstring>
#include <string>

#include "test_util.h"

int main(int argc, char** argv) {
    int want_major = 0, want_minor = 0;
    if (argc != 2 || sscanf(argv[1], "%d.%d", &want_major, &want_minor) != 2) {
        fprintf(stderr, "usage: %s MAJOR.MINOR (the compute capability the devices must report)\n",
                argv[0]);
        return 2;
    }
    int count = 0;
    CUDA_CHECK(cudaGetDeviceCount(&count));
    for (int d = 0; d < count; d++) {
        cudaDeviceProp p;
        CUDA_CHECK(cudaGetDeviceProperties(&p, d));
        int major = 0, minor = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
        CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
        const std::string what = "device " + std::to_string(d);
        expect(
            p.major == want_major && p.minor == want_minor && major == p.major && minor == p.minor,
            (what + ": compute capability " + argv[1]).c_str(),
            "properties " + std::to_string(p.major) + "." + std::to_string(p.minor) +
                ", attributes " + std::to_string(major) + "." + std::to_string(minor));
        char name[64];
        if (want_major == 9 && want_minor == 0) snprintf(name, sizeof name, "cucc CPU (H100-like)");
        else snprintf(name, sizeof name, "cucc CPU (H100-like, compute capability %s)", argv[1]);
        expect(strcmp(p.name, name) == 0, (what + ": name").c_str(), p.name);
        expect(p.multiProcessorCount == 132 && p.sharedMemPerMultiprocessor == 228 * 1024,
               (what + ": the H100's 132 SMs and 228 KiB per SM").c_str());
    }
    return test_report("compute capability");
}
