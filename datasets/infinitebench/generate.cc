#include "datasets/infinitebench/generate.h"

#include <algorithm>
#include <functional>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/python_random.h"
#include "datasets/text_utils.h"

namespace kvb {
namespace {

// construct_synthetic_dataset.py strings.
constexpr char kNoise[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.\n";
constexpr char kPasskeyNeedle[] = "The pass key is {key}. Remember it. {key} is the pass key.\n";
constexpr char kPasskeyQuestion[] = "What is the pass key?";
constexpr char kNumberNeedle[] =
    "The sequence of digits is {key}. Remember it. {key} is the sequence of digits.\n";
constexpr char kNumberQuestion[] = "What is the sequence of digits?";
constexpr int kReleaseDepths = 59;  // j = 0, 90, ..., 5220 in the 128K release

// DATA_NAME_TO_MAX_NEW_TOKENS (src/eval_utils.py).
int max_new_tokens(const std::string& task) {
  if (task == "passkey") return 6;
  if (task == "number_string") return 12;
  if (task == "kv_retrieval") return 50;
  return 3;  // math_find
}

// Largest n in [1, upper] with fits(n), assuming fits is monotone; 0 when none fits.
int largest_fitting(int upper, const std::function<bool(int)>& fits) {
  int low = 1, high = upper, best = 0;
  while (low <= high) {
    const int mid = low + (high - low) / 2;
    if (fits(mid)) {
      best = mid;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  return best;
}

std::string repeat(const std::string& text, int times) {
  std::string out;
  out.reserve(text.size() * std::max(0, times));
  for (int i = 0; i < times; ++i) out += text;
  return out;
}

std::string random_digits(int count, PythonRandom& rng) {
  std::string digits;
  for (int i = 0; i < count; ++i) digits += std::to_string(rng.randint(0, 9));
  return digits;
}

// number_string's key: 5 random digits, then 5 times a random digit duplicated in place.
std::string number_string_key(PythonRandom& rng) {
  std::vector<std::string> keys;
  for (int k = 0; k < 5; ++k) keys.push_back(std::to_string(rng.randint(0, 9)));
  for (int k = 0; k < 5; ++k) {
    const size_t pos = static_cast<size_t>(rng.randint(0, 5 + k - 1));
    keys.insert(keys.begin() + pos, keys[pos]);
  }
  return join(keys, "");
}

struct Sizing {
  int budget;  // tokens for context + input
  TokenCounter* counter;
};

// Builds a record of `size` units and, while its exact token count exceeds the budget (a random
// draw can tokenise longer than the search's probe), rebuilds it 1% smaller.
nlohmann::json fitted_record(int size, const Sizing& sizing,
                             const std::function<nlohmann::json(int)>& make) {
  while (true) {
    nlohmann::json record = make(size);
    const int tokens = sizing.counter->exact(record["context"].get<std::string>() +
                                             record["input"].get<std::string>());
    if (tokens <= sizing.budget || size <= 1) return record;
    size -= std::max(1, size / 100);
  }
}

std::vector<nlohmann::json> needle_records(const GenerationRequest& request, Sizing sizing,
                                           bool passkey, PythonRandom& rng,
                                           const ProgressFn& progress) {
  const std::string needle_template = passkey ? kPasskeyNeedle : kNumberNeedle;
  const std::string question = passkey ? kPasskeyQuestion : kNumberQuestion;
  const std::string probe_key = passkey ? "00000" : "0000000000";
  const auto context_of = [&](int lines, int position, const std::string& key) {
    return repeat(kNoise, position) + replace_all(needle_template, "{key}", key) +
           repeat(kNoise, lines - position);
  };
  const int lines = largest_fitting(sizing.budget, [&](int n) {
    return sizing.counter->fast(context_of(n, n / 2, probe_key) + question) <= sizing.budget;
  });
  if (lines < 1) throw CapacityError("InfiniteBench " + request.task + ": --length too small");
  const int depths = std::min(request.num_samples, kReleaseDepths);
  std::vector<nlohmann::json> records;
  for (int i = 0; i < request.num_samples; ++i) {
    const int depth_index = i % depths;
    const int position =
        depths > 1 ? static_cast<int>(static_cast<int64_t>(lines) * depth_index / (depths - 1)) : 0;
    const std::string key = passkey ? random_digits(5, rng) : number_string_key(rng);
    records.push_back(fitted_record(lines, sizing, [&](int size) -> nlohmann::json {
      return {{"id", i},
              {"context", context_of(size, std::min(position, size), key)},
              {"input", question},
              {"answer", key},
              {"options", nlohmann::json::array()}};
    }));
    if (progress) progress(i + 1, request.num_samples);
  }
  return records;
}

std::vector<nlohmann::json> kv_records(const GenerationRequest& request, Sizing sizing,
                                       PythonRandom& rng, const ProgressFn& progress) {
  const auto context_of = [](const std::vector<std::pair<std::string, std::string>>& pairs,
                             size_t count) {
    std::string text = "JSON data:\n{";
    for (size_t i = 0; i < count; ++i) {
      if (i) text += ", ";
      text += "\"" + pairs[i].first + "\": \"" + pairs[i].second + "\"";
    }
    return text + "}";
  };
  const auto input_of = [](const std::string& key) {
    return "\nKey: \"" + key + "\"\nThe value associated with the specified key is: ";
  };
  PythonRandom probe_rng(request.seed + 1);
  std::vector<std::pair<std::string, std::string>> probe;
  const int upper = std::max(1, sizing.budget / 20);
  for (int i = 0; i < upper; ++i) probe.emplace_back(probe_rng.uuid4(), probe_rng.uuid4());
  const int pairs = largest_fitting(upper, [&](int n) {
    return sizing.counter->fast(context_of(probe, n) + input_of(probe[0].first)) <= sizing.budget;
  });
  if (pairs < 1) throw CapacityError("InfiniteBench kv_retrieval: --length too small");
  std::vector<nlohmann::json> records;
  for (int c = 0; c < request.num_samples; ++c) {
    records.push_back(fitted_record(pairs, sizing, [&](int size) -> nlohmann::json {
      std::vector<std::pair<std::string, std::string>> records_kv;
      for (int i = 0; i < size; ++i) records_kv.emplace_back(rng.uuid4(), rng.uuid4());
      rng.shuffle(records_kv);
      // The queried record sweeps the context linearly (index 5c of 2500 for 500 examples).
      const size_t query =
          static_cast<size_t>(static_cast<int64_t>(c) * size / request.num_samples);
      return {{"id", c},
              {"context", context_of(records_kv, size)},
              {"input", input_of(records_kv[query].first)},
              {"answer", records_kv[query].second},
              {"options", nlohmann::json::array()}};
    }));
    if (progress) progress(c + 1, request.num_samples);
  }
  return records;
}

std::string python_list(const std::vector<int>& values, size_t count) {
  std::string text = "[";
  for (size_t i = 0; i < count; ++i) {
    if (i) text += ", ";
    text += std::to_string(values[i]);
  }
  return text + "]";
}

// The k-th largest (or smallest) distinct value: "second" and "third" skip ties.
int kth_distinct(std::vector<int> values, int k, bool largest) {
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  const size_t index = std::min<size_t>(k - 1, values.size() - 1);
  return largest ? values[values.size() - 1 - index] : values[index];
}

std::vector<nlohmann::json> math_find_records(const GenerationRequest& request, Sizing sizing,
                                              PythonRandom& rng, const ProgressFn& progress) {
  static const char* kTargets[7] = {
      "largest number",  "second largest number",  "third largest number",
      "smallest number", "second smallest number", "third smallest number",
      "median"};
  const auto input_of = [](const std::string& target) {
    return "You should answer with only one number, no other words. The " + target +
           " of the list is: ";
  };
  std::vector<int> probe(std::max(1, sizing.budget));
  PythonRandom probe_rng(request.seed + 1);
  // Two-digit probe values: the longest a list entry tokenises to.
  for (int& value : probe) value = static_cast<int>(probe_rng.randint(10, 99));
  const int count = largest_fitting(static_cast<int>(probe.size()), [&](int n) {
    return sizing.counter->fast(python_list(probe, n) + input_of("second smallest number")) <=
           sizing.budget;
  });
  if (count < 3) throw CapacityError("InfiniteBench math_find: --length too small");
  std::vector<nlohmann::json> records;
  for (int i = 0; i < request.num_samples; ++i) {
    const int subtask = i % 7;
    bool largest = subtask < 3;
    if (subtask == 6) largest = rng.randint(0, 1) == 1;  // the median task picks a side at random
    int low = 0, high = 99;
    if (largest) {
      high = static_cast<int>(rng.randint(79, 99));
    } else {
      low = static_cast<int>(rng.randint(0, 19));
    }
    records.push_back(fitted_record(count, sizing, [&](int size) -> nlohmann::json {
      std::vector<int> values(size);
      for (int& value : values) value = static_cast<int>(rng.randint(low, high));
      nlohmann::json answer;
      if (subtask == 6) {
        std::vector<int> sorted = values;
        std::sort(sorted.begin(), sorted.end());
        const size_t n = sorted.size();
        answer =
            n % 2 ? static_cast<double>(sorted[n / 2]) : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
      } else {
        answer = kth_distinct(values, subtask % 3 + 1, largest);
      }
      return {{"id", i},
              {"context", python_list(values, values.size())},
              {"input", input_of(kTargets[subtask])},
              {"answer", answer},
              {"options", nlohmann::json::array()}};
    }));
    if (progress) progress(i + 1, request.num_samples);
  }
  return records;
}

}  // namespace

const std::vector<std::string>& infinitebench_generated_tasks() {
  static const std::vector<std::string> kTasks = {"passkey", "number_string", "kv_retrieval",
                                                  "math_find"};
  return kTasks;
}

std::vector<nlohmann::json> generate_infinitebench_records(const GenerationRequest& request,
                                                           const Tokenizer& tokenizer,
                                                           const ProgressFn& progress) {
  const auto& tasks = infinitebench_generated_tasks();
  if (std::find(tasks.begin(), tasks.end(), request.task) == tasks.end())
    throw InputError("InfiniteBench task '" + request.task +
                     "' is not generated (generated: " + join(tasks, ", ") +
                     "); the other tasks are loaded from the released "
                     "JSONL files");
  if (request.num_samples < 1) throw InputError("InfiniteBench: --num must be at least 1");
  TokenCounter counter(tokenizer);
  const Sizing sizing{request.length - kInfiniteBenchPromptReserve - max_new_tokens(request.task),
                      &counter};
  if (sizing.budget < 32)
    throw InputError("InfiniteBench " + request.task + ": --length " +
                     std::to_string(request.length) + " is too small");
  PythonRandom rng(request.seed);
  if (request.task == "passkey") return needle_records(request, sizing, true, rng, progress);
  if (request.task == "number_string") return needle_records(request, sizing, false, rng, progress);
  if (request.task == "kv_retrieval") return kv_records(request, sizing, rng, progress);
  return math_find_records(request, sizing, rng, progress);
}

}  // namespace kvb
