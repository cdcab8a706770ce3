// The CPU engine's BLAS as the commands see it: its thread count (`--threads` sets it beside the
// TBB pool's, `kvbench bench` reports it) and the speed of the sgemm that prefill multiplies with
// (bench's FLOP/s ceiling). The harness reaches the kernels through here (kernels/cpu/matmul.h).
#pragma once

namespace kvb {

int cpu_blas_threads();
void set_cpu_blas_threads(int threads);

// sgemm FLOP/s of a [rows, in] x [in, out] product, best of 3 (the shape of a prefill chunk's
// feed-forward product).
double measure_sgemm_flops(int rows, int in, int out);

}  // namespace kvb
