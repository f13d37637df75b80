// cooperative_groups/reduce.h (CPU runtime shadow): cg::reduce over a tile or a coalesced group,
// and its operators.
//
// reduce(group, value, op) combines the values of all threads of the group with op and returns
// the result to every thread: for tiles of up to 32 threads by a butterfly of shfl_xor
// (log2(size) steps, the shape of CUDA's own tile reductions); for larger tiles and coalesced
// groups every thread folds the group's values in rank order, so all get the same bits.
#pragma once

#include <cooperative_groups.h>

namespace cooperative_groups {

template <class T>
struct plus {
    T operator()(T a, T b) const { return a + b; }
};
template <class T>
struct less {
    T operator()(T a, T b) const { return b < a ? b : a; }
};
template <class T>
struct greater {
    T operator()(T a, T b) const { return a < b ? b : a; }
};
template <class T>
struct bit_and {
    T operator()(T a, T b) const { return a & b; }
};
template <class T>
struct bit_or {
    T operator()(T a, T b) const { return a | b; }
};
template <class T>
struct bit_xor {
    T operator()(T a, T b) const { return a ^ b; }
};

namespace details {
// Tiles of at most a warp, which shuffle; other groups exchange their values.
template <class Group>
struct is_warp_tile : std::false_type {};
template <unsigned N, class P>
struct is_warp_tile<thread_block_tile<N, P>> : std::integral_constant<bool, N <= 32> {};

// Calls f(rank, value) for every thread of the group that took part, in rank order.
template <unsigned N, class P, class T, class F>
void for_each_value(const thread_block_tile<N, P>& g, T value, F f) {
    const uint32_t* arrived;
    const T* v = g.values(value, &arrived);
    for (unsigned r = 0; r < N; r++)
        if (arrived[r / 32] >> (r % 32) & 1u) f(r, v[r]);
}
template <class T, class F>
void for_each_value(const coalesced_group& g, T value, F f) {
    unsigned arrived;
    const T* v = cucc::warp_values(g.lanes(), value, &arrived);
    unsigned r = 0;
    for (unsigned m = g.lanes(); m; m &= m - 1, r++)
        if (arrived >> __builtin_ctz(m) & 1u) f(r, v[__builtin_ctz(m)]);
}
// Folds the values of ranks [0, end) with op, in rank order.
template <class Group, class T, class Op>
T fold_ranks(const Group& g, T value, Op op, unsigned end) {
    bool first = true;
    T acc = value;
    for_each_value(g, value, [&](unsigned r, T v) {
        if (r >= end) return;
        acc = first ? v : op(acc, v);
        first = false;
    });
    return acc;
}
}  // namespace details

template <unsigned N, class P, class T, class Op>
T reduce(const thread_block_tile<N, P>& group, T value, Op op) {
    if constexpr (N <= 32) {
        for (unsigned offset = N / 2; offset > 0; offset /= 2)
            value = op(value, group.shfl_xor(value, (int)offset));
        return value;
    }
    return details::fold_ranks(group, value, op, N);
}
template <class T, class Op>
T reduce(const coalesced_group& group, T value, Op op) {
    return details::fold_ranks(group, value, op, 32);
}

// invoke_one(group, f, args...): one thread of the group calls f; invoke_one_broadcast also
// hands f's result to every thread.
template <class Group, class F, class... Args>
void invoke_one(const Group& group, F&& f, Args&&... args) {
    if (group.thread_rank() == 0) f(static_cast<Args&&>(args)...);
}
template <class Group, class F, class... Args>
auto invoke_one_broadcast(const Group& group, F&& f, Args&&... args) {
    decltype(f(static_cast<Args&&>(args)...)) result{};
    if (group.thread_rank() == 0) result = f(static_cast<Args&&>(args)...);
    return group.shfl(result, 0);
}

}  // namespace cooperative_groups
