// Line-by-line JSONL reading with errors that name the file and the 1-based line number. Blank
// lines are skipped (as InfiniteBench's iter_jsonl does); every other line must be one JSON object.
#pragma once

#include <cstddef>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "datasets/sample.h"

namespace kvb {

// Throws InputError when the file cannot be opened, FormatError "FILE:LINE: ..." for a line that is
// not a JSON object. Exceptions thrown by `on_record` propagate unchanged.
void for_each_jsonl_record(
    const std::string& path,
    const std::function<void(const nlohmann::json& record, size_t line)>& on_record,
    long max_records = -1);  // stop after this many records (-1: read all)

// The samples of the file NAME.jsonl in `data_dir`, one per record through `to_sample` (given the
// record and its "FILE:LINE"), at most `max_records`. A missing folder or file is an InputError
// naming `benchmark`, and for the folder `how_to_get` (how the user obtains it: "download ... and
// pass their folder").
std::vector<Sample> load_jsonl_samples(
    const std::string& data_dir, const std::string& name, const std::string& benchmark,
    const std::string& how_to_get,
    const std::function<Sample(const nlohmann::json& record, const std::string& where)>& to_sample,
    long max_records = -1);

// "FILE:LINE: what" as a FormatError, for callers that find a bad field in a record.
[[noreturn]] void throw_record_error(const std::string& path, size_t line, const std::string& what);

}  // namespace kvb
