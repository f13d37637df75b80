// cooperative_groups/memcpy_async.h (CPU runtime shadow): cg::memcpy_async, cg::wait and
// cg::wait_prior, the group-wide copy (typically global to shared memory) that a kernel
// overlaps with its work.
//
// Every thread of the group calls memcpy_async with the same arguments, as CUDA requires; here
// each thread copies its own contiguous share of the bytes at once, before the call returns.
// A copy that is complete when it is issued is one of the executions CUDA allows: the data may
// be read only after wait(group) or wait_prior<N>(group), which synchronize the group, so every
// thread then sees every share. The byte-count form is provided (not the layout form, nor
// cuda::aligned_size_t, which needs libcu++).
#pragma once

#include <cooperative_groups.h>

#include <cstddef>
#include <cstring>

namespace cooperative_groups {

namespace details {
// This thread's share of a copy of `bytes` bytes by the group: contiguous, 16-byte multiples.
template <class Group>
void copy_share(const Group& g, void* dst, const void* src, size_t bytes) {
    size_t threads = (size_t)g.num_threads(), rank = (size_t)g.thread_rank();
    size_t share = (bytes + threads - 1) / threads;
    share = (share + 15) / 16 * 16;
    size_t begin = rank * share;
    if (begin >= bytes) return;
    size_t n = bytes - begin < share ? bytes - begin : share;
    memcpy((char*)dst + begin, (const char*)src + begin, n);
}
}  // namespace details

template <class Group, class T>
void memcpy_async(const Group& g, T* dst, const T* src, size_t bytes) {
    details::copy_share(g, dst, src, bytes);
}

// Waits for the group's copies; they are complete already, so this is the group barrier that
// makes every thread's share visible to the others.
template <class Group>
void wait(const Group& g) {
    g.sync();
}
// Waits for all but the last N copies (all of them here: each completed when issued).
template <unsigned N, class Group>
void wait_prior(const Group& g) {
    g.sync();
}

}  // namespace cooperative_groups
