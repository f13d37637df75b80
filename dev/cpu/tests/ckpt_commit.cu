// Tests the crash safety and the directory handling of llmc/checkpoint.h, in a scratch
// directory (argument 1, emptied first):
// - ckpt_find_latest: none in an empty or missing directory; the highest step otherwise; files
//   that only look like checkpoints (wrong name form, temporary files) are ignored, also by
//   pruning, and a damaged file under a checkpoint name is skipped with a warning;
// - keep_last N keeps the newest N up to the new step, never touches newer steps, 0 keeps all;
//   keep_before B also keeps the newest below B; find_latest below a step;
//   committing a step again replaces that checkpoint;
// - a writer killed (SIGKILL, in a child process) in the middle of a checkpoint leaves only a
//   temporary file: find_latest still returns the previous checkpoint, which opens intact; a
//   commit leaves the leftover alone (it could be another writer's), taking the folder lock
//   deletes it;
// - failures (missing directory, a file instead of a directory, the file size limit hit in the
//   middle of a section, the final name taken by a directory, a directory without write
//   permission at begin and at commit) return a message with the path and the errno text, and
//   leave every committed checkpoint intact and findable;
// - the folder lock: taken, refused to a second taker with the holder's host and pid, released;
//   a lock whose process died (SIGKILL) or whose pid now belongs to another process (start
//   time differs) is taken over; a lock of another host never is; a folder that is a file or
//   cannot be written is refused when the lock is taken.
// Every checkpoint's content is derived from its step, so each survivor is checked in full.
// Host code only.
//! run: ./prog build/cpu/tests/ckpt_commit_dir => pass /all checkpoint commit checks passed/

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <set>
#include <string>
#include <vector>
#include "../../../llmc/checkpoint.h"
#include "test_util.h"

static bool contains(const std::string& s, const char* part) {
    return s.find(part) != std::string::npos;
}

static const uint64_t CONFIG[3] = {12, 768, 50257};

// The payload of the checkpoint for `step`: 100000 bytes that depend on the step.
static std::vector<uint8_t> payload(uint64_t step) {
    std::vector<uint8_t> v(100000);
    uint64_t x = step * 0x9E3779B97F4A7C15ull + 1;
    for (auto& b : v) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        b = (uint8_t)x;
    }
    return v;
}

static int write_checkpoint(const std::string& dir, uint64_t step, int keep_last, std::string* err,
                            uint64_t keep_before = 0) {
    std::vector<uint8_t> p = payload(step);
    CheckpointWriter w;
    int rc = ckpt_writer_begin(&w, dir.c_str(), step, CONFIG, sizeof(CONFIG));
    w.keep_before = keep_before;
    if (rc == 0) rc = ckpt_write_section(&w, "payload", p.data(), p.size());
    if (rc == 0) rc = ckpt_write_section(&w, "step", &step, sizeof(step));
    if (rc == 0) rc = ckpt_writer_commit(&w, keep_last);
    if (err) *err = rc ? w.error : "";
    return rc;
}

// Opens the checkpoint of `step` and checks everything in it.
static bool checkpoint_intact(const std::string& dir, uint64_t step) {
    char path[CKPT_PATH_BYTES];
    ckpt_final_name(path, sizeof(path), dir.c_str(), step);
    CheckpointReader r;
    if (ckpt_open(&r, path, CONFIG, sizeof(CONFIG), NULL, 0) != 0) {
        printf("     %s\n", r.error);
        return false;
    }
    std::vector<uint8_t> p(100000);
    uint64_t s = 0;
    bool ok = r.step == step && ckpt_read_section(&r, "payload", p.data(), p.size()) == 0 &&
              ckpt_read_section(&r, "step", &s, sizeof(s)) == 0 && s == step && p == payload(step);
    ckpt_close(&r);
    return ok;
}

// The names in dir (without . and ..).
static std::set<std::string> listing(const std::string& dir) {
    std::set<std::string> names;
    DIR* d = opendir(dir.c_str());
    for (struct dirent* e; d != NULL && (e = readdir(d)) != NULL;)
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) names.insert(e->d_name);
    if (d != NULL) closedir(d);
    return names;
}

static std::set<std::string> names_of(std::initializer_list<uint64_t> steps) {
    std::set<std::string> names;
    for (uint64_t s : steps) {
        char name[64];
        snprintf(name, sizeof(name), "ckpt_step%08llu.bin", (unsigned long long)s);
        names.insert(name);
    }
    return names;
}

static std::string join(const std::set<std::string>& names) {
    std::string s;
    for (const auto& n : names) s += (s.empty() ? "" : " ") + n;
    return s;
}

static int latest(const std::string& dir, uint64_t* step, uint64_t below = UINT64_MAX) {
    char path[CKPT_PATH_BYTES], err[1024];
    return ckpt_find_latest(dir.c_str(), below, path, sizeof(path), step, err, sizeof(err));
}

static void test_keep_last(const std::string& dir) {
    uint64_t step = 0;
    expect(latest(dir, &step) == 0, "an empty directory has no checkpoint");
    expect(latest(dir + "/missing", &step) == 0, "a missing directory has no checkpoint");
    std::string err;
    int rc = 0;
    for (uint64_t s : {10, 20, 30, 40, 50}) rc |= write_checkpoint(dir, s, 3, &err);
    expect(rc == 0 && listing(dir) == names_of({30, 40, 50}),
           "keep_last 3 after steps 10..50 keeps 30, 40, 50",
           err + " [" + join(listing(dir)) + "]");
    expect(latest(dir, &step) == 1 && step == 50, "find_latest returns step 50");
    rc = write_checkpoint(dir, 35, 2, &err);
    expect(rc == 0 && listing(dir) == names_of({30, 35, 40, 50}),
           "keep_last 2 at step 35 keeps 30 and 35, leaves the newer 40 and 50",
           err + " [" + join(listing(dir)) + "]");
    rc = write_checkpoint(dir, 60, 0, &err);
    expect(rc == 0 && listing(dir) == names_of({30, 35, 40, 50, 60}), "keep_last 0 keeps all",
           err + " [" + join(listing(dir)) + "]");
    expect(latest(dir, &step, 50) == 1 && step == 40, "find_latest below 50 returns step 40");
    expect(latest(dir, &step, 30) == 0, "find_latest below 30 finds none");
    rc = write_checkpoint(dir, 60, 1, &err, 45);
    expect(rc == 0 && listing(dir) == names_of({40, 60}),
           "keep_last 1 with keep_before 45 at step 60 also keeps 40 (the newest below 45)",
           err + " [" + join(listing(dir)) + "]");
    rc = write_checkpoint(dir, 60, 1, &err);
    expect(rc == 0 && listing(dir) == names_of({60}),
           "rewriting step 60 with keep_last 1 keeps it alone",
           err + " [" + join(listing(dir)) + "]");
    rc = write_checkpoint(dir, 70, 0, &err);
    expect(rc == 0 && checkpoint_intact(dir, 60) && checkpoint_intact(dir, 70),
           "checkpoints 60 and 70 read back intact", err);

    // Names that are not checkpoints: other forms (ignored by find_latest and by pruning,
    // which must not trip over them), and a damaged file under a checkpoint's name.
    const char* decoys[] = {"ckpt_step000000001.bin", "ckpt_step00000099.bin.bak",
                            "ckpt_step00000097.bin"};
    for (const char* name : decoys) {
        FILE* f = fopen((dir + "/" + name).c_str(), "wb");
        if (f == NULL || fputs("GPT-CKPT but cut short", f) < 0 || fclose(f) != 0) exit(1);
    }
    expect(latest(dir, &step) == 1 && step == 70,
           "find_latest skips non-canonical names and a damaged file (warning above)");
    rc = write_checkpoint(dir, 70, 2, &err);
    std::set<std::string> want = names_of({60, 70});
    want.insert(decoys, decoys + 3);
    expect(rc == 0 && listing(dir) == want, "pruning leaves names that are not checkpoints alone",
           err + " [" + join(listing(dir)) + "]");
    for (const char* name : decoys) remove((dir + "/" + name).c_str());
}

// Taking (and releasing) the folder lock deletes what crashed writers left.
static void remove_leftovers_by_locking(const std::string& dir) {
    CkptLock lock;
    char err[CKPT_ERROR_BYTES] = "";
    int rc = ckpt_lock_take(&lock, dir.c_str(), err, sizeof(err));
    ckpt_lock_release(&lock);
    bool none = true;
    for (const auto& n : listing(dir)) none = none && n.find(".tmp") == std::string::npos;
    expect(rc == 0 && none, "taking the folder lock deletes the leftover temporary files",
           std::string(err) + " [" + join(listing(dir)) + "]");
}

static void test_crash(const std::string& dir) {
    std::set<std::string> before = listing(dir);
    pid_t pid = fork();
    if (pid == 0) {  // the writer that dies half way through the payload
        std::vector<uint8_t> p = payload(80);
        CheckpointWriter w;
        if (ckpt_writer_begin(&w, dir.c_str(), 80, CONFIG, sizeof(CONFIG)) == 0 &&
            ckpt_section_begin(&w, "payload", p.size()) == 0 &&
            ckpt_section_write(&w, p.data(), p.size() / 2) == 0 && fflush(w.file) == 0)
            raise(SIGKILL);
        _exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    expect(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
           "the child writer was killed mid-write");
    std::set<std::string> after = listing(dir);
    std::string leftover;
    for (const auto& n : after)
        if (!before.count(n)) leftover = n;
    expect(
        after.size() == before.size() + 1 && leftover.rfind(".ckpt_step00000080.bin.tmp", 0) == 0,
        "the crash left exactly one temporary file", leftover);
    uint64_t step = 0;
    expect(latest(dir, &step) == 1 && step == 70 && checkpoint_intact(dir, 70),
           "find_latest ignores it: step 70, intact");
    std::string err;
    int rc = write_checkpoint(dir, 80, 0, &err);
    std::set<std::string> with_leftover = names_of({60, 70, 80});
    with_leftover.insert(leftover);
    expect(rc == 0 && listing(dir) == with_leftover && checkpoint_intact(dir, 80),
           "the next commit leaves the leftover alone", err + " [" + join(listing(dir)) + "]");
    remove_leftovers_by_locking(dir);
}

// After a failed write: the committed checkpoints are all there, intact, and nothing else.
static void expect_untouched(const std::string& dir, const char* what) {
    bool ok = listing(dir) == names_of({60, 70, 80});
    for (uint64_t s : {60, 70, 80}) ok = ok && checkpoint_intact(dir, s);
    uint64_t step = 0;
    ok = ok && latest(dir, &step) == 1 && step == 80;
    std::string w =
        std::string("... and the older checkpoints are intact, nothing left over (") + what + ")";
    expect(ok, w.c_str(), "[" + join(listing(dir)) + "]");
}

static void test_failed_commits(const std::string& dir) {
    std::string err;
    int rc = write_checkpoint(dir + "/missing", 90, 0, &err);
    expect(rc != 0 && contains(err, "/missing") && contains(err, "No such file or directory"),
           "begin in a missing directory fails", err);
    rc = write_checkpoint(dir + "/ckpt_step00000080.bin", 90, 0, &err);
    expect(rc != 0 && contains(err, "is not a directory"), "begin on a file fails", err);

    // The disk fills up (the file size limit) in the middle of the payload.
    struct rlimit old_limit, limit;
    getrlimit(RLIMIT_FSIZE, &old_limit);
    limit = old_limit;
    limit.rlim_cur = 50000;
    signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of the signal
    setrlimit(RLIMIT_FSIZE, &limit);
    rc = write_checkpoint(dir, 90, 1, &err);
    setrlimit(RLIMIT_FSIZE, &old_limit);
    expect(
        rc != 0 && contains(err, ".ckpt_step00000090.bin.tmp") && contains(err, "File too large"),
        "running out of space mid-section fails", err);
    expect_untouched(dir, "disk full");

    // The final name is taken by a directory: the rename in commit fails.
    std::string blocker = dir + "/ckpt_step00000090.bin";
    mkdir(blocker.c_str(), 0755);
    FILE* f = fopen((blocker + "/keep").c_str(), "wb");
    if (f) fclose(f);
    rc = write_checkpoint(dir, 90, 1, &err);
    expect(rc != 0 && contains(err, "cannot rename") && contains(err, "ckpt_step00000090.bin"),
           "commit fails when the final name is taken", err);
    remove((blocker + "/keep").c_str());
    rmdir(blocker.c_str());
    expect_untouched(dir, "rename failed");

    // A directory without write permission. Root ignores permissions, so the test drops to
    // user nobody for the attempt (effective uid only, taken back afterwards).
    const uid_t NOBODY = 65534;
    bool root = geteuid() == 0;
    chmod(dir.c_str(), 0555);
    if (root && seteuid(NOBODY) != 0) {
        expect(false, "cannot switch to user nobody", strerror(errno));
        return;
    }
    rc = write_checkpoint(dir, 90, 1, &err);
    if (root && seteuid(0) != 0) exit(1);
    chmod(dir.c_str(), 0755);
    // Which call is refused depends on the folders above (nobody may not even be allowed to
    // look into them, as in a clone made by mktemp -d): either way, begin must fail with EACCES.
    expect(rc != 0 && contains(err, "Permission denied"), "begin in a read-only directory fails",
           err);
    expect_untouched(dir, "read-only directory");

    // Write permission lost between begin and commit: the open file can still be written, the
    // rename fails (and the temporary file cannot be removed either; the next successful commit
    // deletes it).
    std::vector<uint8_t> p = payload(90);
    CheckpointWriter w;
    rc = ckpt_writer_begin(&w, dir.c_str(), 90, CONFIG, sizeof(CONFIG));
    if (rc == 0) rc = ckpt_write_section(&w, "payload", p.data(), p.size());
    chmod(dir.c_str(), 0555);
    if (root && seteuid(NOBODY) != 0) exit(1);
    int commit_rc = rc == 0 ? ckpt_writer_commit(&w, 1) : -1;
    if (root && seteuid(0) != 0) exit(1);
    chmod(dir.c_str(), 0755);
    expect(rc == 0 && commit_rc != 0 && contains(w.error, "cannot rename") &&
               contains(w.error, "Permission denied"),
           "commit into a directory that became read-only fails", w.error);
    uint64_t step = 0;
    expect(latest(dir, &step) == 1 && step == 80 && checkpoint_intact(dir, 80),
           "find_latest still returns step 80, intact");
    rc = write_checkpoint(dir, 90, 2, &err);
    remove_leftovers_by_locking(dir);
    expect(rc == 0 && listing(dir) == names_of({80, 90}) && checkpoint_intact(dir, 90),
           "a later commit succeeds and prunes; the lock removes the leftover",
           err + " [" + join(listing(dir)) + "]");
}

static std::string lock_path(const std::string& dir) { return dir + "/" + CKPT_LOCK_NAME; }

static void write_file(const std::string& path, const std::string& text) {
    FILE* f = fopen(path.c_str(), "wb");
    if (f) {
        fputs(text.c_str(), f);
        fclose(f);
    }
}

static std::string this_host() {
    char host[256] = "unknown";
    gethostname(host, sizeof(host) - 1);
    return host;
}

static void test_lock(const std::string& base) {
    const std::string dir = base + "/locked/sub";  // created, parents too, by the lock
    char err[CKPT_ERROR_BYTES] = "";
    CkptLock a, b;
    int rc = ckpt_lock_take(&a, dir.c_str(), err, sizeof(err));
    expect(rc == 0 && a.held && access(lock_path(dir).c_str(), F_OK) == 0,
           "the lock is taken (the folder is created)", err);
    rc = ckpt_lock_take(&b, dir.c_str(), err, sizeof(err));
    char pid[32];
    snprintf(pid, sizeof(pid), "process %ld", (long)getpid());
    expect(rc != 0 && !b.held && contains(err, "in use by another run") && contains(err, pid) &&
               contains(err, this_host().c_str()),
           "a second taker is refused, naming the holder's pid and host", err);
    ckpt_lock_release(&a);
    expect(access(lock_path(dir).c_str(), F_OK) != 0, "release removes the lock");

    // A holder killed without releasing: its lock names a dead process of this host.
    pid_t child = fork();
    if (child == 0) {
        CkptLock c;
        char e[CKPT_ERROR_BYTES];
        if (ckpt_lock_take(&c, dir.c_str(), e, sizeof(e)) == 0) raise(SIGKILL);
        _exit(3);
    }
    int status = 0;
    waitpid(child, &status, 0);
    expect(WIFSIGNALED(status) && access(lock_path(dir).c_str(), F_OK) == 0,
           "a killed holder leaves its lock behind");
    rc = ckpt_lock_take(&a, dir.c_str(), err, sizeof(err));
    expect(rc == 0 && a.held, "a dead process's lock is taken over", err);
    ckpt_lock_release(&a);

    // This process's pid with another start time: the pid was reused by a new process.
    char content[256];
    snprintf(content, sizeof(content), "host %s pid %ld start 1\n", this_host().c_str(),
             (long)getpid());
    write_file(lock_path(dir), content);
    rc = ckpt_lock_take(&a, dir.c_str(), err, sizeof(err));
    expect(rc == 0 && a.held, "a lock whose pid now names another process is taken over", err);
    ckpt_lock_release(&a);

    // Another host: never judged stale, whatever its pid.
    write_file(lock_path(dir), "host some-other-node pid 999999 start 5\n");
    rc = ckpt_lock_take(&a, dir.c_str(), err, sizeof(err));
    expect(rc != 0 && contains(err, "some-other-node") && contains(err, "never taken over"),
           "a lock held from another host is refused", err);
    unlink(lock_path(dir).c_str());

    write_file(base + "/plainfile", "x");
    rc = ckpt_lock_take(&a, (base + "/plainfile").c_str(), err, sizeof(err));
    expect(rc != 0 && contains(err, "is not a folder"), "a file as the folder is refused", err);
    rc = ckpt_lock_take(&a, (base + "/plainfile/below").c_str(), err, sizeof(err));
    expect(rc != 0 && contains(err, "plainfile"), "a folder below a file is refused", err);

    const uid_t NOBODY = 65534;  // root ignores permissions: try as user nobody
    const bool root = geteuid() == 0;
    chmod(dir.c_str(), 0555);
    if (root && seteuid(NOBODY) != 0) exit(1);
    rc = ckpt_lock_take(&a, dir.c_str(), err, sizeof(err));
    if (root && seteuid(0) != 0) exit(1);
    chmod(dir.c_str(), 0755);
    expect(rc != 0 && (contains(err, "not writable") || contains(err, "cannot create")) &&
               contains(err, "Permission denied"),
           "a folder that cannot be written is refused when the lock is taken", err);
}

int main(int argc, char** argv) {
    std::string dir = directory_argument(argc, argv, "SCRATCH_DIR", true);
    test_keep_last(dir);
    test_crash(dir);
    test_failed_commits(dir);
    test_lock(dir);
    return test_report("checkpoint commit");
}
