// cooperative_groups.h (CPU runtime shadow): CUDA's cooperative groups on top of the CPU
// runtime's barriers and warp and tile exchanges (cucc/device.h, cucc/runtime.h).
//
// Groups and how they are built:
//   thread_block            the block; sync() is __syncthreads.
//   thread_block_tile<N>    N consecutive threads in linear block order (tiled_partition<N>).
//                           Up to 32 a tile lies inside one warp: its lanes are N consecutive
//                           bits of the warp's mask and its collectives are warp shuffles with
//                           width N. Larger tiles (64 .. 1024) use the runtime's tile exchange
//                           (cucc::group_exchange): sync, shfl, any, all and the collectives of
//                           reduce.h and scan.h, as CUDA offers them for such tiles. A
//                           block_tile_memory scratch (this_thread_block(scratch)) is accepted
//                           and not needed.
//   thread_group            any of them held by value, as functions taking a thread_group see
//                           them (sync, thread_rank, size); tiled_partition(group, n) makes one.
//   coalesced_group         the lanes of the warp at this call site together
//                           (coalesced_threads(), see __activemask in cucc/runtime.h), or a part
//                           of one (tiled_partition, binary_partition, labeled_partition).
//   grid_group              this_grid(): sync() needs a cooperative launch (cucc::grid_sync).
// Collectives on groups (cg::reduce, scans, invoke_one) are in cooperative_groups/reduce.h and
// scan.h, as in CUDA.
#pragma once

#include <cuda_runtime.h>

namespace cooperative_groups {

namespace details {
inline unsigned block_rank() {
    return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x;
}
inline unsigned block_size() { return blockDim.x * blockDim.y * blockDim.z; }
// The lanes of the calling thread's warp that exist (a partial last warp has fewer).
inline unsigned existing_lanes() {
    unsigned in_warp = block_size() - (block_rank() & ~31u);
    return in_warp >= 32 ? 0xffffffffu : (1u << in_warp) - 1u;
}
// Lane of the rank-th set bit of mask (rank counted from 0), or 32 if there is none.
inline unsigned lane_of_rank(unsigned mask, unsigned rank) {
    for (unsigned i = 0; i < rank && mask; i++) mask &= mask - 1;
    return mask ? (unsigned)__builtin_ctz(mask) : 32u;
}
[[noreturn]] inline void bad_tile(unsigned n) {
    fprintf(stderr, "cucc: tiled_partition: %u is not a power of two from 1 to 1024\n", n);
    abort();
}
}  // namespace details

// Any group, by value. kind_ says which; a tile is described by its size, a coalesced group by
// its lanes.
class thread_group {
  public:
    unsigned long long thread_rank() const {
        switch (kind_) {
            case kBlock:
                return details::block_rank();
            case kTile:
                return details::block_rank() % tile_;
            default:
                return __popc(mask_ & ((1u << cucc::lane_id()) - 1u));
        }
    }
    unsigned long long size() const {
        return kind_ == kBlock ? details::block_size() : kind_ == kTile ? tile_ : __popc(mask_);
    }
    unsigned long long num_threads() const { return size(); }
    // The call site is passed on so the runtime can tell different barriers apart.
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if (kind_ == kBlock) __syncthreads(file, line);
        else if (kind_ == kCoalesced) __syncwarp(mask_);
        else if (tile_ <= 32) __syncwarp(tile_mask());
        else cucc::group_exchange(tile_first(), tile_, nullptr, 0, nullptr);
    }
    unsigned get_type() const { return kind_; }

  protected:
    enum Kind : unsigned { kBlock = 1, kTile = 2, kCoalesced = 3 };
    thread_group(Kind kind, unsigned tile, unsigned mask) : kind_(kind), tile_(tile), mask_(mask) {}
    // For tiles: the first thread (block rank) of this thread's tile, and for tiles of up to
    // 32 the warp lanes of the tile.
    unsigned tile_first() const { return details::block_rank() / tile_ * tile_; }
    unsigned tile_mask() const {
        unsigned first_lane = (details::block_rank() & 31u) / tile_ * tile_;
        unsigned bits = tile_ >= 32 ? 0xffffffffu : ((1u << tile_) - 1u) << first_lane;
        return bits & details::existing_lanes();
    }
    Kind kind_;
    unsigned tile_;  // threads per tile (kTile)
    unsigned mask_;  // warp lanes (kCoalesced)
    friend thread_group tiled_partition(const thread_group& parent, unsigned tile);
};

// Memory that CUDA uses for tiles larger than 32 on devices before compute capability 8.0.
template <unsigned MaxBlockSize = 1024, unsigned TileCommunicationSize = 8>
struct block_tile_memory {};

class thread_block : public thread_group {
  public:
    thread_block() : thread_group(kBlock, 0, 0) {}
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 dim_threads() const { return dim3(blockDim.x, blockDim.y, blockDim.z); }
    dim3 group_dim() const { return dim_threads(); }
    unsigned thread_rank() const { return details::block_rank(); }
    unsigned size() const { return details::block_size(); }
    unsigned num_threads() const { return size(); }
};

inline thread_block this_thread_block() { return thread_block(); }
template <unsigned MaxBlockSize, unsigned TileCommunicationSize>
thread_block this_thread_block(block_tile_memory<MaxBlockSize, TileCommunicationSize>&) {
    return thread_block();
}

template <unsigned N, class Parent = void>
class thread_block_tile : public thread_group {
    static_assert(N >= 1 && N <= 1024 && (N & (N - 1)) == 0,
                  "tile sizes are powers of two from 1 to 1024");

  public:
    thread_block_tile() : thread_group(kTile, N, 0) {}
    template <class OtherParent>
    thread_block_tile(const thread_block_tile<N, OtherParent>&) : thread_group(kTile, N, 0) {}
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
    unsigned thread_rank() const { return details::block_rank() % N; }
    unsigned meta_group_rank() const { return details::block_rank() / N; }
    unsigned meta_group_size() const { return (details::block_size() + N - 1) / N; }
    // The warp lanes of this thread's tile (tiles of at most 32).
    unsigned lanes() const { return tile_mask(); }
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        thread_group::sync(file, line);
    }

    template <class T>
    T shfl(T var, int src_rank) const {
        if constexpr (N <= 32) return __shfl_sync(tile_mask(), var, src_rank, N);
        const uint32_t* arrived;
        const T* v = values(var, &arrived);
        unsigned src = (unsigned)src_rank % N;
        return arrived[src / 32] >> (src % 32) & 1u ? v[src] : var;
    }
    // Warp-sized tiles only, as in CUDA.
    template <class T>
    T shfl_xor(T var, int lane_mask) const {
        static_assert(N <= 32, "shfl_xor needs a tile of at most 32 threads");
        return __shfl_xor_sync(tile_mask(), var, lane_mask, N);
    }
    template <class T>
    T shfl_down(T var, unsigned delta) const {
        static_assert(N <= 32, "shfl_down needs a tile of at most 32 threads");
        return __shfl_down_sync(tile_mask(), var, delta, N);
    }
    template <class T>
    T shfl_up(T var, unsigned delta) const {
        static_assert(N <= 32, "shfl_up needs a tile of at most 32 threads");
        return __shfl_up_sync(tile_mask(), var, delta, N);
    }
    int any(int predicate) const {
        if constexpr (N <= 32) return __any_sync(tile_mask(), predicate);
        return count(predicate != 0) > 0;
    }
    int all(int predicate) const {
        if constexpr (N <= 32) return __all_sync(tile_mask(), predicate);
        return count(predicate == 0) == 0;
    }
    // Bit i is the predicate of the tile's thread i.
    unsigned ballot(int predicate) const {
        static_assert(N <= 32, "ballot needs a tile of at most 32 threads");
        return __ballot_sync(tile_mask(), predicate) >> first_lane();
    }
    template <class T>
    unsigned match_any(T value) const {
        static_assert(N <= 32, "match_any needs a tile of at most 32 threads");
        return __match_any_sync(tile_mask(), value) >> first_lane();
    }
    template <class T>
    unsigned match_all(T value, int& pred) const {
        static_assert(N <= 32, "match_all needs a tile of at most 32 threads");
        return __match_all_sync(tile_mask(), value, &pred) >> first_lane();
    }

    // Every thread of a tile larger than a warp deposits value; the values in tile rank order
    // and which threads took part (see cucc::group_exchange).
    template <class T>
    const T* values(T value, const uint32_t** arrived) const {
        return static_cast<const T*>(
            cucc::group_exchange(tile_first(), N, &value, sizeof(T), arrived));
    }

  private:
    unsigned first_lane() const { return (details::block_rank() & 31u) / N * N; }
    // Threads of the tile for which flag holds.
    unsigned count(bool flag) const {
        const uint32_t* arrived;
        const int* v = values((int)flag, &arrived);
        unsigned n = 0;
        for (unsigned r = 0; r < N; r++) n += (arrived[r / 32] >> (r % 32) & 1u) && v[r];
        return n;
    }
};

// tiled_partition<N>(group): a tile of N threads of a block or of a larger tile.
template <unsigned N, class Parent>
thread_block_tile<N, Parent> tiled_partition(const Parent&) {
    return thread_block_tile<N, Parent>();
}

// The lanes of a warp that run together; ranks follow lane order.
class coalesced_group : public thread_group {
  public:
    explicit coalesced_group(unsigned mask) : thread_group(kCoalesced, 0, mask) {}
    unsigned thread_rank() const { return __popc(mask_ & ((1u << cucc::lane_id()) - 1u)); }
    unsigned size() const { return __popc(mask_); }
    unsigned num_threads() const { return size(); }
    unsigned meta_group_rank() const { return meta_rank_; }
    unsigned meta_group_size() const { return meta_size_; }
    void sync() const { __syncwarp(mask_); }
    int any(int predicate) const { return __any_sync(mask_, predicate); }
    int all(int predicate) const { return __all_sync(mask_, predicate); }
    // Bit i is the predicate of the group's thread i.
    unsigned ballot(int predicate) const { return to_ranks(__ballot_sync(mask_, predicate)); }
    template <class T>
    unsigned match_any(T value) const {
        return to_ranks(__match_any_sync(mask_, value));
    }
    template <class T>
    unsigned match_all(T value, int& pred) const {
        return to_ranks(__match_all_sync(mask_, value, &pred));
    }
    template <class T>
    T shfl(T var, unsigned src_rank) const {
        unsigned lane = details::lane_of_rank(mask_, src_rank);
        return __shfl_sync(mask_, var, lane < 32 ? (int)lane : cucc::lane_id());
    }
    // By rank within the group; a source rank outside it gives the caller's own value.
    template <class T>
    T shfl_down(T var, unsigned delta) const {
        unsigned rank = (unsigned)thread_rank() + delta;
        return rank < size() ? shfl_to(var, rank) : shfl_to(var, (unsigned)thread_rank());
    }
    template <class T>
    T shfl_up(T var, unsigned delta) const {
        unsigned rank = (unsigned)thread_rank();
        return rank >= delta ? shfl_to(var, rank - delta) : shfl_to(var, rank);
    }
    unsigned lanes() const { return mask_; }
    void set_meta(unsigned rank, unsigned size) {
        meta_rank_ = rank;
        meta_size_ = size;
    }

  private:
    // Every lane asks for a possibly different rank: one shuffle by lane index.
    template <class T>
    T shfl_to(T var, unsigned rank) const {
        return __shfl_sync(mask_, var, (int)details::lane_of_rank(mask_, rank));
    }
    unsigned to_ranks(unsigned lanes_mask) const {
        unsigned out = 0, r = 0;
        for (unsigned m = mask_; m; m &= m - 1, r++)
            if (lanes_mask >> __builtin_ctz(m) & 1u) out |= 1u << r;
        return out;
    }
    unsigned meta_rank_ = 0, meta_size_ = 1;
};

inline coalesced_group coalesced_threads(const char* file = __builtin_FILE(),
                                         int line = __builtin_LINE()) {
    return coalesced_group(__activemask(file, line));
}

namespace details {
// The lanes of the n consecutive ranks of coalesced lanes `mask` that hold the caller's rank.
inline unsigned coalesced_part(unsigned mask, unsigned n) {
    unsigned rank = __popc(mask & ((1u << cucc::lane_id()) - 1u)), first = rank / n * n, part = 0;
    for (unsigned r = first; r < first + n; r++) {
        unsigned lane = lane_of_rank(mask, r);
        if (lane < 32) part |= 1u << lane;
    }
    return part;
}
}  // namespace details

// A dynamic tile: of a block or tile, a thread_group of n consecutive threads; of a coalesced
// group, the coalesced group of n consecutive ranks.
inline thread_group tiled_partition(const thread_group& parent, unsigned n) {
    if (n == 0 || n > 1024 || (n & (n - 1)) != 0) details::bad_tile(n);
    if (parent.get_type() != thread_group::kCoalesced)
        return thread_group(thread_group::kTile, n, 0);
    return thread_group(thread_group::kCoalesced, 0, details::coalesced_part(parent.mask_, n));
}
inline coalesced_group tiled_partition(const coalesced_group& parent, unsigned n) {
    if (n == 0 || n > 32 || (n & (n - 1)) != 0) details::bad_tile(n);
    coalesced_group part(details::coalesced_part(parent.lanes(), n));
    part.set_meta(parent.thread_rank() / n, (parent.size() + n - 1) / n);
    return part;
}

// The threads of a group of at most a warp (a coalesced group or a tile of up to 32) whose
// label equals the caller's; binary_partition splits by a predicate.
template <class Group, class Label>
coalesced_group labeled_partition(const Group& g, Label label) {
    return coalesced_group(__match_any_sync(g.lanes(), label));
}
template <class Group>
coalesced_group binary_partition(const Group& g, bool predicate) {
    return labeled_partition(g, (int)predicate);
}

// The whole grid. sync() needs a cooperative launch.
class grid_group {
  public:
    bool is_valid() const { return cucc::grid_is_cooperative(); }
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        cucc::grid_sync(file, line);
    }
    unsigned long long num_blocks() const {
        return (unsigned long long)gridDim.x * gridDim.y * gridDim.z;
    }
    unsigned long long block_rank() const {
        return (blockIdx.z * (unsigned long long)gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    }
    unsigned long long num_threads() const { return num_blocks() * details::block_size(); }
    unsigned long long size() const { return num_threads(); }
    unsigned long long thread_rank() const {
        return block_rank() * details::block_size() + details::block_rank();
    }
    dim3 group_dim() const { return dim3(gridDim.x, gridDim.y, gridDim.z); }
    dim3 dim_blocks() const { return group_dim(); }
    dim3 block_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
};
inline grid_group this_grid() { return grid_group(); }

template <class Group>
void sync(const Group& g, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    g.sync(file, line);
}
inline void sync(const coalesced_group& g) { g.sync(); }
template <class Group>
auto thread_rank(const Group& g) {
    return g.thread_rank();
}
template <class Group>
auto group_size(const Group& g) {
    return g.num_threads();
}

}  // namespace cooperative_groups
