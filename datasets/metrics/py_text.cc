#include "datasets/metrics/py_text.h"

#include <locale.h>
#include <wctype.h>

#include <algorithm>
#include <cstdlib>
#include <cwctype>

#include "datasets/metrics/unicode_tables.h"

namespace kvb::py {
namespace {

bool in_ranges(std::span<const unicode::CodePointRange> ranges, char32_t c) {
  auto it =
      std::upper_bound(ranges.begin(), ranges.end(), c,
                       [](char32_t v, const unicode::CodePointRange& r) { return v < r.first; });
  if (it == ranges.begin()) return false;
  --it;
  return c <= it->last;
}

// glibc's C.UTF-8 case table agrees with CPython 3.11's str.lower() on every code point except
// U+0130 (checked over all of Unicode when this was written); U+0130 is special-cased below.
locale_t utf8_ctype_locale() {
  static const locale_t locale = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(0));
  return locale;
}

}  // namespace

Text from_utf8(std::string_view s) {
  Text out;
  out.reserve(s.size());
  size_t i = 0;
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  while (i < s.size()) {
    const unsigned char b0 = byte(i);
    int extra = 0;
    char32_t c = 0;
    if (b0 < 0x80) {
      out.push_back(b0);
      ++i;
      continue;
    } else if ((b0 & 0xE0) == 0xC0) {
      extra = 1, c = b0 & 0x1F;
    } else if ((b0 & 0xF0) == 0xE0) {
      extra = 2, c = b0 & 0x0F;
    } else if ((b0 & 0xF8) == 0xF0) {
      extra = 3, c = b0 & 0x07;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = i + extra < s.size();  // the continuation bytes exist
    for (int k = 1; ok && k <= extra; ++k) {
      if ((byte(i + k) & 0xC0) != 0x80)
        ok = false;
      else
        c = (c << 6) | (byte(i + k) & 0x3F);
    }
    const char32_t min_value[] = {0, 0x80, 0x800, 0x10000};
    if (!ok || c < min_value[extra] || c > 0x10FFFF || (c >= 0xD800 && c < 0xE000)) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(c);
    i += extra + 1;
  }
  return out;
}

std::string to_utf8(TextView text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

bool is_space(char32_t c) {
  if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
         c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_word_char(char32_t c) {
  if (c < 0x80)
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
  return in_ranges(unicode::python_word_ranges(), c);
}

bool is_decimal_digit(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return in_ranges(unicode::python_decimal_digit_ranges(), c);
}

int decimal_digit_value(char32_t c) {
  if (c >= '0' && c <= '9') return static_cast<int>(c - '0');
  const auto ranges = unicode::python_decimal_digit_ranges();
  for (const auto& r : ranges)
    if (c >= r.first && c <= r.last) return static_cast<int>((c - r.first) % 10);
  return -1;
}

bool is_ascii_punctuation(char32_t c) {
  return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
         (c >= 0x7B && c <= 0x7E);
}

namespace {

// One case mapping as Python's str.lower/str.upper: ASCII letters [first, last] move by `shift`,
// `special` takes its full (multi-character) mapping `expansion`, other code points the C
// library's simple mapping in a UTF-8 locale (unchanged without one).
struct CaseMapping {
  char32_t first, last;
  int shift;
  char32_t special;
  const char32_t* expansion;
  wint_t (*simple)(wint_t, locale_t);
};

Text map_case(TextView text, const CaseMapping& mapping) {
  Text out;
  out.reserve(text.size());
  const locale_t locale = utf8_ctype_locale();
  for (char32_t c : text) {
    if (c < 0x80) {
      out.push_back(c >= mapping.first && c <= mapping.last ? c + mapping.shift : c);
    } else if (c == mapping.special) {
      out += mapping.expansion;
    } else {
      out.push_back(locale ? static_cast<char32_t>(mapping.simple(static_cast<wint_t>(c), locale))
                           : c);
    }
  }
  return out;
}

}  // namespace

Text lower(TextView text) {
  // LATIN CAPITAL LETTER I WITH DOT ABOVE -> "i" + COMBINING DOT ABOVE.
  return map_case(text, {U'A', U'Z', 32, 0x130, U"i\u0307", towlower_l});
}

Text upper(TextView text) {
  // LATIN SMALL LETTER SHARP S: full mapping "SS".
  return map_case(text, {U'a', U'z', -32, 0xDF, U"SS", towupper_l});
}

Text strip(TextView text) {
  size_t b = 0, e = text.size();
  while (b < e && is_space(text[b])) ++b;
  while (e > b && is_space(text[e - 1])) --e;
  return Text(text.substr(b, e - b));
}

Text lstrip_chars(TextView text, TextView chars) {
  size_t b = 0;
  while (b < text.size() && chars.find(text[b]) != TextView::npos) ++b;
  return Text(text.substr(b));
}

std::vector<Text> split_whitespace(TextView text) {
  std::vector<Text> out;
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_space(text[i])) ++i;
    if (i == text.size()) break;
    size_t j = i;
    while (j < text.size() && !is_space(text[j])) ++j;
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<Text> split(TextView text, TextView sep) {
  std::vector<Text> out;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(sep, start);
    if (pos == TextView::npos) break;
    out.emplace_back(text.substr(start, pos - start));
    start = pos + sep.size();
  }
  out.emplace_back(text.substr(start));
  return out;
}

Text join(const std::vector<Text>& parts, TextView sep) {
  Text out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

Text replace_all(TextView text, TextView from, TextView to) {
  if (from.empty()) return Text(text);  // the scorers never replace an empty string
  Text out;
  size_t start = 0;
  while (true) {
    const size_t pos = text.find(from, start);
    if (pos == TextView::npos) break;
    out += text.substr(start, pos - start);
    out += to;
    start = pos + from.size();
  }
  out += text.substr(start);
  return out;
}

bool contains(TextView haystack, TextView needle) {
  return haystack.find(needle) != TextView::npos;
}

bool starts_with(TextView text, TextView prefix) { return text.substr(0, prefix.size()) == prefix; }

std::vector<Text> find_digit_runs(TextView text) {
  std::vector<Text> out;
  size_t i = 0;
  while (i < text.size()) {
    if (!is_decimal_digit(text[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < text.size() && is_decimal_digit(text[j])) ++j;
    out.emplace_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

std::optional<long long> parse_int(TextView text) {
  const Text s = strip(text);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == U'+' || s[i] == U'-')) negative = s[i++] == U'-';
  if (i == s.size()) return std::nullopt;
  unsigned long long value = 0;
  bool previous_was_digit = false;
  for (; i < s.size(); ++i) {
    if (s[i] == U'_') {
      if (!previous_was_digit || i + 1 == s.size()) return std::nullopt;
      previous_was_digit = false;
      continue;
    }
    const int d = decimal_digit_value(s[i]);
    if (d < 0) return std::nullopt;
    if (value > (~0ULL >> 1) / 10) return std::nullopt;
    value = value * 10 + static_cast<unsigned>(d);
    previous_was_digit = true;
  }
  if (!previous_was_digit || value > static_cast<unsigned long long>(~0ULL >> 1))
    return std::nullopt;
  return negative ? -static_cast<long long>(value) : static_cast<long long>(value);
}

std::optional<double> parse_simple_float(TextView text) {
  std::string ascii;
  for (char32_t c : text) {
    if (c == U'.') {
      ascii.push_back('.');
      continue;
    }
    const int d = decimal_digit_value(c);
    if (d < 0) return std::nullopt;
    ascii.push_back(static_cast<char>('0' + d));
  }
  if (ascii.empty()) return std::nullopt;
  char* end = nullptr;
  const double value = std::strtod(ascii.c_str(), &end);
  if (end != ascii.c_str() + ascii.size()) return std::nullopt;
  return value;
}

}  // namespace kvb::py
