#include "datasets/infinitebench/scorers.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/metrics/py_text.h"
#include "datasets/metrics/qa_f1.h"
#include "datasets/metrics/rouge.h"

namespace kvb {
namespace {

using py::Text;
using py::TextView;

[[noreturn]] void bad_label(const std::string& task, const nlohmann::json& label,
                            const std::string& want) {
  throw InputError("InfiniteBench " + task + ": label " + label.dump() + " is not " + want);
}

// A label that should be one string: a string, or the first element of a list of strings.
Text single_string_label(const std::string& task, const nlohmann::json& label) {
  if (label.is_string()) return py::T(label.get<std::string>());
  if (label.is_array() && !label.empty() && label[0].is_string())
    return py::T(label[0].get<std::string>());
  if (label.is_number_integer()) return py::T(std::to_string(label.get<long long>()));
  bad_label(task, label, "a string or a list of strings");
}

std::vector<Text> string_list_label(const std::string& task, const nlohmann::json& label) {
  if (label.is_string()) return {py::T(label.get<std::string>())};
  if (!label.is_array()) bad_label(task, label, "a list of strings");
  std::vector<Text> out;
  for (const auto& item : label) {
    if (!item.is_string()) bad_label(task, label, "a list of strings");
    out.push_back(py::T(item.get<std::string>()));
  }
  return out;
}

Text replace_chars_with_space(TextView text, TextView chars) {
  Text out(text);
  for (char32_t& c : out)
    if (chars.find(c) != TextView::npos) c = U' ';
  return out;
}

Text collapse_double_spaces(Text text) {
  while (py::contains(text, U"  ")) text = py::replace_all(text, U"  ", U" ");
  return text;
}

// first_int_match: the first non-empty piece of re.split("[^0-9]", prediction).
Text first_ascii_digit_run(TextView text) {
  size_t i = 0;
  while (i < text.size() && !(text[i] >= U'0' && text[i] <= U'9')) ++i;
  size_t j = i;
  while (j < text.size() && text[j] >= U'0' && text[j] <= U'9') ++j;
  return Text(text.substr(i, j - i));
}

// The first match of r"\d+\.\d+|\d+" (Unicode digits).
std::optional<Text> first_number(TextView text) {
  for (size_t i = 0; i < text.size(); ++i) {
    if (!py::is_decimal_digit(text[i])) continue;
    size_t j = i;
    while (j < text.size() && py::is_decimal_digit(text[j])) ++j;
    if (j + 1 < text.size() && text[j] == U'.' && py::is_decimal_digit(text[j + 1])) {
      size_t k = j + 1;
      while (k < text.size() && py::is_decimal_digit(text[k])) ++k;
      return Text(text.substr(i, k - i));
    }
    return Text(text.substr(i, j - i));
  }
  return std::nullopt;
}

constexpr TextView kRetrievalSeparators = U"\n:\"'.,?!{}";

bool score_retrieve_digits(const std::string& task, TextView pred, const nlohmann::json& label) {
  return single_string_label(task, label) == first_ascii_digit_run(pred);
}

bool score_kv_retrieval(TextView pred, const nlohmann::json& label) {
  const Text wanted = single_string_label("kv_retrieval", label);
  const auto words = py::split_whitespace(replace_chars_with_space(pred, kRetrievalSeparators));
  return std::find(words.begin(), words.end(), wanted) != words.end();
}

bool score_code_run(TextView pred, const nlohmann::json& label) {
  long long wanted = 0;
  const nlohmann::json& value = label.is_array() && !label.empty() ? label[0] : label;
  if (value.is_number_integer()) {
    wanted = value.get<long long>();
  } else if (value.is_string()) {
    const auto parsed = py::parse_int(py::T(value.get<std::string>()));
    if (!parsed) bad_label("code_run", label, "an integer");
    wanted = *parsed;
  } else {
    bad_label("code_run", label, "an integer");
  }
  const auto words = py::split_whitespace(replace_chars_with_space(py::strip(pred), U"\n.`'\":"));
  if (words.empty()) return false;
  const auto parsed = py::parse_int(words.back());
  return parsed && *parsed == wanted;
}

bool score_code_debug(TextView pred, const nlohmann::json& label) {
  if (!label.is_array() || label.size() < 2 || !label[0].is_string() || !label[1].is_string())
    bad_label("code_debug", label, "[function name, option letter]");
  const Text function_name = py::T(label[0].get<std::string>());
  const Text letter = py::T(label[1].get<std::string>());
  const Text head(pred.substr(0, 2));
  if (head == letter + U"." || head == letter + U":") return true;
  Text text = py::strip(pred);
  for (TextView removed : {U"\n", U"`", U"'", U"\"", U"-", U"*", U"Option", U"option"})
    text = py::replace_all(text, removed, U" ");
  text = collapse_double_spaces(std::move(text));
  // "correct option is:" (listed last in some versions) can never be reached: "is:" matches first.
  for (TextView prefix : {U"answer is:", U"is:", U"answer:"}) {
    const size_t idx = text.find(prefix);
    if (idx == Text::npos) continue;
    if (text.size() < idx + prefix.size() + 1) return false;
    const Text after = text.substr(idx + prefix.size() + 1);
    return py::starts_with(after, letter) || py::starts_with(after, function_name);
  }
  return false;
}

bool score_math_find(TextView pred, const nlohmann::json& raw_label) {
  nlohmann::json label = raw_label.is_array() && !raw_label.empty() ? raw_label[0] : raw_label;
  if (label.is_string()) {  // data that went through HF `datasets` with string features
    const std::string s = label.get<std::string>();
    const auto value = py::parse_simple_float(py::T(s));
    if (!value) bad_label("math_find", raw_label, "a number");
    label = s.find('.') != std::string::npos ? nlohmann::json(*value)
                                             : nlohmann::json(static_cast<long long>(*value));
  }
  const auto match = first_number(pred);
  if (!match) return false;
  if (label.is_number_integer()) {
    if (py::contains(*match, U".")) return false;  // int("1.5") raises ValueError in Python
    const auto value = py::parse_int(*match);
    return value && *value == label.get<long long>();
  }
  if (label.is_number_float()) {
    const auto value = py::parse_simple_float(*match);
    return value && *value == label.get<double>();
  }
  bad_label("math_find", raw_label, "an int or a float");
}

bool score_longdialogue(TextView pred, const nlohmann::json& label) {
  // label[0]: the first name of a list, or (as Python indexing does) the first character of a
  // string.
  Text wanted;
  if (label.is_array() && !label.empty() && label[0].is_string()) {
    wanted = py::T(label[0].get<std::string>());
  } else if (label.is_string() && !label.get<std::string>().empty()) {
    wanted = py::T(label.get<std::string>()).substr(0, 1);
  } else {
    bad_label("longdialogue_qa_eng", label, "a non-empty list of names");
  }
  const auto words = py::split_whitespace(replace_chars_with_space(pred, kRetrievalSeparators));
  for (const auto& word : words)
    if (py::upper(word) == wanted) return true;
  return false;
}

bool score_choice(TextView raw_pred, const nlohmann::json& label) {
  const std::vector<Text> labels = string_list_label("longbook_choice_eng", label);
  const auto in_labels = [&](TextView s) {
    return std::find(labels.begin(), labels.end(), Text(s)) != labels.end();
  };
  const Text pred = py::strip(raw_pred);
  if (pred.empty()) return false;
  if (TextView(U"ABCD").find(pred[0]) != TextView::npos) return in_labels(pred.substr(0, 1));
  if (in_labels(pred)) return true;
  Text text = collapse_double_spaces(replace_chars_with_space(pred, U"\n\"'.,?!{}"));
  for (TextView prefix : {U"answer is:", U"answer:", U"answer is", U"option is"}) {
    const size_t idx = text.find(prefix);
    if (idx == Text::npos) continue;
    if (text.size() < idx + prefix.size() + 1) return false;
    const Text after = text.substr(idx + prefix.size() + 1);
    for (const auto& l : labels)
      if (py::starts_with(after, l)) return true;
    return false;
  }
  for (const auto& word : py::split_whitespace(text))
    if (py::contains(U"ABCD", word)) return in_labels(word);
  return false;
}

double score_math_calc(TextView pred, const nlohmann::json& label, const std::string& model_name) {
  if (!label.is_array() || label.empty())
    bad_label("math_calc", label, "a non-empty list of integers");
  std::vector<long long> numbers;
  size_t i = 0;
  while (i < pred.size()) {
    if (!(pred[i] >= U'0' && pred[i] <= U'9')) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < pred.size() && pred[j] >= U'0' && pred[j] <= U'9') ++j;
    const auto value = py::parse_int(pred.substr(i, j - i));
    numbers.push_back(value ? *value : -1);  // a run too long for 64 bits cannot equal a label
    i = j;
  }
  if (model_name == "gpt4" && !numbers.empty()) numbers.erase(numbers.begin());
  size_t count = 0;
  for (size_t k = 0; k < label.size() && k < numbers.size(); ++k) {
    if (!label[k].is_number_integer() || label[k].get<long long>() != numbers[k]) break;
    ++count;
  }
  return static_cast<double>(count) / static_cast<double>(label.size());
}

double max_over_labels(const std::string& task, TextView pred, const nlohmann::json& label,
                       double (*metric)(TextView, TextView)) {
  double best = 0;
  for (const auto& truth : string_list_label(task, label))
    best = std::max(best, metric(pred, truth));
  return best;
}

double score_sum(TextView pred, const nlohmann::json& label) {
  // HF evaluate's rouge with references=[label]: a list label is multi-reference (best F wins).
  double best = 0;
  for (const auto& reference : string_list_label("longbook_sum_eng", label))
    best = std::max(best, rouge_lsum_f(reference, pred));
  return best;
}

}  // namespace

const std::vector<std::string>& infinitebench_tasks() {
  static const std::vector<std::string> tasks = {
      "passkey",          "number_string",       "kv_retrieval",    "longdialogue_qa_eng",
      "longbook_sum_eng", "longbook_choice_eng", "longbook_qa_eng", "longbook_qa_chn",
      "math_find",        "math_calc",           "code_run",        "code_debug"};
  return tasks;
}

bool is_infinitebench_task(const std::string& task) {
  const auto& tasks = infinitebench_tasks();
  return std::find(tasks.begin(), tasks.end(), task) != tasks.end();
}

double infinitebench_score_one(const std::string& task, const std::string& prediction,
                               const nlohmann::json& label, const std::string& model_name) {
  const Text pred = py::T(prediction);
  if (task == "passkey" || task == "number_string") return score_retrieve_digits(task, pred, label);
  if (task == "kv_retrieval") return score_kv_retrieval(pred, label);
  if (task == "code_run") return score_code_run(pred, label);
  if (task == "code_debug") return score_code_debug(pred, label);
  if (task == "math_find") return score_math_find(pred, label);
  if (task == "math_calc") return score_math_calc(pred, label, model_name);
  if (task == "longdialogue_qa_eng") return score_longdialogue(pred, label);
  if (task == "longbook_choice_eng") return score_choice(pred, label);
  if (task == "longbook_qa_eng") return max_over_labels(task, pred, label, qa_f1_score);
  if (task == "longbook_qa_chn") return max_over_labels(task, pred, label, char_f1_zh_score);
  if (task == "longbook_sum_eng") return score_sum(pred, label);
  const std::string known = join(infinitebench_tasks(), ", ");
  throw InputError("unknown InfiniteBench task '" + task + "' (known: " + known + ")");
}

}  // namespace kvb
