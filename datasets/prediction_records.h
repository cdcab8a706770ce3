// The fields of a predictions file (`kvbench score`'s input: one JSON record per line, made by
// another harness) that every benchmark's file scorer reads the same way, and the task percent in
// the two operation orders the official scorers use. Errors name the file and the 1-based line.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvb {

// The value of the first of `keys` the record has (harnesses name the same field differently:
// "pred" / "prediction"); null when it has none.
const nlohmann::json* first_field(const nlohmann::json& record,
                                  std::initializer_list<const char*> keys);

// The prediction text under the first of `keys`; FormatError "FILE:LINE: ..." listing the keys
// when none holds a string.
std::string prediction_of(const nlohmann::json& record, std::initializer_list<const char*> keys,
                          const std::string& path, size_t line);

// A string or a list of strings, as a list; FormatError "FILE:LINE: <what> must be a list of
// strings" otherwise.
std::vector<std::string> strings_of(const nlohmann::json& value, const std::string& path,
                                    size_t line, const std::string& what);

// Every record of the file in order (blank lines are not records), as for_each_jsonl_record reads
// them; InputError when the file cannot be read or holds no record, since a score over nothing
// would be NaN.
void for_each_prediction_record(
    const std::string& path,
    const std::function<void(const nlohmann::json& record, size_t line)>& on_record);

// round(100 * (sum / n), 2): the mean first, then scaled (InfiniteBench's compute_scores.py,
// RULER's evaluate.py, KVCache-Factory's NIAH). Sums in file order, as the Python loops add.
double percent_of_mean(const std::vector<double>& scores);
// round(100 * sum / n, 2): the sum scaled, then divided (LongBench's eval.py).
double percent_of_total(const std::vector<double>& scores);
// round(sum / n, 2), for scores already on their own scale (NIAH's ROUGE-1 F x10).
double rounded_mean(const std::vector<double>& scores);

}  // namespace kvb
