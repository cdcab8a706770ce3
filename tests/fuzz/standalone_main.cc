// A driver for the fuzz targets of tests/fuzz/ without libFuzzer, so that a gcc build (CI's
// harness/scripts/test.sh) runs a short deterministic slice of each: every seed, then RUNS inputs
// made from the seeds by simple seeded mutations (bit flips, bytes set, inserted or erased, ranges
// duplicated, dictionary tokens spliced in, truncation, two seeds crossed). No coverage guidance
// and no sanitizers: that is harness/scripts/fuzz.sh's job. A crash leaves the input that caused
// it in ./fuzz-slice-crash (run the libFuzzer build of the target on it for the sanitizer report).
//
//   TARGET_fuzz_slice SEED_DIR [--runs N] [--seed S] [--max-len L] [--dict FILE]
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

// The input being run, for the crash handler.
const std::string* g_current = nullptr;

extern "C" void on_crash(int signal) {
  const int fd = ::open("fuzz-slice-crash", O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0 && g_current != nullptr) {
    (void)!::write(fd, g_current->data(), g_current->size());
    ::close(fd);
  }
  const char message[] = "fuzz slice: crashed; the input is in ./fuzz-slice-crash\n";
  (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// libFuzzer's dictionary format: one "quoted token" per line, # comments, \\ \" and \xNN escapes.
std::vector<std::string> read_dict(const std::filesystem::path& path) {
  std::vector<std::string> tokens;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    const size_t open = line.find('"'), close = line.rfind('"');
    if (line.empty() || line[0] == '#' || open == std::string::npos || close <= open) continue;
    std::string token;
    for (size_t i = open + 1; i < close; ++i) {
      if (line[i] == '\\' && i + 1 < close) {
        if (line[i + 1] == 'x' && i + 3 < close) {
          token.push_back(static_cast<char>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
          i += 3;
        } else {
          token.push_back(line[++i]);
        }
      } else {
        token.push_back(line[i]);
      }
    }
    tokens.push_back(token);
  }
  return tokens;
}

void mutate(std::string& s, const std::vector<std::string>& seeds,
            const std::vector<std::string>& dict, SplitMix64& rng) {
  static const char* const kInteresting[] = {
      "\x00", "\xff", "\x7f", "\x80", "\xff\xff\xff\xff", "\x00\x00\x00\x80", "\xff\xff\xff\x7f"};
  switch (rng.below(dict.empty() ? 8 : 9)) {
    case 0:
      if (!s.empty()) s[rng.below(s.size())] ^= static_cast<char>(1u << rng.below(8));
      break;
    case 1:
      if (!s.empty()) s[rng.below(s.size())] = static_cast<char>(rng.next());
      break;
    case 2:
      s.insert(s.begin() + static_cast<std::ptrdiff_t>(rng.below(s.size() + 1)),
               static_cast<char>(rng.next()));
      break;
    case 3:
      if (!s.empty()) {
        const size_t at = rng.below(s.size());
        s.erase(at, 1 + rng.below(std::min<size_t>(16, s.size() - at)));
      }
      break;
    case 4:
      if (!s.empty()) {
        const size_t at = rng.below(s.size());
        const std::string piece = s.substr(at, 1 + rng.below(std::min<size_t>(64, s.size() - at)));
        s.insert(rng.below(s.size() + 1), piece);
      }
      break;
    case 5:
      s.resize(rng.below(s.size() + 1));
      break;
    case 6: {
      const char* value = kInteresting[rng.below(std::size(kInteresting))];
      const size_t length = std::max<size_t>(1, std::strlen(value));
      if (s.size() >= length) s.replace(rng.below(s.size() - length + 1), length, value, length);
      break;
    }
    case 7: {  // cross with another seed: a prefix of this one, a suffix of that one
      const std::string& other = seeds[rng.below(seeds.size())];
      s = s.substr(0, rng.below(s.size() + 1)) + other.substr(rng.below(other.size() + 1));
      break;
    }
    default:
      s.insert(rng.below(s.size() + 1), dict[rng.below(dict.size())]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string seed_dir;
  long runs = 1000;
  uint64_t seed = 1;
  size_t max_len = 8192;
  std::vector<std::string> dict;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--runs" && i + 1 < argc)
      runs = std::atol(argv[++i]);
    else if (arg == "--seed" && i + 1 < argc)
      seed = std::strtoull(argv[++i], nullptr, 10);
    else if (arg == "--max-len" && i + 1 < argc)
      max_len = std::strtoul(argv[++i], nullptr, 10);
    else if (arg == "--dict" && i + 1 < argc)
      dict = read_dict(argv[++i]);
    else if (seed_dir.empty() && arg[0] != '-')
      seed_dir = arg;
    else {
      std::fprintf(stderr, "usage: %s SEED_DIR [--runs N] [--seed S] [--max-len L] [--dict FILE]\n",
                   argv[0]);
      return 2;
    }
  }
  std::vector<std::filesystem::path> files;
  if (!seed_dir.empty() && std::filesystem::is_directory(seed_dir))
    for (const auto& entry : std::filesystem::directory_iterator(seed_dir))
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> seeds;
  for (const auto& file : files) seeds.push_back(read_file(file));
  if (seeds.empty()) {  // make_fuzz_seeds skips (exit 77) without the default model
    std::fprintf(stderr, "SKIP: %s: no seeds in '%s' (tests/fuzz/make_fuzz_seeds.cc writes them)\n",
                 argv[0], seed_dir.c_str());
    return 77;
  }
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  for (int s : {SIGSEGV, SIGABRT, SIGFPE, SIGBUS, SIGILL}) ::signal(s, on_crash);

  std::string input;
  g_current = &input;
  for (const std::string& s : seeds) {
    input = s;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  SplitMix64 rng{seed};
  for (long i = 0; i < runs; ++i) {
    input = seeds[rng.below(seeds.size())];
    for (size_t m = 1 + rng.below(4); m > 0; --m) mutate(input, seeds, dict, rng);
    if (input.size() > max_len) input.resize(max_len);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
  std::printf("%s: %zu seeds and %ld mutated inputs, no finding\n", argv[0], seeds.size(), runs);
  return 0;
}
