// cooperative_groups/reduce.h (CPU runtime shadow): cg::reduce over a tile and its operators.
//
// reduce(tile, value, op) combines the values of all threads of the tile with op and returns
// the result to every thread, by a butterfly of shfl_xor (log2(tile size) steps).
#pragma once

#include <cooperative_groups.h>

namespace cooperative_groups {

template <class T> struct plus { T operator()(T a, T b) const { return a + b; } };
template <class T> struct less { T operator()(T a, T b) const { return b < a ? b : a; } };
template <class T> struct greater { T operator()(T a, T b) const { return a < b ? b : a; } };
template <class T> struct bit_and { T operator()(T a, T b) const { return a & b; } };
template <class T> struct bit_or { T operator()(T a, T b) const { return a | b; } };
template <class T> struct bit_xor { T operator()(T a, T b) const { return a ^ b; } };

template <class Group, class T, class Op>
T reduce(const Group& group, T value, Op op) {
    for (unsigned offset = group.num_threads() / 2; offset > 0; offset /= 2)
        value = op(value, group.shfl_xor(value, (int)offset));
    return value;
}

}  // namespace cooperative_groups
