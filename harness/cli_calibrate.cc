// Placeholder until this subcommand is implemented; replaced by its real implementation.
#include "engine/errors.h"
#include "harness/cli.h"

namespace kvb::cli {

int calibrate(const std::vector<std::string>&) {
  throw InputError("'calibrate' is not implemented in this build yet");
}

}  // namespace kvb::cli
