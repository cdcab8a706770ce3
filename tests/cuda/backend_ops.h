// The backend-ops table (tests/cuda/backend_ops_test.cc): one row per CUDA op and shape, each run
// against the op's CPU twin of the same name (kernels/cpu). The rows of each family of ops come
// from backend_ops_forward.h, backend_ops_products.h, backend_ops_attention.h,
// backend_ops_selection.h, backend_ops_topk.h and backend_ops_eviction.h.
#pragma once

#include <functional>
#include <ostream>
#include <sstream>
#include <string>

namespace kvb::test {

struct OpCase {
  std::string name;  // "<op>_<shape>": the gtest parameter name, so a filter can pick an op
  // Runs the CUDA op and its CPU twin on the same bf16-representable inputs and compares them
  // with gtest assertions.
  std::function<void()> check;
};
inline void PrintTo(const OpCase& c, std::ostream* os) { *os << c.name; }

// The parts streamed together: case_name("add_rmsnorm_rows", 5, "_dim", 576) is
// "add_rmsnorm_rows5_dim576".
template <typename... Parts>
std::string case_name(const Parts&... parts) {
  std::ostringstream out;
  (out << ... << parts);
  return out.str();
}

}  // namespace kvb::test
