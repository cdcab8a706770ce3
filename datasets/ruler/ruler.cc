#include "datasets/ruler/ruler.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <set>

#include "common/errors.h"
#include "common/strings.h"
#include "datasets/ruler/ruler_constants.h"
#include "datasets/ruler/ruler_task.h"
#include "datasets/text_utils.h"

namespace kvb {
namespace fs = std::filesystem;

RulerDataPaths ruler_data_paths(const DataSearch& search) {
  RulerDataPaths paths;
  paths.essays_dir = search.find({"haystack/pg_essays", "pg_essays", "PaulGrahamEssays"});
  paths.wordlists_dir = search.find({"wordlists", "wonderwords"});
  paths.qa_dir = search.find({"qa"});
  // The user's own folder may hold squad.json / hotpotqa.json directly.
  if (paths.qa_dir.empty() && !search.roots().empty()) paths.qa_dir = search.roots().front();
  paths.searched = search.describe();
  return paths;
}

void check_ruler_task_data(const std::string& task, const RulerDataPaths& paths) {
  ruler_tokens_to_generate(task);  // unknown task -> InputError
  if (task.rfind("niah", 0) == 0) {
    ruler::check_niah_task_data(task, paths);
  } else if (task == "cwe") {
    for (const char* list : {"nounlist.txt", "adjectivelist.txt", "verblist.txt"})
      ruler::check_word_list(paths, list);
  } else if (task == "qa_1" || task == "qa_2") {
    ruler::check_qa_task_data(task, paths);
  }
}

const std::vector<std::string>& ruler_task_names() {
  static const std::vector<std::string> kNames = {"niah_single_1",
                                                  "niah_single_2",
                                                  "niah_single_3",
                                                  "niah_multikey_1",
                                                  "niah_multikey_2",
                                                  "niah_multikey_3",
                                                  "niah_multivalue",
                                                  "niah_multiquery",
                                                  "vt",
                                                  "cwe",
                                                  "fwe",
                                                  "qa_1",
                                                  "qa_2"};
  return kNames;
}

int ruler_tokens_to_generate(const std::string& task) {
  if (task.rfind("niah", 0) == 0) return ruler::kNiahTokensToGenerate;
  if (task == "vt") return ruler::kVtTokensToGenerate;
  if (task == "cwe") return ruler::kCweTokensToGenerate;
  if (task == "fwe") return ruler::kFweTokensToGenerate;
  if (task == "qa_1" || task == "qa_2") return ruler::kQaTokensToGenerate;
  throw InputError("unknown RULER task '" + task + "' (tasks: " + join(ruler_task_names(), ", ") +
                   ")");
}

namespace ruler {

int RulerTask::search_upper_bound(int first_probe_tokens) {
  const double tokens_per_unit =
      std::max(1e-9, static_cast<double>(first_probe_tokens) / incremental());
  return std::max(static_cast<int>(max_seq_length / tokens_per_unit * 3), 2 * incremental());
}

std::vector<Draft> RulerTask::generate(int num_samples, PythonRandom& rng, TokenCounter& counter,
                                       const ProgressFn& progress) {
  const int budget = max_seq_length - tokens_to_generate();
  // HEAD's search: binary search over the unit count, one fresh random sample per probe.
  const int first_tokens = counter.fast(build(incremental(), 0, rng).prompt());
  int low = incremental();
  int high = std::min(search_upper_bound(first_tokens), max_units());
  int best = incremental();
  int best_tokens = first_tokens;
  while (low <= high) {
    const int mid = (low + high) / 2;
    const int tokens = counter.fast(build(mid, 0, rng).prompt());
    if (tokens <= budget) {
      best = mid;
      best_tokens = tokens;
      low = mid + 1;
    } else {
      high = mid - 1;
    }
  }
  // Tokens one more unit adds: the slope between the first probe and the search's size (the
  // template's fixed cost cancels out), or the first probe's average when the search stayed put.
  const double average = static_cast<double>(first_tokens) / incremental();
  const double slope = best > incremental() ? static_cast<double>(best_tokens - first_tokens) /
                                                  (best - incremental())
                                            : average;
  const double tokens_per_unit = slope > 0 ? slope : average;

  std::vector<Draft> drafts;
  for (int index = 0; index < num_samples; ++index) {
    FittedDraft fitted =
        fit_sample([&](int units) { return build(units, index, rng); }, best, tokens_per_unit,
                   budget, max_units(), counter, "RULER " + task_name);
    Draft& draft = fitted.draft;
    draft.extra["prompt_tokens"] = fitted.tokens;
    draft.extra["haystack_units"] = fitted.units;
    draft.extra["fitted_units"] = best;  // the official search's size, where each fit starts
    draft.extra["incremental"] = incremental();
    drafts.push_back(std::move(draft));
    if (progress) progress(index + 1, num_samples);
  }
  return drafts;
}

FittedDraft fit_sample(const std::function<Draft(int units)>& build, int start_units,
                       double tokens_per_unit, int budget, int max_units, TokenCounter& counter,
                       const std::string& what) {
  constexpr int kMaxAttempts = 64;
  // Once the size search has converged, a draw that still leaves more than this share of the
  // budget (and more than one unit) empty is redrawn, at most kRedraws times, alternately at the
  // size just above (it may fit with shorter random content) and at the same size (longer
  // content). Only QA's documents vary enough to need it (one draw's length spreads ~8% at 4K).
  constexpr double kAcceptableSlack = 0.05;
  constexpr int kRedraws = 12;
  const double per_unit = std::max(tokens_per_unit, 1e-3);
  const double acceptable_slack = std::max(per_unit, kAcceptableSlack * budget);
  max_units = std::max(1, max_units);
  std::optional<FittedDraft> best;  // the fullest draw that fitted (ties: more units)
  std::set<int> overflowed;         // sizes whose draw did not fit
  int redraws = 0;
  int units = std::clamp(start_units, 1, max_units);
  int last_tokens = 0;
  for (int attempt = 0; attempt < kMaxAttempts; ++attempt) {
    Draft draft = build(units);
    const int tokens = counter.exact(draft.prompt());
    last_tokens = tokens;
    if (tokens <= budget) {
      if (!best || tokens > best->tokens || (tokens == best->tokens && units > best->units))
        best = FittedDraft{std::move(draft), units, tokens};
    } else {
      overflowed.insert(units);
    }
    if (!best) {
      // Shrink by the overshoot; at one unit keep redrawing, as RULER does at its smallest size.
      const int step = std::max(1, static_cast<int>(std::ceil((tokens - budget) / per_unit)));
      units = std::max(1, units - step);
      continue;
    }
    // Grow into the slack, but below the smallest size that overflowed: bisect towards it.
    const int slack = budget - best->tokens;
    const int64_t room = static_cast<int64_t>(std::min(slack / per_unit, 1e9));
    int next = static_cast<int>(std::min<int64_t>(best->units + room, max_units));
    const auto above = overflowed.upper_bound(best->units);
    if (above != overflowed.end() && next >= *above)
      next = best->units + (*above - best->units) / 2;
    if (next > best->units) {
      units = next;
    } else if (slack > acceptable_slack && redraws < kRedraws) {
      const bool edge = redraws++ % 2 == 0 && best->units < max_units;
      units = edge ? best->units + 1 : best->units;
    } else {
      break;
    }
  }
  if (!best)
    throw CapacityError(what + ": even a one-unit haystack gives " + std::to_string(last_tokens) +
                        " prompt tokens, over the budget of " + std::to_string(budget) +
                        " (--length minus the tokens to generate); use a larger --length");
  return std::move(*best);
}

Draft split_prompt(const std::string& formatted, const std::string& formatted_answer_prefix,
                   const std::string& question_marker) {
  Draft draft;
  std::string body = formatted;
  if (!formatted_answer_prefix.empty() && body.size() >= formatted_answer_prefix.size() &&
      body.compare(body.size() - formatted_answer_prefix.size(), std::string::npos,
                   formatted_answer_prefix) == 0) {
    body.resize(body.size() - formatted_answer_prefix.size());
    draft.answer_prefix = formatted_answer_prefix;
  }
  const size_t question = body.rfind(question_marker);
  if (question == std::string::npos) {
    draft.context_part = body;
  } else {
    draft.context_part = body.substr(0, question);
    draft.question_part = body.substr(question);
  }
  return draft;
}

void check_word_list(const RulerDataPaths& data, const std::string& list) {
  if (data.wordlists_dir.empty() || !fs::exists(data.wordlists_dir / list))
    throw InputError("RULER word list " + list + " not found (looked for wordlists/" + list +
                     " in " +
                     (data.searched.empty() ? data.wordlists_dir.string() : data.searched) + "); " +
                     kSetupDataFix + " (wordlists/" + list +
                     ", from the wonderwords "
                     "package)");
}

std::vector<std::string> load_wonderwords(const RulerDataPaths& data, const std::string& list) {
  check_word_list(data, list);
  return read_word_list(data.wordlists_dir / list);
}

}  // namespace ruler

std::vector<Sample> generate_ruler(const GenerationRequest& request, const Tokenizer& tokenizer,
                                   const ChatFrame& frame, const RulerDataPaths& data,
                                   const ProgressFn& progress) {
  const std::string& task = request.task;
  const int tokens_to_generate = ruler_tokens_to_generate(task);  // validates the name
  if (request.length <= tokens_to_generate)
    throw InputError("RULER " + task + ": --length " + std::to_string(request.length) +
                     " must exceed the task's " + std::to_string(tokens_to_generate) +
                     " tokens to generate");
  if (request.num_samples < 1) throw InputError("RULER: --num must be at least 1");
  TokenCounter counter(tokenizer);
  const ruler::TaskContext context{&frame, &data, request.length, request.seed};
  std::unique_ptr<ruler::RulerTask> generator;
  if (task.rfind("niah", 0) == 0) {
    generator = ruler::make_niah_task(task, context);
  } else if (task == "vt") {
    generator = ruler::make_vt_task(context, counter);
  } else if (task == "cwe") {
    generator = ruler::make_cwe_task(context, counter);
  } else if (task == "fwe") {
    generator = ruler::make_fwe_task(context);
  } else {
    generator = ruler::make_qa_task(task, context);
  }
  generator->max_seq_length = request.length;
  generator->seed = request.seed;
  generator->task_name = task;

  PythonRandom rng(request.seed);
  std::vector<ruler::Draft> drafts =
      generator->generate(request.num_samples, rng, counter, progress);
  std::vector<Sample> samples;
  for (size_t index = 0; index < drafts.size(); ++index) {
    ruler::Draft& draft = drafts[index];
    Sample sample;
    sample.id = task + "/" + std::to_string(request.length) + "/" + std::to_string(index);
    sample.benchmark = "ruler";
    sample.task = task;
    sample.context_part = std::move(draft.context_part);
    sample.question_part = std::move(draft.question_part);
    sample.answer_prefix = std::move(draft.answer_prefix);
    sample.references = std::move(draft.references);
    sample.max_new_tokens = tokens_to_generate;
    sample.length = request.length;
    sample.use_chat_template = false;  // the chat frame is already in the text (see ruler.h)
    sample.extra = std::move(draft.extra);
    sample.extra["chat_template_in_text"] = !frame.empty();
    sample.extra["seed"] = request.seed;
    // RULER's own "length" field: prompt tokens + tokens_to_generate.
    sample.extra["ruler_length"] = sample.extra["prompt_tokens"].get<int>() + tokens_to_generate;
    samples.push_back(std::move(sample));
  }
  return samples;
}

}  // namespace kvb
