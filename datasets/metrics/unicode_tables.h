// Unicode character classes as CPython's `re` module sees them for str patterns (\w, \d). The
// official scorers are Python, so `\b`, `\w` and `\d` must match non-ASCII letters and digits the
// way Python does (docs/benchmarks.md §0). Tables are generated (gen_unicode_tables.py).
#pragma once

#include <span>

namespace kvb::unicode {

struct CodePointRange {
  char32_t first;
  char32_t last;  // inclusive
};

// Sorted, disjoint ranges.
std::span<const CodePointRange> python_word_ranges();
// Decimal digits (category Nd); every range is whole blocks of ten starting at a digit zero.
std::span<const CodePointRange> python_decimal_digit_ranges();

}  // namespace kvb::unicode
