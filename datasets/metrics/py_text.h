// Python `str` behaviour that the official scorers rely on (docs/benchmarks.md §0), over UTF-32
// strings so that indexing and lengths count code points as Python does.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace kvb::py {

using Text = std::u32string;
using TextView = std::u32string_view;

// UTF-8 <-> code points. Invalid UTF-8 bytes decode to U+FFFD (as errors="replace").
Text from_utf8(std::string_view utf8);
std::string to_utf8(TextView text);

bool is_space(char32_t c);              // str.isspace()
bool is_word_char(char32_t c);          // re's \w
bool is_decimal_digit(char32_t c);      // re's \d (Unicode Nd)
int decimal_digit_value(char32_t c);    // 0-9 for is_decimal_digit(c), else -1
bool is_ascii_punctuation(char32_t c);  // string.punctuation

Text lower(TextView text);  // str.lower() (full mapping of U+0130; no final-sigma rule)
Text upper(TextView text);  // str.upper() (simple case mapping, plus "ß" -> "SS")
Text strip(TextView text);  // str.strip()
Text lstrip_chars(TextView text, TextView chars);      // str.lstrip(chars)
std::vector<Text> split_whitespace(TextView text);     // str.split()
std::vector<Text> split(TextView text, TextView sep);  // str.split(sep), keeps empty pieces
Text join(const std::vector<Text>& parts, TextView sep);
Text replace_all(TextView text, TextView from, TextView to);  // str.replace
bool contains(TextView haystack, TextView needle);            // `needle in haystack`
bool starts_with(TextView text, TextView prefix);
// All maximal runs of \d (re.findall(r"\d+")).
std::vector<Text> find_digit_runs(TextView text);
// int(s) for a str: optional surrounding whitespace and sign, Unicode digits, single underscores
// between digits. nullopt where Python raises ValueError (or the value exceeds 64 bits).
std::optional<long long> parse_int(TextView text);
// float(s) for strings made of digits and at most one '.', as produced by the scorers' regexes.
std::optional<double> parse_simple_float(TextView text);

// Convenience for UTF-8 callers.
inline Text T(std::string_view utf8) { return from_utf8(utf8); }

}  // namespace kvb::py
