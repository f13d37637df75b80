// cooperative_groups/scan.h (CPU runtime shadow): inclusive and exclusive scans over a tile or a
// coalesced group.
//
// Tiles of up to 32 threads: Hillis-Steele, in step k each thread adds the partial result of
// the thread 2^k ranks below (shfl_up leaves the lowest 2^k threads alone). Larger tiles and
// coalesced groups: every thread folds the values of the ranks up to its own, in rank order.
#pragma once

#include <cooperative_groups/reduce.h>

namespace cooperative_groups {

template <class Group, class T, class Op = plus<T>>
T inclusive_scan(const Group& group, T value, Op op = Op()) {
    unsigned rank = group.thread_rank();
    if constexpr (details::is_warp_tile<Group>::value) {
        for (unsigned offset = 1; offset < group.num_threads(); offset *= 2) {
            T other = group.shfl_up(value, offset);
            if (rank >= offset) value = op(other, value);
        }
        return value;
    }
    return details::fold_ranks(group, value, op, rank + 1);
}

// The first thread gets T() (CUDA leaves it undefined for operators other than plus).
template <class Group, class T, class Op = plus<T>>
T exclusive_scan(const Group& group, T value, Op op = Op()) {
    unsigned rank = group.thread_rank();
    if constexpr (details::is_warp_tile<Group>::value) {
        T inclusive = inclusive_scan(group, value, op);
        T shifted = group.shfl_up(inclusive, 1);
        return rank == 0 ? T() : shifted;
    }
    T before = details::fold_ranks(group, value, op, rank);
    return rank == 0 ? T() : before;
}

}  // namespace cooperative_groups
