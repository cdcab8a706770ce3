#include "datasets/scoring.h"

#include "datasets/registry.h"

namespace kvb {

double score_sample(const std::string& benchmark, const std::string& task,
                    const std::string& prediction, const Sample& sample) {
  return find_benchmark(benchmark).score(task, prediction, sample);
}

}  // namespace kvb
