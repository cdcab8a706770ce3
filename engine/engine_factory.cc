#include "engine/engine_factory.h"

#include "common/errors.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/model.h"
#ifdef KVB_HAVE_CUDA
#include "engine/cuda/cuda_backend.h"
#endif

namespace kvb {

std::string resolve_device(const std::string& device) {
  if (device != "cpu" && device != "cuda" && device != "auto")
    throw InputError("device '" + device + "' is not one of cpu, cuda, auto");
  if (device == "cpu") return "cpu";
#ifdef KVB_HAVE_CUDA
  const bool gpu = cuda_device_available();
  if (device == "cuda" && !gpu)
    throw InputError("device 'cuda': no CUDA device is visible to this process; use --device cpu");
  return gpu ? "cuda" : "cpu";
#else
  if (device == "cuda")
    throw InputError(
        "device 'cuda': this kvbench was built without CUDA (configure with "
        "-DKVB_CUDA=ON on a machine with the CUDA toolkit); use --device cpu");
  return "cpu";
#endif
}

KvDtype cpu_kv_dtype(const CpuEngineOptions& options) {
  if (options.kv_dtype) return *options.kv_dtype;
  return options.numerics == ForwardPrecision::kBf16Device ? KvDtype::kBf16 : kDefaultCpuKvDtype;
}

std::unique_ptr<Engine> make_engine(const std::string& device, const ModelWeights& weights,
                                    const CpuEngineOptions& cpu) {
  const std::string resolved = resolve_device(device);
  if (resolved == "cuda" && cpu.kv_dtype && *cpu.kv_dtype != KvDtype::kBf16)
    throw InputError("a " + kv_dtype_name(*cpu.kv_dtype) +
                     " KV cache is a CPU engine option: the CUDA engine's cache is bf16; leave "
                     "the KV dtype out (or give bf16), or run on the CPU");
  if (resolved == "cuda" && cpu.numerics == ForwardPrecision::kF32)
    throw InputError(
        "f32 numerics are a CPU engine option: the CUDA engine computes in bf16; leave the "
        "numerics out (or give bf16-device), or run on the CPU");
#ifdef KVB_HAVE_CUDA
  if (resolved == "cuda") return std::make_unique<CudaBackend>(weights);
#endif
  if (weights_live_on_device_only(weights))
    throw InputError("model " + weights.source +
                     " was loaded for a device engine (LoadOptions::weights_on_host = false) and "
                     "has no weights on the host; load it with weights_on_host for the CPU engine");
  return std::make_unique<CpuBackend>(weights, cpu_kv_dtype(cpu),
                                      cpu.numerics.value_or(ForwardPrecision::kF32));
}

}  // namespace kvb
