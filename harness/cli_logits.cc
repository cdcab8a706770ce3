// Placeholder until this subcommand is implemented; replaced by its real implementation.
#include "engine/errors.h"
#include "harness/cli.h"

namespace kvb::cli {

int logits(const std::vector<std::string>&) {
  throw InputError("'logits' is not implemented in this build yet");
}

}  // namespace kvb::cli
