#include "datasets/text_utils.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <fstream>
#include <sstream>

#include "common/errors.h"

namespace kvb {

size_t whitespace_length_at(std::string_view text, size_t pos) {
  const auto byte = [&](size_t i) -> unsigned {
    return i < text.size() ? static_cast<unsigned char>(text[i]) : 0U;
  };
  const unsigned c0 = byte(pos);
  if (c0 == ' ' || (c0 >= 0x09 && c0 <= 0x0d) || (c0 >= 0x1c && c0 <= 0x1f)) return 1;
  if (c0 == 0xc2 && (byte(pos + 1) == 0x85 || byte(pos + 1) == 0xa0)) return 2;  // U+0085, U+00A0
  if (c0 == 0xe1 && byte(pos + 1) == 0x9a && byte(pos + 2) == 0x80) return 3;    // U+1680
  if (c0 == 0xe2 && byte(pos + 1) == 0x80) {
    const unsigned c2 = byte(pos + 2);
    if ((c2 >= 0x80 && c2 <= 0x8a) || c2 == 0xa8 || c2 == 0xa9 || c2 == 0xaf) return 3;
  }
  if (c0 == 0xe2 && byte(pos + 1) == 0x81 && byte(pos + 2) == 0x9f) return 3;  // U+205F
  if (c0 == 0xe3 && byte(pos + 1) == 0x80 && byte(pos + 2) == 0x80) return 3;  // U+3000
  return 0;
}

std::vector<std::string> split_whitespace(std::string_view text) {
  std::vector<std::string> pieces;
  std::string current;
  for (size_t i = 0; i < text.size();) {
    const size_t ws = whitespace_length_at(text, i);
    if (ws) {
      if (!current.empty()) pieces.push_back(std::move(current));
      current.clear();
      i += ws;
    } else {
      current.push_back(text[i++]);
    }
  }
  if (!current.empty()) pieces.push_back(std::move(current));
  return pieces;
}

std::string collapse_whitespace(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  bool in_run = false;
  for (size_t i = 0; i < text.size();) {
    const size_t ws = whitespace_length_at(text, i);
    if (ws) {
      if (!in_run) out.push_back(' ');
      in_run = true;
      i += ws;
    } else {
      in_run = false;
      out.push_back(text[i++]);
    }
  }
  return out;
}

std::string strip(std::string_view text) {
  size_t begin = 0;
  while (begin < text.size()) {
    const size_t ws = whitespace_length_at(text, begin);
    if (!ws) break;
    begin += ws;
  }
  size_t end = begin;
  for (size_t i = begin; i < text.size();) {
    const size_t ws = whitespace_length_at(text, i);
    if (ws) {
      i += ws;
    } else {
      end = ++i;
      while (i < text.size() && (static_cast<unsigned char>(text[i]) & 0xc0) == 0x80) end = ++i;
    }
  }
  return std::string(text.substr(begin, end - begin));
}

std::string replace_all(std::string text, std::string_view old_text, std::string_view new_text) {
  if (old_text.empty()) return text;
  std::string out;
  size_t pos = 0;
  while (true) {
    const size_t hit = text.find(old_text, pos);
    if (hit == std::string::npos) break;
    out.append(text, pos, hit - pos);
    out += new_text;
    pos = hit + old_text.size();
  }
  out.append(text, pos, std::string::npos);
  return out;
}

namespace {

// Abbreviations after which Punkt's English model does not end a sentence (lowercase, without the
// final period). A short list of the common ones; see split_sentences().
bool is_abbreviation(std::string word) {
  static const std::array<const char*, 40> kAbbreviations = {
      "mr",  "mrs", "ms",  "dr",  "prof", "sr",   "jr",     "st",  "vs",  "etc",
      "e.g", "i.e", "inc", "ltd", "co",   "corp", "jan",    "feb", "mar", "apr",
      "jun", "jul", "aug", "sep", "sept", "oct",  "nov",    "dec", "u.s", "u.k",
      "a.m", "p.m", "fig", "no",  "vol",  "ed",   "approx", "cf",  "al",  "ph.d"};
  std::transform(word.begin(), word.end(), word.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  while (!word.empty() && (word.front() == '(' || word.front() == '"' || word.front() == '\''))
    word.erase(word.begin());
  if (word.size() == 1 && std::isalpha(static_cast<unsigned char>(word[0]))) return true;  // "J."
  for (const char* abbreviation : kAbbreviations)
    if (word == abbreviation) return true;
  return false;
}

bool is_closing(char c) { return c == '"' || c == '\'' || c == ')' || c == ']'; }

}  // namespace

std::string format_template(const std::string& text,
                            const std::map<std::string, std::string>& fields) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '{') {
      const size_t close = text.find('}', i);
      if (close != std::string::npos) {
        auto it = fields.find(text.substr(i + 1, close - i - 1));
        if (it != fields.end()) {
          out += it->second;
          i = close + 1;
          continue;
        }
      }
    }
    out.push_back(text[i++]);
  }
  return out;
}

std::vector<std::string> split_sentences(std::string_view text) {
  std::vector<std::string> sentences;
  const std::string stripped = strip(text);
  size_t start = 0;
  size_t word_start = 0;
  for (size_t i = 0; i < stripped.size(); ++i) {
    const char c = stripped[i];
    if (c == ' ') {
      word_start = i + 1;
      continue;
    }
    if (c != '.' && c != '?' && c != '!') continue;
    size_t end = i + 1;
    while (end < stripped.size() && (is_closing(stripped[end]) || stripped[end] == '.' ||
                                     stripped[end] == '?' || stripped[end] == '!'))
      ++end;
    if (end >= stripped.size() || stripped[end] != ' ') continue;
    if (c == '.' && end == i + 1 && is_abbreviation(stripped.substr(word_start, i - word_start)))
      continue;
    sentences.push_back(stripped.substr(start, end - start));
    start = end + 1;
    i = end;
    word_start = start;
  }
  if (start < stripped.size()) sentences.push_back(stripped.substr(start));
  return sentences;
}

std::string read_text_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot read " + path.string());
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::vector<std::string> read_word_list(const std::filesystem::path& path) {
  std::vector<std::string> words;
  std::istringstream lines(read_text_file(path));
  for (std::string line; std::getline(lines, line);) {
    while (!line.empty() && std::isspace(static_cast<unsigned char>(line.back()))) line.pop_back();
    if (!line.empty()) words.push_back(line);
  }
  return words;
}

}  // namespace kvb
