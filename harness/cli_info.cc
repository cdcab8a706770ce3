// Placeholder until this subcommand is implemented; replaced by its real implementation.
#include "engine/errors.h"
#include "harness/cli.h"

namespace kvb::cli {

int info(const std::vector<std::string>&) {
  throw InputError("'info' is not implemented in this build yet");
}

}  // namespace kvb::cli
