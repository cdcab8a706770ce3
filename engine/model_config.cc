#include "engine/model_config.h"

namespace kvb {

const char* architecture_name(Architecture architecture) {
  switch (architecture) {
    case Architecture::kLlama:
      return "llama";
    case Architecture::kMistral:
      return "mistral";
    case Architecture::kQwen2:
      return "qwen2";
  }
  return "unknown";
}

}  // namespace kvb
