// cooperative_groups.h (CPU runtime shadow): thread blocks and warp tiles of CUDA's cooperative
// groups, on top of the CPU runtime's barriers and warp shuffles (cucc/device.h).
//
// A group is described by one number, its tile size (0 for the whole block). Tiles are runs of
// consecutive linear thread ranks, as tiled_partition makes them, so a tile of up to 32 threads
// lies inside one warp: its lanes are `tile_size` consecutive bits of the warp's mask, and its
// shuffles are warp shuffles with width = tile size. Collectives on tiles (cg::reduce ...) are
// in cooperative_groups/reduce.h and scan.h, as in CUDA.
#pragma once

#include <cuda_runtime.h>

namespace cooperative_groups {

namespace details {
inline unsigned block_rank() { return (threadIdx.z * blockDim.y + threadIdx.y) * blockDim.x + threadIdx.x; }
inline unsigned block_size() { return blockDim.x * blockDim.y * blockDim.z; }
}  // namespace details

// Any group: the whole block (tile_size 0) or a tile of it.
class thread_group {
public:
    unsigned thread_rank() const { return tile_ ? details::block_rank() % tile_ : details::block_rank(); }
    unsigned size() const { return tile_ ? tile_ : details::block_size(); }
    unsigned num_threads() const { return size(); }
    // The call site is passed on so the runtime can tell different barriers apart.
    void sync(const char* file = __builtin_FILE(), int line = __builtin_LINE()) const {
        if (tile_) __syncwarp(mask());
        else __syncthreads(file, line);
    }

    // Tile-only operations (valid for tiles of up to 32 threads).
    unsigned meta_group_rank() const { return details::block_rank() / tile_; }
    unsigned meta_group_size() const { return (details::block_size() + tile_ - 1) / tile_; }
    template <class T> T shfl(T var, int src_rank) const { return __shfl_sync(mask(), var, src_rank, tile_); }
    template <class T> T shfl_xor(T var, int lane_mask) const { return __shfl_xor_sync(mask(), var, lane_mask, tile_); }
    template <class T> T shfl_down(T var, unsigned delta) const { return __shfl_down_sync(mask(), var, delta, tile_); }
    template <class T> T shfl_up(T var, unsigned delta) const { return __shfl_up_sync(mask(), var, delta, tile_); }
    int any(int predicate) const { return __any_sync(mask(), predicate); }
    int all(int predicate) const { return __all_sync(mask(), predicate); }
    // Bit i is the predicate of the tile's thread i.
    unsigned ballot(int predicate) const { return __ballot_sync(mask(), predicate) >> first_lane(); }
    template <class T> unsigned match_any(T value) const { return __match_any_sync(mask(), value) >> first_lane(); }

    // The warp lanes of this thread's tile; lanes past the end of the block do not exist.
    unsigned mask() const {
        unsigned warp_base = details::block_rank() & ~31u;
        unsigned in_warp = details::block_size() - warp_base;
        unsigned existing = in_warp >= 32 ? 0xffffffffu : (1u << in_warp) - 1u;
        unsigned tile_bits = tile_ >= 32 ? 0xffffffffu : ((1u << tile_) - 1u) << first_lane();
        return tile_bits & existing;
    }

protected:
    explicit thread_group(unsigned tile) : tile_(tile) {}
    unsigned first_lane() const { return (details::block_rank() & 31u) / tile_ * tile_; }
    unsigned tile_;
};

class thread_block : public thread_group {
public:
    thread_block() : thread_group(0) {}
    dim3 group_index() const { return dim3(blockIdx.x, blockIdx.y, blockIdx.z); }
    dim3 thread_index() const { return dim3(threadIdx.x, threadIdx.y, threadIdx.z); }
    dim3 dim_threads() const { return dim3(blockDim.x, blockDim.y, blockDim.z); }
    dim3 group_dim() const { return dim_threads(); }
};

inline thread_block this_thread_block() { return thread_block(); }

template <unsigned N>
class thread_block_tile : public thread_group {
    static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "tile sizes are powers of two up to 32");

public:
    thread_block_tile() : thread_group(N) {}
    static constexpr unsigned size() { return N; }
    static constexpr unsigned num_threads() { return N; }
};

// tiled_partition<N>(block) and tiled_partition(block, n); a tile of a tile is a finer tile.
template <unsigned N>
thread_block_tile<N> tiled_partition(const thread_group&) { return thread_block_tile<N>(); }

class dynamic_tile : public thread_group {
public:
    explicit dynamic_tile(unsigned n) : thread_group(n) {}
};
inline thread_group tiled_partition(const thread_group&, unsigned n) {
    if (n == 0 || n > 32 || (n & (n - 1)) != 0) {
        fprintf(stderr, "cucc: tiled_partition(group, %u): tile sizes are powers of two up to 32\n", n);
        abort();
    }
    return dynamic_tile(n);
}

// The threads of the warp that are active now, ranked by lane.
class coalesced_group {
public:
    coalesced_group() : mask_(__activemask()) {}
    unsigned thread_rank() const { return __popc(mask_ & ((1u << cucc::lane_id()) - 1u)); }
    unsigned size() const { return __popc(mask_); }
    unsigned num_threads() const { return size(); }
    void sync() const { __syncwarp(mask_); }
    int any(int predicate) const { return __any_sync(mask_, predicate); }
    int all(int predicate) const { return __all_sync(mask_, predicate); }
    template <class T>
    T shfl(T var, unsigned src_rank) const {
        unsigned m = mask_;
        for (unsigned i = 0; i < src_rank; i++) m &= m - 1;  // drop the lowest src_rank lanes
        return __shfl_sync(mask_, var, m ? __ffs((int)m) - 1 : 0);
    }

private:
    unsigned mask_;
};
inline coalesced_group coalesced_threads() { return coalesced_group(); }

inline void sync(const thread_group& g, const char* file = __builtin_FILE(),
                 int line = __builtin_LINE()) {
    g.sync(file, line);
}

}  // namespace cooperative_groups
