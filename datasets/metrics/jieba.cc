#include "datasets/metrics/jieba.h"

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/errors.h"

namespace kvb {
namespace {

constexpr double kMinFloat = -3.14e100;  // finalseg.MIN_FLOAT
constexpr char kStateLetters[4] = {'B', 'M', 'E', 'S'};
enum State { B = 0, M = 1, E = 2, S = 3 };
// finalseg.PrevStatus: the states that may precede each state.
constexpr State kPrevious[4][2] = {{E, S}, {M, B}, {B, M}, {S, E}};

int state_index(char letter) {
  for (int i = 0; i < 4; ++i)
    if (kStateLetters[i] == letter) return i;
  return -1;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw InputError("Chinese metrics are unsupported here: cannot read jieba's " + path.string() +
                     " (install Debian's python3-jieba, see harness/scripts/setup.sh, or set "
                     "KVB_JIEBA_DIR to a jieba 0.42.1 package folder)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A reader for the Python dict literals in finalseg/prob_*.py: `P={'B': {'\u4e00': -3.65, ...}}`.
class PyLiteralReader {
 public:
  PyLiteralReader(std::string text, std::string name)
      : text_(std::move(text)), name_(std::move(name)) {
    const size_t start = text_.find("P={");
    if (start == std::string::npos) fail("no 'P={'");
    pos_ = start + 2;
  }

  // Calls on_entry(key, reader) for each key of the dict at the cursor; the callback reads the
  // value.
  template <typename F>
  void read_dict(F&& on_entry) {
    expect('{');
    skip_space();
    if (peek() == '}') return void(++pos_);
    while (true) {
      const py::Text key = read_string();
      expect(':');
      on_entry(key);
      skip_space();
      if (peek() == ',') {
        ++pos_;
        skip_space();
        if (peek() == '}') return void(++pos_);
        continue;
      }
      expect('}');
      return;
    }
  }

  double read_number() {
    skip_space();
    const char* begin = text_.c_str() + pos_;
    char* end = nullptr;
    const double value = std::strtod(begin, &end);
    if (end == begin) fail("expected a number");
    pos_ += static_cast<size_t>(end - begin);
    return value;
  }

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("malformed jieba table " + name_ + " at byte " + std::to_string(pos_) + ": " +
                      what);
  }

 private:
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  void expect(char c) {
    skip_space();
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  py::Text read_string() {
    skip_space();
    const char quote = peek();
    if (quote != '\'' && quote != '"') fail("expected a string");
    ++pos_;
    std::string raw;
    py::Text out;
    const auto flush = [&] {
      out += py::from_utf8(raw);
      raw.clear();
    };
    while (pos_ < text_.size() && text_[pos_] != quote) {
      if (text_[pos_] != '\\') {
        raw.push_back(text_[pos_++]);
        continue;
      }
      flush();
      const char kind = pos_ + 1 < text_.size() ? text_[pos_ + 1] : '\0';
      if (kind == 'u' || kind == 'U' || kind == 'x') {
        const size_t digits = kind == 'u' ? 4 : kind == 'U' ? 8 : 2;
        if (pos_ + 2 + digits > text_.size()) fail("short escape");
        out.push_back(
            static_cast<char32_t>(std::stoul(text_.substr(pos_ + 2, digits), nullptr, 16)));
        pos_ += 2 + digits;
      } else if (kind == '\\' || kind == '\'' || kind == '"') {
        out.push_back(static_cast<char32_t>(kind));
        pos_ += 2;
      } else {
        fail("unsupported escape");
      }
    }
    if (pos_ >= text_.size()) fail("unterminated string");
    ++pos_;
    flush();
    return out;
  }

  std::string text_;
  std::string name_;
  size_t pos_ = 0;
};

int state_of_key(const py::Text& key, PyLiteralReader& reader) {
  const int s = key.size() == 1 ? state_index(static_cast<char>(key[0])) : -1;
  if (s < 0) reader.fail("unknown HMM state");
  return s;
}

// jieba's re_han_default character class.
bool is_han_default(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FD5) || (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') ||
         (c >= U'0' && c <= U'9') || c == U'+' || c == U'#' || c == U'&' || c == U'.' ||
         c == U'_' || c == U'%' || c == U'-';
}

bool is_han(char32_t c) { return c >= 0x4E00 && c <= 0x9FD5; }  // finalseg.re_han
bool is_ascii_alnum(char32_t c) {
  return (c >= U'a' && c <= U'z') || (c >= U'A' && c <= U'Z') || (c >= U'0' && c <= U'9');
}

// finalseg.re_skip `[a-zA-Z0-9]+(?:\.\d+)?%?` matched at `pos` (which holds an ASCII alnum);
// returns the end of the match.
size_t match_skip_token(py::TextView text, size_t pos) {
  size_t end = pos;
  while (end < text.size() && is_ascii_alnum(text[end])) ++end;
  if (end + 1 < text.size() && text[end] == U'.' && py::is_decimal_digit(text[end + 1])) {
    end += 1;
    while (end < text.size() && py::is_decimal_digit(text[end])) ++end;
  }
  if (end < text.size() && text[end] == U'%') ++end;
  return end;
}

}  // namespace

JiebaSegmenter::JiebaSegmenter(const std::string& jieba_dir) {
  const std::filesystem::path dir(jieba_dir);
  // dict.txt: "word freq [tag]" per line; the prefixes of every word are entered with frequency 0
  // (jieba's gen_pfdict); a repeated word keeps its last frequency while the total counts both.
  const std::filesystem::path dict_path = dir / "dict.txt";
  std::ifstream dict(dict_path, std::ios::binary);
  if (!dict)
    throw InputError(
        "Chinese metrics are unsupported here: jieba's dictionary " + dict_path.string() +
        " is missing (install Debian's python3-jieba, see harness/scripts/setup.sh, or set "
        "KVB_JIEBA_DIR to a jieba 0.42.1 package folder)");
  long long total = 0;
  std::string line;
  size_t line_number = 0;
  frequencies_.reserve(600000);
  while (std::getline(dict, line)) {
    ++line_number;
    size_t b = 0, e = line.size();
    while (b < e && std::isspace(static_cast<unsigned char>(line[b]))) ++b;
    while (e > b && std::isspace(static_cast<unsigned char>(line[e - 1]))) --e;
    const std::string stripped = line.substr(b, e - b);
    const size_t space = stripped.find(' ');
    const size_t space2 =
        space == std::string::npos ? std::string::npos : stripped.find(' ', space + 1);
    char* end = nullptr;
    const std::string freq_text =
        space == std::string::npos
            ? ""
            : stripped.substr(space + 1,
                              space2 == std::string::npos ? std::string::npos : space2 - space - 1);
    const long long freq = std::strtoll(freq_text.c_str(), &end, 10);
    if (freq_text.empty() || *end != '\0')
      throw FormatError("invalid jieba dictionary entry in " + dict_path.string() + " at line " +
                        std::to_string(line_number));
    const py::Text word = py::from_utf8(stripped.substr(0, space));
    frequencies_[word] = freq;
    total += freq;
    for (size_t k = 1; k < word.size(); ++k) frequencies_.try_emplace(word.substr(0, k), 0);
  }
  log_total_ = std::log(static_cast<double>(total));

  const auto load = [&](const char* file, auto&& on_top_level) {
    PyLiteralReader reader(read_file(dir / "finalseg" / file), (dir / "finalseg" / file).string());
    reader.read_dict([&](const py::Text& key) { on_top_level(state_of_key(key, reader), reader); });
  };
  load("prob_start.py", [&](int s, PyLiteralReader& r) { start_[s] = r.read_number(); });
  for (auto& row : transition_) row.fill(kMinFloat);
  load("prob_trans.py", [&](int from, PyLiteralReader& r) {
    r.read_dict(
        [&](const py::Text& key) { transition_[from][state_of_key(key, r)] = r.read_number(); });
  });
  load("prob_emit.py", [&](int s, PyLiteralReader& r) {
    r.read_dict([&](const py::Text& key) {
      if (key.size() != 1) r.fail("emission key is not one character");
      emission_[s][key[0]] = r.read_number();
    });
  });
}

std::string JiebaSegmenter::default_dir() {
  if (const char* env = std::getenv("KVB_JIEBA_DIR"); env && *env) return env;
  return "/usr/lib/python3/dist-packages/jieba";
}

const JiebaSegmenter& JiebaSegmenter::shared() {
  static const JiebaSegmenter segmenter(default_dir());
  return segmenter;
}

long long JiebaSegmenter::frequency(py::TextView word, bool* found) const {
  auto it = frequencies_.find(py::Text(word));
  *found = it != frequencies_.end();
  return *found ? it->second : 0;
}

std::vector<py::Text> JiebaSegmenter::cut(py::TextView sentence) const {
  std::vector<py::Text> out;
  size_t i = 0;
  while (i < sentence.size()) {
    size_t j = i;
    if (is_han_default(sentence[i])) {
      while (j < sentence.size() && is_han_default(sentence[j])) ++j;
      cut_dag(sentence.substr(i, j - i), out);
    } else {
      // re_skip_default "(\r\n|\s)" splits the block; everything is yielded per character except
      // "\r\n", which stays one token.
      while (j < sentence.size() && !is_han_default(sentence[j])) {
        if (sentence[j] == U'\r' && j + 1 < sentence.size() && sentence[j + 1] == U'\n') {
          out.emplace_back(U"\r\n");
          j += 2;
        } else {
          out.emplace_back(1, sentence[j++]);
        }
      }
    }
    i = j;
  }
  return out;
}

void JiebaSegmenter::cut_dag(py::TextView block, std::vector<py::Text>& out) const {
  const size_t n = block.size();
  // get_DAG: for each start k, the ends i of dictionary words block[k..i] with non-zero frequency.
  std::vector<std::vector<size_t>> dag(n);
  for (size_t k = 0; k < n; ++k) {
    size_t i = k;
    bool found = false;
    long long freq = frequency(block.substr(k, 1), &found);
    while (i < n && found) {
      if (freq) dag[k].push_back(i);
      ++i;
      if (i < n) freq = frequency(block.substr(k, i + 1 - k), &found);
    }
    if (dag[k].empty()) dag[k].push_back(k);
  }
  // calc: best route from the right; ties go to the larger end index (Python tuple max).
  std::vector<std::pair<double, size_t>> route(n + 1, {0.0, 0});
  for (size_t idx = n; idx-- > 0;) {
    bool first = true;
    for (size_t x : dag[idx]) {
      bool found = false;
      const long long freq = frequency(block.substr(idx, x + 1 - idx), &found);
      const double value =
          std::log(static_cast<double>(freq ? freq : 1)) - log_total_ + route[x + 1].first;
      if (first || value > route[idx].first || (value == route[idx].first && x > route[idx].second))
        route[idx] = {value, x};
      first = false;
    }
  }
  // __cut_DAG: single characters are buffered; a buffer that is not a dictionary word goes
  // through the HMM, one that is a word is yielded per character.
  py::Text buffer;
  const auto flush = [&] {
    if (buffer.empty()) return;
    bool found = false;
    if (buffer.size() == 1) {
      out.push_back(buffer);
    } else if (!frequency(buffer, &found)) {
      cut_hmm(buffer, out);
    } else {
      for (char32_t c : buffer) out.emplace_back(1, c);
    }
    buffer.clear();
  };
  size_t x = 0;
  while (x < n) {
    const size_t y = route[x].second + 1;
    if (y - x == 1) {
      buffer += block.substr(x, 1);
    } else {
      flush();
      out.emplace_back(block.substr(x, y - x));
    }
    x = y;
  }
  flush();
}

void JiebaSegmenter::cut_hmm(py::TextView text, std::vector<py::Text>& out) const {
  // finalseg.cut: runs of [\u4E00-\u9FD5] go through Viterbi; the rest is split by
  // ([a-zA-Z0-9]+(?:\.\d+)?%?) and every non-empty piece is yielded.
  size_t i = 0;
  while (i < text.size()) {
    size_t j = i;
    if (is_han(text[i])) {
      while (j < text.size() && is_han(text[j])) ++j;
      viterbi_words(text.substr(i, j - i), out);
    } else {
      while (j < text.size() && !is_han(text[j])) {
        if (is_ascii_alnum(text[j])) {
          const size_t end = match_skip_token(text, j);
          out.emplace_back(text.substr(j, end - j));
          j = end;
        } else {
          size_t k = j;
          while (k < text.size() && !is_han(text[k]) && !is_ascii_alnum(text[k])) ++k;
          out.emplace_back(text.substr(j, k - j));
          j = k;
        }
      }
    }
    i = j;
  }
}

void JiebaSegmenter::viterbi_words(py::TextView han, std::vector<py::Text>& out) const {
  const size_t n = han.size();
  const auto emit = [&](int state, char32_t c) {
    auto it = emission_[state].find(c);
    return it == emission_[state].end() ? kMinFloat : it->second;
  };
  std::vector<std::array<double, 4>> probability(n);
  std::vector<std::array<int, 4>> back(n);
  for (int s = 0; s < 4; ++s) probability[0][s] = start_[s] + emit(s, han[0]);
  for (size_t t = 1; t < n; ++t) {
    for (int s = 0; s < 4; ++s) {
      const double em = emit(s, han[t]);
      double best = 0;
      int best_state = -1;
      for (State prev : kPrevious[s]) {
        const double value = probability[t - 1][prev] + transition_[prev][s] + em;
        // max over (value, state letter) tuples.
        if (best_state < 0 || value > best ||
            (value == best && kStateLetters[prev] > kStateLetters[best_state])) {
          best = value;
          best_state = prev;
        }
      }
      probability[t][s] = best;
      back[t][s] = best_state;
    }
  }
  int state = probability[n - 1][E] > probability[n - 1][S] ||
                      (probability[n - 1][E] == probability[n - 1][S] && 'E' > 'S')
                  ? E
                  : S;
  std::vector<int> states(n);
  for (size_t t = n; t-- > 0;) {
    states[t] = state;
    if (t > 0) state = back[t][state];
  }
  size_t begin = 0, next = 0;
  for (size_t i = 0; i < n; ++i) {
    if (states[i] == B) {
      begin = i;
    } else if (states[i] == E) {
      out.emplace_back(han.substr(begin, i + 1 - begin));
      next = i + 1;
    } else if (states[i] == S) {
      out.emplace_back(1, han[i]);
      next = i + 1;
    }
  }
  if (next < n) out.emplace_back(han.substr(next));
}

}  // namespace kvb
