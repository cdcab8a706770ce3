#include "datasets/jsonl_reader.h"

#include <filesystem>
#include <fstream>

#include "common/errors.h"

namespace kvb {

void throw_record_error(const std::string& path, size_t line, const std::string& what) {
  throw FormatError(path + ":" + std::to_string(line) + ": " + what);
}

void for_each_jsonl_record(const std::string& path,
                           const std::function<void(const nlohmann::json&, size_t)>& on_record,
                           long max_records) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError("cannot open JSONL file '" + path + "' (check the path)");
  std::string line;
  size_t line_number = 0;
  long records = 0;
  while ((max_records < 0 || records < max_records) && std::getline(in, line)) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t\r\n\f\v") == std::string::npos) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e999
      throw_record_error(path, line_number, std::string("malformed JSON (") + e.what() + ")");
    }
    if (!record.is_object()) throw_record_error(path, line_number, "expected a JSON object");
    ++records;
    on_record(record, line_number);
  }
}

std::vector<Sample> load_jsonl_samples(
    const std::string& data_dir, const std::string& name, const std::string& benchmark,
    const std::string& how_to_get,
    const std::function<Sample(const nlohmann::json&, const std::string&)>& to_sample,
    long max_records) {
  if (!std::filesystem::is_directory(data_dir))
    throw InputError(benchmark + " data folder '" + data_dir + "' does not exist (" + how_to_get +
                     " with --data-dir)");
  const std::string path = (std::filesystem::path(data_dir) / (name + ".jsonl")).string();
  if (!std::filesystem::exists(path))
    throw InputError(benchmark + " file '" + path + "' is missing (expected " + name +
                     ".jsonl in --data-dir)");
  std::vector<Sample> samples;
  for_each_jsonl_record(
      path,
      [&](const nlohmann::json& record, size_t line) {
        samples.push_back(to_sample(record, path + ":" + std::to_string(line)));
      },
      max_records);
  return samples;
}

}  // namespace kvb
