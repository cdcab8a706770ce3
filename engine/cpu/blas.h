// The CPU engine's BLAS as the commands see it: its thread count (`--threads` sets it beside the
// TBB pool's, `kvbench bench` reports it) and the speed of the sgemm that prefill multiplies with
// (bench's FLOP/s ceiling), and the memory read rate that decode streams its weights at (bench's
// bandwidth ceiling). The harness reaches the kernels through here (kernels/cpu/matmul.h).
#pragma once

#include <cstddef>

namespace kvb {

int cpu_blas_threads();
void set_cpu_blas_threads(int threads);

// sgemm FLOP/s of a [rows, in] x [in, out] product, best of 3 (the shape of a prefill chunk's
// feed-forward product).
double measure_sgemm_flops(int rows, int in, int out);

// The sum of `n` floats read by every TBB thread, each range of `grain` floats in 8 lanes (the
// read-bandwidth ceiling's loop; a benchmark times it on buffers of its own).
double parallel_read_sum(const float* data, size_t n, size_t grain);
// Read bandwidth in bytes/s of a `bytes` buffer summed by parallel_read_sum, best of 3.
double measure_read_bandwidth(size_t bytes);

}  // namespace kvb
