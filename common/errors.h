// Errors at the boundaries. Every message names the input that was wrong and, where there is one,
// the fix ("... run harness/scripts/setup.sh", "... use --budget > 0"). The CLI prints what() to
// stderr and exits with the code below.
#pragma once

#include <stdexcept>
#include <string>

namespace kvb {

// Bad user input: a file, a flag, a config key, a record. Exit code 2.
class InputError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A model or data file that exists but is malformed (corrupt GGUF, truncated safetensors,
// malformed JSONL line). Exit code 3.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The request does not fit the model or the device (context too long, out of memory). Exit code 4.
class CapacityError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace kvb
