#include "datasets/metrics/porter_stemmer.h"

#include <functional>
#include <map>
#include <vector>

namespace kvb {
namespace {

bool is_vowel(char c) { return c == 'a' || c == 'e' || c == 'i' || c == 'o' || c == 'u'; }

// NLTK's _is_consonant: a 'y' counts as a consonant or not depending on the parity of the run of
// 'y's ending at i and on the letter before that run.
bool is_consonant(const std::string& w, size_t i) {
  if (is_vowel(w[i])) return false;
  if (w[i] == 'y') {
    bool negate = false;
    while (i > 0 && w[i] == 'y') {
      negate = !negate;
      --i;
    }
    return (!is_vowel(w[i])) != negate;
  }
  return true;
}

// NLTK's _consonant_flags (used by the measure and the vowel test): 'y' is a consonant at the
// start and otherwise the opposite of the previous letter.
std::vector<bool> consonant_flags(const std::string& w) {
  std::vector<bool> flags;
  for (size_t i = 0; i < w.size(); ++i) {
    if (is_vowel(w[i]))
      flags.push_back(false);
    else if (w[i] == 'y')
      flags.push_back(i == 0 ? true : !flags[i - 1]);
    else
      flags.push_back(true);
  }
  return flags;
}

int measure(const std::string& stem) {
  const auto flags = consonant_flags(stem);
  int count = 0;
  for (size_t i = 1; i < flags.size(); ++i) count += !flags[i - 1] && flags[i];  // "vc" pairs
  return count;
}

bool positive_measure(const std::string& stem) { return measure(stem) > 0; }

bool contains_vowel(const std::string& stem) {
  for (bool consonant : consonant_flags(stem))
    if (!consonant) return true;
  return false;
}

bool ends_double_consonant(const std::string& w) {
  return w.size() >= 2 && w[w.size() - 1] == w[w.size() - 2] && is_consonant(w, w.size() - 1);
}

bool ends_cvc(const std::string& w) {
  const size_t n = w.size();
  if (n >= 3 && is_consonant(w, n - 3) && !is_consonant(w, n - 2) && is_consonant(w, n - 1) &&
      w[n - 1] != 'w' && w[n - 1] != 'x' && w[n - 1] != 'y')
    return true;
  return n == 2 && !is_consonant(w, 0) && is_consonant(w, 1);  // NLTK extension
}

bool ends_with(const std::string& w, const std::string& suffix) {
  return w.size() >= suffix.size() &&
         w.compare(w.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Rule {
  std::string suffix;  // "*d": ends in a double consonant (the last two letters are dropped)
  std::string replacement;
  std::function<bool(const std::string&)> condition;  // on the stem; empty = always
};

// _apply_rule_list: the first rule whose suffix matches decides (its condition failing keeps the
// word unchanged).
std::string apply_rules(const std::string& w, const std::vector<Rule>& rules) {
  for (const auto& rule : rules) {
    if (rule.suffix == "*d" && ends_double_consonant(w)) {
      const std::string stem = w.substr(0, w.size() - 2);
      return !rule.condition || rule.condition(stem) ? stem + rule.replacement : w;
    }
    if (ends_with(w, rule.suffix)) {
      const std::string stem = w.substr(0, w.size() - rule.suffix.size());
      return !rule.condition || rule.condition(stem) ? stem + rule.replacement : w;
    }
  }
  return w;
}

std::string replace_suffix(const std::string& w, size_t suffix_length,
                           const std::string& replacement) {
  return w.substr(0, w.size() - suffix_length) + replacement;
}

std::string step1a(const std::string& w) {
  if (ends_with(w, "ies") && w.size() == 4) return replace_suffix(w, 3, "ie");
  return apply_rules(w, {{"sses", "ss", {}}, {"ies", "i", {}}, {"ss", "ss", {}}, {"s", "", {}}});
}

std::string step1b(const std::string& w) {
  if (ends_with(w, "ied")) return replace_suffix(w, 3, w.size() == 4 ? "ie" : "i");
  if (ends_with(w, "eed")) {
    const std::string stem = replace_suffix(w, 3, "");
    return measure(stem) > 0 ? stem + "ee" : w;
  }
  std::string intermediate;
  bool found = false;
  for (const std::string suffix : {"ed", "ing"}) {
    if (ends_with(w, suffix)) {
      intermediate = replace_suffix(w, suffix.size(), "");
      if (contains_vowel(intermediate)) {
        found = true;
        break;
      }
    }
  }
  if (!found) return w;
  const char last = intermediate.back();
  return apply_rules(
      intermediate,
      {{"at", "ate", {}},
       {"bl", "ble", {}},
       {"iz", "ize", {}},
       {"*d", std::string(1, last),
        [last](const std::string&) { return last != 'l' && last != 's' && last != 'z'; }},
       {"", "e", [](const std::string& stem) { return measure(stem) == 1 && ends_cvc(stem); }}});
}

std::string step1c(const std::string& w) {
  return apply_rules(w, {{"y", "i", [](const std::string& stem) {
                            return stem.size() > 1 && is_consonant(stem, stem.size() - 1);
                          }}});
}

std::string step2(const std::string& w) {
  if (ends_with(w, "alli") && positive_measure(replace_suffix(w, 4, "")))
    return step2(replace_suffix(w, 4, "al"));
  const auto m = positive_measure;
  return apply_rules(w, {{"ational", "ate", m},
                         {"tional", "tion", m},
                         {"enci", "ence", m},
                         {"anci", "ance", m},
                         {"izer", "ize", m},
                         {"bli", "ble", m},
                         {"alli", "al", m},
                         {"entli", "ent", m},
                         {"eli", "e", m},
                         {"ousli", "ous", m},
                         {"ization", "ize", m},
                         {"ation", "ate", m},
                         {"ator", "ate", m},
                         {"alism", "al", m},
                         {"iveness", "ive", m},
                         {"fulness", "ful", m},
                         {"ousness", "ous", m},
                         {"aliti", "al", m},
                         {"iviti", "ive", m},
                         {"biliti", "ble", m},
                         {"fulli", "ful", m},
                         {"logi", "log", [&w](const std::string&) {
                            return positive_measure(w.substr(0, w.size() - 3));
                          }}});
}

std::string step3(const std::string& w) {
  const auto m = positive_measure;
  return apply_rules(w, {{"icate", "ic", m},
                         {"ative", "", m},
                         {"alize", "al", m},
                         {"iciti", "ic", m},
                         {"ical", "ic", m},
                         {"ful", "", m},
                         {"ness", "", m}});
}

std::string step4(const std::string& w) {
  const auto m = [](const std::string& stem) { return measure(stem) > 1; };
  const auto ion = [](const std::string& stem) {
    return measure(stem) > 1 && !stem.empty() && (stem.back() == 's' || stem.back() == 't');
  };
  return apply_rules(w, {{"al", "", m},
                         {"ance", "", m},
                         {"ence", "", m},
                         {"er", "", m},
                         {"ic", "", m},
                         {"able", "", m},
                         {"ible", "", m},
                         {"ant", "", m},
                         {"ement", "", m},
                         {"ment", "", m},
                         {"ent", "", m},
                         {"ion", "", ion},
                         {"ou", "", m},
                         {"ism", "", m},
                         {"ate", "", m},
                         {"iti", "", m},
                         {"ous", "", m},
                         {"ive", "", m},
                         {"ize", "", m}});
}

std::string step5a(const std::string& w) {
  if (!ends_with(w, "e")) return w;
  const std::string stem = replace_suffix(w, 1, "");
  if (measure(stem) > 1) return stem;
  if (measure(stem) == 1 && !ends_cvc(stem)) return stem;
  return w;
}

std::string step5b(const std::string& w) {
  return apply_rules(
      w,
      {{"ll", "l", [&w](const std::string&) { return measure(w.substr(0, w.size() - 1)) > 1; }}});
}

}  // namespace

std::string porter_stem(const std::string& word) {
  // NLTK_EXTENSIONS irregular forms.
  static const std::map<std::string, std::string> pool = {
      {"sky", "sky"},        {"skies", "sky"},        {"dying", "die"},
      {"lying", "lie"},      {"tying", "tie"},        {"news", "news"},
      {"innings", "inning"}, {"inning", "inning"},    {"outings", "outing"},
      {"outing", "outing"},  {"cannings", "canning"}, {"canning", "canning"},
      {"howe", "howe"},      {"proceed", "proceed"},  {"exceed", "exceed"},
      {"succeed", "succeed"}};
  std::string stem;
  for (char c : word) stem.push_back(c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : c);
  if (auto it = pool.find(stem); it != pool.end()) return it->second;
  if (word.size() <= 2) return stem;
  stem = step1a(stem);
  stem = step1b(stem);
  stem = step1c(stem);
  stem = step2(stem);
  stem = step3(stem);
  stem = step4(stem);
  stem = step5a(stem);
  stem = step5b(stem);
  return stem;
}

}  // namespace kvb
