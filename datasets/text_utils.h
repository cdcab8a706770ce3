// Text helpers shared by the benchmark generators, with the Python behaviour they imitate named
// (docs/benchmarks.md §0): `str.split()`, `re.sub(r'\s+', ' ', s)`, `str.strip()`, NLTK Punkt-style
// sentences.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace kvb {

// Length in bytes of the Unicode whitespace character (Python's str.isspace()) starting at
// text[pos], or 0 when text[pos] does not start one. UTF-8 input.
size_t whitespace_length_at(std::string_view text, size_t pos);

// Python `text.split()`: split on runs of Unicode whitespace, dropping empty pieces.
std::vector<std::string> split_whitespace(std::string_view text);
// Python `re.sub(r'\s+', ' ', text)`.
std::string collapse_whitespace(std::string_view text);
// Python `text.strip()` (Unicode whitespace).
std::string strip(std::string_view text);
// Python `str.replace(old, new)` (every non-overlapping occurrence, left to right).
std::string replace_all(std::string text, std::string_view old_text, std::string_view new_text);
// Python `text.format(**fields)` for the named fields only, in one pass (substituted text is not
// rescanned); any other brace is kept as it is. The templates of RULER, LongBench and
// InfiniteBench.
std::string format_template(const std::string& text,
                            const std::map<std::string, std::string>& fields);

// Sentence split in the manner of NLTK's English Punkt model (`sent_tokenize`) on whitespace-
// collapsed text: a sentence ends at '.', '?' or '!' (plus closing quotes/brackets) followed by
// whitespace, except after a common abbreviation ("Mr.", "e.g.", "etc.") or a single-letter
// initial ("J."). Punkt's learned parameters are not reproduced byte for byte; the sentences join
// back (with single spaces) into the input, which is what the needle insertion relies on.
std::vector<std::string> split_sentences(std::string_view text);

// Whole file as bytes; InputError naming the file when it cannot be read.
std::string read_text_file(const std::filesystem::path& path);
// Non-empty lines with trailing whitespace removed (wonderwords' word-list reader).
std::vector<std::string> read_word_list(const std::filesystem::path& path);

}  // namespace kvb
