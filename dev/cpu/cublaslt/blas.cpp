// blas.cpp: chooses, loads and checks the BLAS under the CPU cuBLASLt and cuBLAS (blas.h), and
// says which it is (cucc/blas.h).
//
// Which library. The candidates, tried in order until one loads and passes its check:
//   scipy-openblas32  a current OpenBLAS from PyPI (0.3.34, pinned by scripts/setup.sh), built with
//                     DYNAMIC_ARCH: its CPU detection knows current processors and picks the
//                     SkylakeX, Cooperlake or SapphireRapids kernels on AVX-512 ones. 32-bit ints,
//                     every symbol prefixed scipy_. dev/cpu/cucc writes the package's library
//                     folder into the program's RUNPATH.
//   system            Debian's libopenblas.so.0 (libopenblas0), so that a machine without pip
//                     builds and runs. Its 0.3.21 does not know recent processors: on one with
//                     AVX-512 and AMX it ran its generic "Prescott" kernels, 8x slower.
// CUCC_BLAS replaces the list: names and library paths separated by ':', e.g. CUCC_BLAS=system.
// The library is opened with dlopen (RTLD_LOCAL), so building needs no BLAS header or library,
// and a rejected OpenBLAS and the next one never see each other's symbols. All of this runs once,
// before main (a constructor), or at the first BLAS call if that comes first.
//
// OPENBLAS_CORETYPE. This workplace sets it on some processors because older OpenBLAS builds
// compute wrong results or crash there. A DYNAMIC_ARCH OpenBLAS reads it once, while it loads,
// and then runs the kernels it names instead of the ones its own detection picks (even where
// those kernels do not suit the processor: OpenBLAS 0.3.34 still applies its Zen 4 blocking to a
// forced core, upstream issue 6021). So the current OpenBLAS is loaded with the variable hidden:
// its core is its own choice from CPUID. Every other library sees the variable, as the workplace
// intends. Why this is safe:
//   - The environment is changed only while the process has one thread (counted in
//     /proc/self/task), and it keeps one thread until the variable is back: OPENBLAS_NUM_THREADS
//     is 1 during the dlopen, so OpenBLAS starts no thread pool (it runs single-threaded here in
//     any case). setenv and unsetenv race only with other threads, and there are none. Where other
//     threads run, nothing is hidden and the current OpenBLAS is passed over if the variable is
//     set. The values put back are copies of the originals, byte for byte.
//   - Whatever chose its core, a library is used only after its self-check passes: sgemm, dgemm,
//     sgemv and dgemv on matrices of small integers, whose exact results a plain loop computes
//     (every sum is an integer below 2^24, exact in any order), in shapes past the GEMM blocking
//     sizes, with NaN in the padding of the leading dimensions and in a C that beta = 0 must not
//     read. The check runs in a child process (fork), so a library that crashes is passed over
//     like one that computes a wrong result; either way a warning names it and the next
//     candidate is tried, down to the system OpenBLAS with the variable applied. If none passes,
//     the first BLAS call ends the process with the reasons.
// OPENBLAS_L2_SIZE is never touched: OpenBLAS takes it instead of CPUID's L2 size, the guard
// against that same Zen 4 blocking.
#include "blas.h"

#include <cucc/blas.h>
#include <dirent.h>
#include <dlfcn.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace cublaslt_cpu {
namespace {

// Filled once by load() and read-only afterwards. Plain data only: the constructor below runs
// before any C++ object of this file would be constructed.
Blas g_blas;
bool g_usable = false;
char g_description[2048];
pthread_once_t g_once = PTHREAD_ONCE_INIT;

constexpr char kDefaultCandidates[] = "scipy-openblas32:system";
constexpr char kCurrentName[] = "scipy-openblas32";
constexpr char kCurrentFile[] = "libscipy_openblas.so";
constexpr char kSystemName[] = "system";
constexpr char kSystemFile[] = "libopenblas.so.0";

// printf onto the end of a fixed buffer (cut at its size).
void append(char* buf, size_t size, const char* format, ...) {
    size_t used = strlen(buf);
    if (used + 1 >= size) return;
    va_list args;
    va_start(args, format);
    vsnprintf(buf + used, size - used, format, args);
    va_end(args);
}

// ---------------------------------------------------------------------------------------------
// The self-check.

// A small integer in [-4, 4] for element (i, j) of matrix `seed`.
double entry(int i, int j, int seed) { return (i * 7 + j * 3 + seed * 5 + (i * j) % 5) % 9 - 4; }

// The operands of the gemm checks, for m x k op(A) and k x n op(B). op(A) is read from one
// matrix X of seed 1, max(m, k) square: op(A) = X[0:m, 0:k], or X[0:k, 0:m]^T when A is
// transposed, so both cases share one array. op(B) (seed 2) is stored plain ([0]) and transposed
// ([1]). Leading dimensions are 3 (X) and 2 (B) past the rows, with NaN there.
template <class T>
struct GemmOperands {
    int m, n, k, ldx;
    std::vector<T> x, b[2];
    int ldb[2];
};

template <class T>
GemmOperands<T> gemm_operands(int m, int n, int k) {
    const int side = std::max(m, k);
    GemmOperands<T> g{m, n, k, side + 3, {}, {}, {k + 2, n + 2}};
    g.x.assign(static_cast<size_t>(g.ldx) * side, T(NAN));
    g.b[0].assign(static_cast<size_t>(g.ldb[0]) * n, T(NAN));
    g.b[1].assign(static_cast<size_t>(g.ldb[1]) * k, T(NAN));
    for (int c = 0; c < side; c++)
        for (int r = 0; r < side; r++) g.x[r + c * g.ldx] = T(entry(r, c, 1));
    for (int j = 0; j < n; j++)
        for (int kk = 0; kk < k; kk++)
            g.b[0][kk + j * g.ldb[0]] = g.b[1][j + kk * g.ldb[1]] = T(entry(kk, j, 2));
    return g;
}

// The exact op(A) op(B), column-major. op(A) is first copied out as a plain m x k matrix, so
// both cases run the same vectorizable column updates; the entries are small integers, so every
// sum is exact and the order of the additions does not matter.
std::vector<double> exact_product(const GemmOperands<double>& g, bool ta) {
    const int m = g.m, k = g.k, ld = g.ldx;
    std::vector<double> a(static_cast<size_t>(m) * k), product(static_cast<size_t>(m) * g.n, 0.0);
    for (int kk = 0; kk < k; kk++)
        for (int i = 0; i < m; i++) a[i + kk * m] = ta ? g.x[kk + i * ld] : g.x[i + kk * ld];
    for (int kk = 0; kk < k; kk++)  // (column kk of op(A) is read once, into every column of C)
        for (int j = 0; j < g.n; j++) {
            const double bkj = g.b[0][kk + j * g.ldb[0]];
            double* p = &product[j * m];
            for (int i = 0; i < m; i++) p[i] += a[i + kk * m] * bkj;
        }
    return product;
}

// C = alpha op(A) op(B) + beta C for the four transpose pairs: alpha 1 and beta 0 with C all NaN
// (it must not be read), or alpha 2 and beta 1 with C of seed 3. C has one row of padding, which
// must keep its value. product[t]: the exact op(A) op(B) with A transposed or not.
template <class T>
bool gemm_matches(GemmFn<T> gemm, const char* name, const GemmOperands<T>& g,
                  const std::vector<double> (&product)[2], char* why, size_t size) {
    const int m = g.m, n = g.n, ldc = m + 1;
    const T pad = 7;
    std::vector<T> c(static_cast<size_t>(ldc) * n);
    for (int t = 0; t < 4; t++) {
        const bool ta = t & 1, tb = t & 2, accumulate = t == 1 || t == 2;
        for (int j = 0; j < n; j++)
            for (int i = 0; i <= m; i++)
                c[i + j * ldc] = i == m ? pad : accumulate ? T(entry(i, j, 3)) : T(NAN);
        const T alpha = accumulate ? 2 : 1, beta = accumulate ? 1 : 0;
        gemm(kBlasColMajor, ta ? kBlasTrans : kBlasNoTrans, tb ? kBlasTrans : kBlasNoTrans, m, n,
             g.k, alpha, g.x.data(), g.ldx, g.b[tb].data(), g.ldb[tb], beta, c.data(), ldc);
        for (int j = 0; j < n; j++)
            for (int i = 0; i <= m; i++) {
                const double want =
                    i == m ? pad
                           : alpha * product[ta][i + j * m] + (accumulate ? entry(i, j, 3) : 0.0);
                if (!(c[i + j * ldc] == T(want))) {
                    snprintf(why, size, "%s %c%c %dx%dx%d beta %d: C[%d,%d] = %g, not %g", name,
                             ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, g.k, accumulate ? 1 : 0, i, j,
                             double(c[i + j * ldc]), want);
                    return false;
                }
            }
    }
    return true;
}

// y = 2 op(A) x + y for the m x n A of seed 1 (ld m + 3, NaN padding), x of seed 2, y of seed 3.
template <class T>
bool gemv_matches(GemvFn<T> gemv, const char* name, int m, int n, bool trans, char* why,
                  size_t size) {
    const int lda = m + 3, xs = trans ? m : n, ys = trans ? n : m;
    std::vector<T> a(static_cast<size_t>(lda) * n, T(NAN)), x(xs), y(ys);
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) a[i + j * lda] = T(entry(i, j, 1));
    for (int i = 0; i < xs; i++) x[i] = T(entry(i, 0, 2));
    for (int i = 0; i < ys; i++) y[i] = T(entry(i, 0, 3));
    gemv(kBlasColMajor, trans ? kBlasTrans : kBlasNoTrans, m, n, 2, a.data(), lda, x.data(), 1, 1,
         y.data(), 1);
    for (int i = 0; i < ys; i++) {
        double want = entry(i, 0, 3);
        for (int l = 0; l < xs; l++)
            want += 2 * (trans ? entry(l, i, 1) : entry(i, l, 1)) * entry(l, 0, 2);
        if (!(y[i] == T(want))) {
            snprintf(why, size, "%s %c %dx%d: y[%d] = %g, not %g", name, trans ? 'T' : 'N', m, n, i,
                     double(y[i]), want);
            return false;
        }
    }
    return true;
}

// Every check; false with the first difference in `why`. The small shape has odd sizes, so the
// edge kernels run. The large one has m and k past 512: past the P and Q blocking (M and K
// blocks) of 0.3.34's Zen 4 parameters (384 and 512 for sgemm, 512 for dgemm) and the K blocks
// of the usual x86-64 kernels (a few hundred), so its products take several blocks and add up
// across K blocks; m n k is past the small-matrix paths too. Every sum is an integer below 2^24
// in magnitude (at most 2 * 16 * 530 + 4).
bool self_check(const Blas& blas, char* why, size_t size) {
    const int shapes[2][3] = {{37, 29, 53}, {530, 9, 530}};
    for (const auto& s : shapes) {
        std::vector<double> product[2];
        {  // (fp64 first, freed before the fp32 copy is made: less memory to fault in)
            const GemmOperands<double> d = gemm_operands<double>(s[0], s[1], s[2]);
            product[0] = exact_product(d, false);
            product[1] = exact_product(d, true);
            if (!gemm_matches(blas.dgemm, "dgemm", d, product, why, size)) return false;
        }
        if (!gemm_matches(blas.sgemm, "sgemm", gemm_operands<float>(s[0], s[1], s[2]), product, why,
                          size))
            return false;
    }
    for (bool trans : {false, true})
        if (!gemv_matches(blas.sgemv, "sgemv", 37, 53, trans, why, size) ||
            !gemv_matches(blas.dgemv, "dgemv", 37, 53, trans, why, size))
            return false;
    return true;
}

// Runs self_check in a child process: a library that crashes there is then rejected like one
// that computes a wrong result. The child writes "ok" or the difference into a pipe.
bool check_in_child(const Blas& blas, char* why, size_t size) {
    int fds[2];
    if (pipe(fds) != 0) {
        snprintf(why, size, "no self-check: pipe: %s", strerror(errno));
        return false;
    }
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(why, size, "no self-check: fork: %s", strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return false;
    }
    if (pid == 0) {
        char result[256] = "ok";
        self_check(blas, result, sizeof result);
        size_t length = strlen(result);
        bool sent = write(fds[1], result, length) == static_cast<ssize_t>(length);
        _exit(sent ? 0 : 1);  // (not exit: the parent's atexit handlers and stdio are its own)
    }
    close(fds[1]);
    char message[256];
    size_t got = 0;
    while (got + 1 < sizeof message) {
        ssize_t r = read(fds[0], message + got, sizeof message - 1 - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        got += static_cast<size_t>(r);
    }
    message[got] = '\0';
    close(fds[0]);
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (strcmp(message, "ok") == 0) return true;
    if (got > 0) snprintf(why, size, "self-check failed: %s", message);
    else if (waited == pid && WIFSIGNALED(status))
        snprintf(why, size, "crashed in its self-check (%s)", strsignal(WTERMSIG(status)));
    else snprintf(why, size, "its self-check ended without a result");
    return false;
}

// ---------------------------------------------------------------------------------------------
// Loading.

// Threads of this process now, or -1 when /proc cannot say.
int process_threads() {
    DIR* dir = opendir("/proc/self/task");
    if (dir == nullptr) return -1;
    int count = 0;
    for (dirent* e; (e = readdir(dir)) != nullptr;)
        if (e->d_name[0] != '.') count++;
    return closedir(dir) == 0 ? count : -1;
}

// An environment variable, copied so that it can be put back exactly.
struct SavedVariable {
    const char* name;
    char* value;  // malloc'ed copy, nullptr when unset
};

bool save(const char* name, SavedVariable* saved) {
    const char* value = getenv(name);
    saved->name = name;
    saved->value = value ? strdup(value) : nullptr;
    return value == nullptr || saved->value != nullptr;
}

// Puts the variable back; the process cannot go on with its environment changed.
void restore(SavedVariable* saved) {
    int rc = saved->value ? setenv(saved->name, saved->value, 1) : unsetenv(saved->name);
    if (rc != 0) {
        fprintf(stderr, "cucc: cannot restore %s after loading the BLAS: %s\n", saved->name,
                strerror(errno));
        abort();
    }
    free(saved->value);
    saved->value = nullptr;
}

// Finds `file` in the program's library search path (LD_LIBRARY_PATH, the RUNPATH dev/cpu/cucc
// writes, the system folders). dlopen of a bare name would search the same folders, but with the
// RUNPATH of the object that calls it, which under AddressSanitizer (it intercepts dlopen) is the
// sanitizer's runtime, not the program.
bool find_in_library_path(const char* file, char* path, size_t size, char* why, size_t why_size) {
    void* program = dlopen(nullptr, RTLD_NOW);
    if (program == nullptr) {
        snprintf(why, why_size, "dlopen(NULL): %s", dlerror());
        return false;
    }
    Dl_serinfo counts;
    std::vector<Dl_serinfo> storage;  // Dl_serinfo-aligned room for the folder list
    Dl_serinfo* info = nullptr;
    if (dlinfo(program, RTLD_DI_SERINFOSIZE, &counts) == 0) {
        storage.resize(counts.dls_size / sizeof(Dl_serinfo) + 1);
        info = storage.data();
        if (dlinfo(program, RTLD_DI_SERINFOSIZE, info) != 0 ||
            dlinfo(program, RTLD_DI_SERINFO, info) != 0)
            info = nullptr;
    }
    if (info == nullptr) snprintf(why, why_size, "dlinfo: %s", dlerror());
    bool found = false;
    for (unsigned i = 0; info != nullptr && i < info->dls_cnt && !found; i++) {
        snprintf(path, size, "%s/%s", info->dls_serpath[i].dls_name, file);
        found = access(path, R_OK) == 0;
    }
    if (info != nullptr && !found)
        snprintf(why, why_size, "%s is not in the program's library path", file);
    if (dlclose(program) != 0) {
        snprintf(why, why_size, "dlclose: %s", dlerror());
        return false;
    }
    return found;
}

// The OpenBLAS functions used while loading only.
struct OpenBlasExtras {
    void (*set_num_threads)(int);
    char* (*get_config)();
    char* (*get_corename)();
};

// Fills b and x from one library, whose symbols carry `prefix`. False with the first missing one
// in `why`.
bool resolve(void* library, const char* prefix, Blas* b, OpenBlasExtras* x, char* why,
             size_t size) {
    bool ok = true;
    const auto get = [&](auto* slot, const char* name) {
        static_assert(sizeof(*slot) == sizeof(void*), "a function pointer is a data pointer");
        char symbol[64];
        snprintf(symbol, sizeof symbol, "%s%s", prefix, name);
        void* p = dlsym(library, symbol);
        if (p == nullptr && ok) snprintf(why, size, "no symbol %s", symbol);
        ok = ok && p != nullptr;
        memcpy(slot, &p, sizeof p);
    };
    get(&b->sgemm, "cblas_sgemm");
    get(&b->dgemm, "cblas_dgemm");
    get(&b->sgemv, "cblas_sgemv");
    get(&b->dgemv, "cblas_dgemv");
    get(&b->saxpy, "cblas_saxpy");
    get(&b->daxpy, "cblas_daxpy");
    get(&b->sscal, "cblas_sscal");
    get(&b->dscal, "cblas_dscal");
    get(&b->sdot, "cblas_sdot");
    get(&b->ddot, "cblas_ddot");
    get(&b->snrm2, "cblas_snrm2");
    get(&b->sasum, "cblas_sasum");
    get(&b->dnrm2, "cblas_dnrm2");
    get(&b->dasum, "cblas_dasum");
    get(&b->scopy, "cblas_scopy");
    get(&b->dcopy, "cblas_dcopy");
    get(&b->sswap, "cblas_sswap");
    get(&b->dswap, "cblas_dswap");
    get(&x->set_num_threads, "openblas_set_num_threads");
    get(&x->get_config, "openblas_get_config");
    get(&x->get_corename, "openblas_get_corename");
    return ok;
}

// Tries one candidate (a name of the list above, or a library path). On success fills g_blas and
// g_description and returns true; else writes why into `why`, and returns false.
bool try_candidate(const char* candidate, char* why, size_t why_size) {
    const bool current = strcmp(candidate, kCurrentName) == 0;
    const bool system = strcmp(candidate, kSystemName) == 0;
    if (!current && !system && strchr(candidate, '/') == nullptr) {
        snprintf(why, why_size, "not a candidate (%s, %s or a library path)", kCurrentName,
                 kSystemName);
        return false;
    }
    char path[PATH_MAX];
    if (current) {
        if (!find_in_library_path(kCurrentFile, path, sizeof path, why, why_size)) return false;
    } else {
        snprintf(path, sizeof path, "%s", system ? kSystemFile : candidate);
    }

    // Open it, with OPENBLAS_CORETYPE hidden from the current OpenBLAS (see the top of the file).
    const char* coretype = getenv("OPENBLAS_CORETYPE");
    const bool coretype_set = coretype != nullptr, hide = current && coretype_set;
    const bool alone = process_threads() == 1;
    if (hide && !alone) {
        snprintf(why, why_size,
                 "OPENBLAS_CORETYPE is set and other threads run, so it could not be hidden from "
                 "this library's own CPU detection");
        return false;
    }
    char shown[64];  // the variable's value, for the description (`coretype` is not kept valid)
    snprintf(shown, sizeof shown, "%s", coretype_set ? coretype : "");
    SavedVariable threads{"OPENBLAS_NUM_THREADS", nullptr}, core{"OPENBLAS_CORETYPE", nullptr};
    if (alone) {
        if (!save(threads.name, &threads) || (hide && !save(core.name, &core))) {
            free(threads.value);
            snprintf(why, why_size, "out of memory");
            return false;
        }
        if (setenv(threads.name, "1", 1) != 0 || (hide && unsetenv(core.name) != 0)) {
            snprintf(why, why_size, "cannot set the environment: %s", strerror(errno));
            restore(&threads);
            if (hide) restore(&core);
            return false;
        }
    }
    void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (library == nullptr) snprintf(why, why_size, "%s", dlerror());
    if (alone) {
        restore(&threads);
        if (hide) restore(&core);
    }
    if (library == nullptr) return false;

    // A library that fails from here on stays loaded: it was initialized, and unloading an
    // OpenBLAS (its buffers and thread pool) buys nothing.
    Blas blas;
    OpenBlasExtras extras;
    bool prefixed = dlsym(library, "scipy_cblas_sgemm") != nullptr;
    if (!resolve(library, prefixed ? "scipy_" : "", &blas, &extras, why, why_size)) return false;
    extras.set_num_threads(1);
    const char* config = extras.get_config();
    const char* core_name = extras.get_corename();
    if (config == nullptr || core_name == nullptr || strncmp(config, "OpenBLAS ", 9) != 0) {
        snprintf(why, why_size, "not an OpenBLAS (configuration \"%s\")", config ? config : "");
        return false;
    }
    if (strstr(config, "USE64BITINT") != nullptr) {
        snprintf(why, why_size, "64-bit integers (%s)", config);
        return false;
    }
    if (!check_in_child(blas, why, why_size)) {
        fprintf(stderr, "cucc: warning: BLAS %s (%s, core %s) %s, so it is not used\n", candidate,
                path, core_name, why);
        return false;
    }

    // "OpenBLAS 0.3.34.481.3 (scipy-openblas32, /path), core Haswell by its own detection, ..."
    Dl_info where;
    const char* file = dladdr(reinterpret_cast<void*>(blas.sgemm), &where) && where.dli_fname
                           ? where.dli_fname
                           : path;
    int version_end = static_cast<int>(strcspn(config + 9, " ")) + 9;
    g_description[0] = '\0';
    append(g_description, sizeof g_description, "%.*s (%s, %s), core %s ", version_end, config,
           candidate, file, core_name);
    if (hide)
        append(g_description, sizeof g_description,
               "by its own detection (OPENBLAS_CORETYPE=%s, meant for older builds, hidden from "
               "it)",
               shown);
    else if (coretype_set)
        append(g_description, sizeof g_description, "from OPENBLAS_CORETYPE=%s", shown);
    else append(g_description, sizeof g_description, "by its own detection");
    append(g_description, sizeof g_description, ", 1 thread");
    g_blas = blas;
    return true;
}

void load() {
    const char* list = getenv("CUCC_BLAS");
    if (list == nullptr || *list == '\0') list = kDefaultCandidates;
    char passed_over[1024] = "";
    char candidate[PATH_MAX];
    for (const char* p = list; *p != '\0' && !g_usable;) {
        size_t length = strcspn(p, ":");
        snprintf(candidate, sizeof candidate, "%.*s", static_cast<int>(length), p);
        p += length + (p[length] == ':');
        if (candidate[0] == '\0') continue;
        char why[512] = "";
        g_usable = try_candidate(candidate, why, sizeof why);
        if (!g_usable)
            append(passed_over, sizeof passed_over, "%s%s: %s", passed_over[0] ? "; " : "",
                   candidate, why);
    }
    if (!g_usable)
        snprintf(g_description, sizeof g_description, "no usable BLAS (CUCC_BLAS=%s): %s", list,
                 passed_over[0] ? passed_over : "no candidate");
    else if (passed_over[0])
        append(g_description, sizeof g_description, "; passed over %s", passed_over);
}

void load_once() {
    if (pthread_once(&g_once, load) != 0) {
        fprintf(stderr, "cucc: pthread_once failed loading the BLAS\n");
        abort();
    }
}

// Before main, while the process normally has one thread (101: the first of the priorities a
// program may use, ahead of the C++ constructors).
__attribute__((constructor(101))) void load_at_start() { load_once(); }

}  // namespace

const Blas& blas() {
    load_once();
    if (!g_usable) {
        fprintf(stderr,
                "cucc: the CPU cuBLAS(Lt) has no BLAS to run on: %s\ninstall one with "
                "scripts/setup.sh (PyPI's scipy-openblas32) or apt-get install libopenblas0\n",
                g_description);
        abort();
    }
    return g_blas;
}

}  // namespace cublaslt_cpu

const char* cucc_blas_description(void) {
    cublaslt_cpu::load_once();
    return cublaslt_cpu::g_description;
}

void cucc_blas_sgemm(int trans_a, int trans_b, int m, int n, int k, float alpha, const float* a,
                     int lda, const float* b, int ldb, float beta, float* c, int ldc) {
    using namespace cublaslt_cpu;
    blas().sgemm(kBlasColMajor, trans_a ? kBlasTrans : kBlasNoTrans,
                 trans_b ? kBlasTrans : kBlasNoTrans, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
