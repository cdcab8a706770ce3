// What the libFuzzer targets of tests/fuzz/ share: a private scratch folder per process, writing
// the input to a file (the readers under test take paths, as kvbench does), the rule that bad input
// may only raise the project's own errors (common/errors.h), and the tokenizers and data that
// setup.sh installs. A target that finds none of its data exits 77 (ctest: skipped).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <string_view>

#include "common/errors.h"
#include "engine/tokenizer.h"
#include "tests/test_paths.h"

namespace kvb::fuzz {

// A fresh folder under $TMPDIR (or /tmp) for this process, removed at exit.
inline const std::filesystem::path& scratch_dir() {
  static const std::filesystem::path dir = [] {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/kvb-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("kvb fuzz: mkdtemp");
      std::abort();
    }
    static const std::string remove_at_exit = pattern;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(remove_at_exit, ec);
    });
    return std::filesystem::path(pattern);
  }();
  return dir;
}

inline void write_file(const std::filesystem::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "kvb fuzz: cannot write %s\n", path.c_str());
    std::abort();
  }
}

inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `body`; the project's errors for bad input end the iteration, anything else (another
// exception type, a crash, a sanitizer report) reaches libFuzzer as a finding.
template <typename Body>
bool accepts(Body&& body) {
  try {
    body();
    return true;
  } catch (const InputError&) {
  } catch (const FormatError&) {
  } catch (const CapacityError&) {
  }
  return false;
}

// A property the reader promises did not hold: print it and crash, so libFuzzer keeps the input.
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "kvb fuzz: property violated: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// kvbench commands print their results; a fuzzer's stdout is for libFuzzer's own lines only.
inline void silence_stdout() {
  const int null = ::open("/dev/null", O_WRONLY);
  if (null >= 0) {
    std::fflush(stdout);
    ::dup2(null, STDOUT_FILENO);
    ::close(null);
  }
}

// The default model's tokenizer (models/SmolLM2-135M-Instruct.Q4_1.gguf or $KVB_MODEL); exits 77
// when it is absent (harness/scripts/setup.sh places it).
inline const Tokenizer& default_tokenizer() {
  static const std::unique_ptr<Tokenizer> tokenizer = [] {
    const std::filesystem::path model = test::default_model_path();
    if (!std::filesystem::exists(model)) {
      std::fprintf(stderr, "SKIP: missing %s (run harness/scripts/setup.sh)\n", model.c_str());
      std::exit(77);
    }
    return tokenizer_from_path(model.string());
  }();
  return *tokenizer;
}

}  // namespace kvb::fuzz
