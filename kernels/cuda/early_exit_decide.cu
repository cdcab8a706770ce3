// ART decode attention, part 2: the decision over the walk's per-block states (part 1, the walk:
// early_exit_decode.cu). Semantics: kernels/cuda/early_exit_decode.h. CPU twin of the readings,
// the counters and the stop: kernels/cpu/early_exit_decode.cc.
//
// Thread block (segment, walker); thread (head r, quad q) holds dimensions 4q .. 4q+3 of head r,
// so the sums over the head dimension are shuffles within the head's D/4 lanes (a half or a whole
// warp) and no barrier is needed per block. The per-head verdicts of a block meet in shared memory
// (a block fails when any head fails) and are summed up per segment (SegmentSummary); the last
// block of the walker to finish chains the segments' summaries into the stop.
#include <cuda_bf16.h>

#include <cfloat>
#include <climits>

#include "kernels/cuda/dispatch.h"
#include "kernels/cuda/early_exit_decode.h"
#include "kernels/cuda/early_exit_layout.cuh"
#include "kernels/cuda/launch.cuh"

namespace kvb::cuda::early_exit {
namespace {

using bf16 = __nv_bfloat16;

template <int D>
constexpr int kLanes = D / 4;  // threads per head
template <int D>
constexpr int kDecideThreads = kMaxRows* kLanes<D>;

__device__ __forceinline__ float4 normalized(const RowState& s) {
  const float inverse = 1.f / s.l;
  return make_float4(s.acc.x * inverse, s.acc.y * inverse, s.acc.z * inverse, s.acc.w * inverse);
}

// The sum over the head's lanes (aligned groups of kLanes lanes of one warp).
template <int D>
__device__ __forceinline__ float head_sum(float value) {
#pragma unroll
  for (int offset = kLanes<D> / 2; offset > 0; offset /= 2)
    value += __shfl_xor_sync(0xffffffff, value, offset);
  return value;
}

// Whether one head passes the test after a block (b >= 1): the CPU walk's readings from the same
// three sums, ‖o_b‖², ‖o_{b-1}‖², ‖o_b - o_{b-1}‖² (kernels/cpu/early_exit_decode.cc), and
// `mass` = the block's share of the normaliser.
__device__ __forceinline__ bool passes_test(const EarlyExitDecodeOptions& opt, float cc, float pp,
                                            float dd, float mass) {
  const float current_norm = sqrtf(cc), previous_norm = sqrtf(pp);
  const float norm_step = current_norm - previous_norm;
  const float d_scale = opt.scale_criterion == EarlyExitScale::kNorm
                            ? fabsf(norm_step) / fmaxf(previous_norm, FLT_MIN)
                        : opt.scale_criterion == EarlyExitScale::kChange
                            ? sqrtf(dd) / fmaxf(current_norm, FLT_MIN)
                            : mass;
  const float denominator = 2.f * current_norm * previous_norm;
  const float d_direction =
      denominator > 0.f ? fmaxf(0.f, (dd - norm_step * norm_step) / denominator) : 1.f;
  const bool scale_ok = !opt.use_scale || d_scale < opt.tau;
  const bool direction_ok = !opt.use_direction || d_direction < opt.phi;
  return scale_ok && direction_ok;
}

// Blocks [lo, hi) of the walk: the prefix P from the aggregates of the earlier segments, then per
// block S_b = P (+) R_b and the test against o_{b-1}; P moves to S_b at every chunk end. A head
// that fails marks the block in `failed`; o_b is kept in the slot where this head passed (a stop
// there needs every head to pass) and for the walk's last block (the output without a stop).
// Every workspace load goes to L2 (ld.cg): the workspace is rewritten by every layer's walk, and
// a line an earlier kernel left in this SM's L1 must not be read.
// Latency, not arithmetic, sets the time of this loop (a few thread blocks per walker, each a
// chain of dependent steps): the loads go out kPrefixBatch aggregates or kGroup slots at a time
// before the steps that use them, and the steps of a group are independent but for o_{b-1} and
// the chunk ends, so their sums over the head (the shuffles) overlap.
constexpr int kPrefixBatch = 16;
constexpr int kGroup = 8;

template <int D>
__device__ __forceinline__ void decide_segment(const EarlyExitDecodeOptions& opt,
                                               const WalkLayout& layout, const Workspace<D>& ws,
                                               int b, int head, bool live, int segment, int lo,
                                               int hi, int blocks, int* failed) {
  const int quad = threadIdx.x % kLanes<D>;
  RowState prefix;
  for (int k0 = 0; k0 < segment; k0 += kPrefixBatch) {
    float2 stats[kPrefixBatch];
    float4 acc[kPrefixBatch];
#pragma unroll
    for (int i = 0; i < kPrefixBatch; ++i) {
      const float* aggregate = ws.aggregate(b, head, min(k0 + i, segment - 1));
      stats[i] = __ldcg(reinterpret_cast<const float2*>(aggregate));
      acc[i] = __ldcg(reinterpret_cast<const float4*>(aggregate + 4) + quad);
    }
#pragma unroll
    for (int i = 0; i < kPrefixBatch; ++i)
      if (k0 + i < segment) merge_into(prefix, stats[i].x, stats[i].y, acc[i]);
  }
  float4 previous = lo > 0 ? normalized(prefix) : make_float4(0.f, 0.f, 0.f, 0.f);
  for (int w0 = lo; w0 < hi; w0 += kGroup) {
    float4 stats[kGroup], acc[kGroup];  // max, sum, own mass, -; the accumulator
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const float* slot = ws.slot(b, head, min(w0 + i, hi - 1));
      stats[i] = __ldcg(reinterpret_cast<const float4*>(slot));
      acc[i] = __ldcg(reinterpret_cast<const float4*>(slot + 4) + quad);
    }
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      const int w = w0 + i;
      if (w >= hi) break;  // block-uniform
      RowState state = prefix;
      const float weight = merge_into(state, stats[i].x, stats[i].y, acc[i]);
      const float4 current = normalized(state);
      bool passes = false;
      if (w >= 1) {  // no previous output to compare with after the first block
        const float4 step = make_float4(current.x - previous.x, current.y - previous.y,
                                        current.z - previous.z, current.w - previous.w);
        const float cc = head_sum<D>(current.x * current.x + current.y * current.y +
                                     current.z * current.z + current.w * current.w);
        const float pp = head_sum<D>(previous.x * previous.x + previous.y * previous.y +
                                     previous.z * previous.z + previous.w * previous.w);
        const float dd =
            head_sum<D>(step.x * step.x + step.y * step.y + step.z * step.z + step.w * step.w);
        passes = passes_test(opt, cc, pp, dd, stats[i].z * weight / state.l);
      }
      if (live) {
        if (!passes && quad == 0) failed[w - lo] = 1;
        if (passes || w == blocks - 1)
          reinterpret_cast<float4*>(ws.slot(b, head, w) + 4 + D)[quad] = current;
      }
      if ((w + 1) % layout.chunk_blocks == 0) prefix = state;  // a chunk's final: S_b is P next
      previous = current;
    }
  }
}

// What the stop needs from a segment of `length` blocks, whose block b passes when every head
// passed the test after it (b >= 1): the passes at its start (`lead`) and at its end (`trail`),
// and the first block where `patience` passes in a row end within the segment (INT_MAX: none).
// Thread 0, after the segment's verdicts are in `failed`.
__device__ __forceinline__ int4 summarize(const int* failed, int lo, int length, int patience) {
  int lead = 0, run = 0, first = INT_MAX;
  bool leading = true;
  for (int k = 0; k < length; ++k) {
    const bool pass = lo + k >= 1 && failed[k] == 0;
    run = pass ? run + 1 : 0;
    leading &= pass;
    lead += leading ? 1 : 0;
    if (run >= patience && first == INT_MAX) first = lo + k;
  }
  return make_int4(lead, run, first, length);
}

// The first stop of the walk from the segments' summaries, in walk order: the CPU's counters (a
// run of passes carried across segments) and group stop; INT_MAX when the walk does not stop.
__device__ __forceinline__ int first_stop(const int4* summaries, int n_segments, int segment_blocks,
                                          int patience) {
  int run = 0;
  for (int j = 0; j < n_segments; ++j) {
    const int4 s = summaries[j];  // lead, trail, first, length
    if (s.w == 0) break;          // past the walk's end
    if (run + s.x >= patience) return j * segment_blocks + patience - run - 1;
    if (s.z != INT_MAX) return s.z;  // after the segment's first failure: the run is its own
    run = s.x == s.w ? run + s.w : s.y;
  }
  return INT_MAX;
}

// The last decide block of a walker: the stop (capped by decision_window), the output o_b of that
// block (else of the last block), the statistics, the length (with the step's append) and the
// counter's reset.
template <int D, bool kIndexed>
__device__ __forceinline__ void finish_walker(const EarlyExitDecodeArgs& ea,
                                              const WalkLayout& layout, const Walker& wk,
                                              const Workspace<D>& ws, int blocks, int* state,
                                              int4* summaries, int& stop_shared) {
  const EarlyExitDecodeOptions& opt = ea.options;
  const DecodeAttentionArgs& args = ea.attention;
  const int tid = threadIdx.x, b = blockIdx.z;
  for (int j = tid; j < layout.n_segments; j += blockDim.x)
    summaries[j] = __ldcg(ws.summary(wk.index, j));
  __syncthreads();
  if (tid == 0) {
    int stop = opt.enabled
                   ? first_stop(summaries, layout.n_segments, layout.segment_blocks, opt.patience)
                   : INT_MAX;
    if (opt.decision_window > 0 && stop >= opt.decision_window) stop = INT_MAX;
    stop_shared = stop;
  }
  __syncthreads();
  const bool stopped = stop_shared != INT_MAX;
  const int last = stopped ? stop_shared : blocks - 1;
  const int row = tid / kLanes<D>, quad = tid % kLanes<D>;
  if (row < wk.rows) {
    float4 value = make_float4(0.f, 0.f, 0.f, 0.f);  // an empty walk
    if (blocks > 0)
      value =
          __ldcg(reinterpret_cast<const float4*>(ws.slot(b, wk.head0 + row, last) + 4 + D) + quad);
    __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(args.out + b * args.out_seq_stride +
                                                            int64_t(wk.head0 + row) * D + 4 * quad);
    out[0] = __floats2bfloat162_rn(value.x, value.y);
    out[1] = __floats2bfloat162_rn(value.z, value.w);
  }
  if (tid == 0) {
    const int visited = stopped ? last + 1 : blocks;
    state[kBlocksVisited] = visited;
    state[kBlocksTotal] = blocks;
    state[kBlocksLoaded] = blocks;  // the walk streams every tile
    state[kDecideArrivals] = 0;     // every decide block of this walker has arrived
    // The step's entry (walker_of counted it): nothing of this call reads the length any more.
    if (!kIndexed && args.append.positions != nullptr) args.append.kv_length[wk.index] = wk.n;
    if (ea.totals != nullptr) {
      atomicAdd(ea.totals + 0, static_cast<unsigned long long>(visited));
      atomicAdd(ea.totals + 1, static_cast<unsigned long long>(blocks));
      atomicAdd(ea.totals + 2, static_cast<unsigned long long>(blocks));
    }
  }
}

template <int D, bool kIndexed>
__global__ void __launch_bounds__(kDecideThreads<D>)
    early_exit_decide_kernel(EarlyExitDecodeArgs ea, WalkLayout layout) {
  extern __shared__ int failed[];  // [layout.segment_blocks]: some head failed after the block
  __shared__ int4 summaries[kMaxSegments];
  __shared__ int last_arrival, stop_block;
  wait_for_predecessor();
  allow_successor_launch();
  const DecodeAttentionArgs& args = ea.attention;
  const int b = blockIdx.z, segment = blockIdx.x, tid = threadIdx.x;
  const Walker wk = walker_of<kIndexed>(args, blockIdx.y, b);
  const int blocks = walk_blocks(wk.n, ea.options.sink_tokens);
  const Workspace<D> ws{args.workspace, args.batch, args.n_query_heads, layout.slots};
  const int row = tid / kLanes<D>;
  const bool live = row < wk.rows;
  // Rows past the group compute on row 0's data (whole warps run the shuffles) and store nothing.
  const int head = wk.head0 + (live ? row : 0);
  const int lo = segment * layout.segment_blocks;
  const int hi = min(blocks, lo + layout.segment_blocks);
  if (lo < hi) {
    for (int k = tid; k < hi - lo; k += blockDim.x) failed[k] = 0;
    __syncthreads();
    decide_segment<D>(ea.options, layout, ws, b, head, live, segment, lo, hi, blocks, failed);
    __syncthreads();
  }
  if (tid == 0)
    *ws.summary(wk.index, segment) =
        lo < hi ? summarize(failed, lo, hi - lo, ea.options.patience) : make_int4(0, 0, INT_MAX, 0);
  // The last decide block of the walker finishes it (every thread fences its own stores first).
  __threadfence();
  __syncthreads();
  int* state = ea.walker_state + int64_t(wk.index) * kStateWords;
  if (tid == 0) last_arrival = atomicAdd(state + kDecideArrivals, 1) == int(gridDim.x) - 1;
  __syncthreads();
  if (!last_arrival) return;
  __threadfence();
  finish_walker<D, kIndexed>(ea, layout, wk, ws, blocks, state, summaries, stop_block);
}

template <int D, bool kIndexed>
void launch_for(const EarlyExitDecodeArgs& ea, const WalkLayout& layout, cudaStream_t stream) {
  const DecodeAttentionArgs& a = ea.attention;
  const int axis = kIndexed ? a.n_query_heads : a.n_kv_heads;
  launch_overlapped(early_exit_decide_kernel<D, kIndexed>, dim3(layout.n_segments, axis, a.batch),
                    kDecideThreads<D>, size_t(layout.segment_blocks) * sizeof(int), stream,
                    "early_exit_decide_kernel", ea, layout);
}

}  // namespace

void launch_decide(const EarlyExitDecodeArgs& ea, const WalkLayout& layout, cudaStream_t stream) {
  const bool indexed = ea.attention.indices != nullptr;
  with_constant<64, 128>(ea.attention.head_dim, "early_exit_decode: head_dim", [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    indexed ? launch_for<D, true>(ea, layout, stream) : launch_for<D, false>(ea, layout, stream);
  });
}

}  // namespace kvb::cuda::early_exit
