// The Porter stemmer as NLTK 3.x runs it by default (PorterStemmer(), mode NLTK_EXTENSIONS), which
// Google's rouge_score uses with use_stemmer=True. KVCache-Factory's NIAH script stores
// RougeScorer(['rouge1', 'rougeL'], use_stemmer=True) F-measures (docs/benchmarks.md §2.3).
// Input is one lowercase ASCII token (rouge_score only stems [a-z0-9]+ tokens longer than 3).
#pragma once

#include <string>

namespace kvb {

std::string porter_stem(const std::string& word);

}  // namespace kvb
