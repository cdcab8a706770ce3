#include "datasets/prediction_records.h"

#include "common/errors.h"
#include "datasets/jsonl_reader.h"
#include "datasets/longbench/longbench.h"

namespace kvb {
namespace {

double sum_in_order(const std::vector<double>& scores) {
  double sum = 0;
  for (const double s : scores) sum += s;
  return sum;
}

}  // namespace

const nlohmann::json* first_field(const nlohmann::json& record,
                                  std::initializer_list<const char*> keys) {
  for (const char* key : keys) {
    auto it = record.find(key);
    if (it != record.end()) return &*it;
  }
  return nullptr;
}

std::string prediction_of(const nlohmann::json& record, std::initializer_list<const char*> keys,
                          const std::string& path, size_t line) {
  const nlohmann::json* value = first_field(record, keys);
  if (!value || !value->is_string()) {
    std::string names;
    for (const char* k : keys) names += (names.empty() ? "\"" : " or \"") + std::string(k) + "\"";
    throw_record_error(path, line, "record needs a string prediction field " + names);
  }
  return value->get<std::string>();
}

std::vector<std::string> strings_of(const nlohmann::json& value, const std::string& path,
                                    size_t line, const std::string& what) {
  if (value.is_string()) return {value.get<std::string>()};
  if (!value.is_array()) throw_record_error(path, line, what + " must be a list of strings");
  std::vector<std::string> out;
  for (const auto& item : value) {
    if (!item.is_string()) throw_record_error(path, line, what + " must be a list of strings");
    out.push_back(item.get<std::string>());
  }
  return out;
}

void for_each_prediction_record(
    const std::string& path,
    const std::function<void(const nlohmann::json& record, size_t line)>& on_record) {
  size_t records = 0;
  for_each_jsonl_record(path, [&](const nlohmann::json& record, size_t line) {
    ++records;
    on_record(record, line);
  });
  if (records == 0) throw InputError("'" + path + "' holds no records to score");
}

double percent_of_mean(const std::vector<double>& scores) {
  const double n = static_cast<double>(scores.size());
  return python_round2(100.0 * (sum_in_order(scores) / n));
}

double percent_of_total(const std::vector<double>& scores) {
  const double n = static_cast<double>(scores.size());
  return python_round2(100.0 * sum_in_order(scores) / n);
}

double rounded_mean(const std::vector<double>& scores) {
  return python_round2(sum_in_order(scores) / static_cast<double>(scores.size()));
}

}  // namespace kvb
