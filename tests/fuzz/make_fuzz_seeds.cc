// Writes the seed corpora of the fuzz targets in tests/fuzz/ into DIR/<target>/, each made by the
// project's own writers where it has one (write_safetensors, ResultStore, the InfiniteBench
// generator, the sweep configs of configs/) and otherwise in the layout the reader's tests use.
// Usage: make_fuzz_seeds DIR. The GGUF seeds come from make_gguf_seeds.cc.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "datasets/infinitebench/generate.h"
#include "engine/hf_config.h"
#include "engine/presets.h"
#include "engine/safetensors.h"
#include "harness/sweep/config.h"
#include "harness/sweep/store.h"
#include "tests/fuzz/fuzz_choices.h"
#include "tests/fuzz/fuzz_util.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

fs::path g_root;

void seed(const std::string& target, const std::string& name, const std::string& bytes) {
  const fs::path dir = g_root / target;
  fs::create_directories(dir);
  kvb::fuzz::write_file(dir / name, bytes);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream out;
  out << in.rdbuf();
  return out.str();
}

std::string jsonl(const std::vector<json>& records) {
  std::string out;
  for (const json& r : records) out += r.dump() + "\n";
  return out;
}

// The index of (benchmark, name) in fuzz_choices.h's list, as the target's first byte.
char choice_byte(const std::string& benchmark, const std::string& name, bool with_scored) {
  const auto all = kvb::fuzz::benchmark_files(with_scored);
  for (size_t i = 0; i < all.size(); ++i)
    if (all[i].first == benchmark && all[i].second == name) return static_cast<char>(i);
  std::fprintf(stderr, "make_fuzz_seeds: %s/%s is not a fuzz choice\n", benchmark.c_str(),
               name.c_str());
  std::exit(1);
}

void safetensors_seeds() {
  const fs::path tmp = kvb::fuzz::scratch_dir() / "seed.safetensors";
  kvb::write_safetensors(tmp,
                         {{"a", {{2, 3}, {1, 2, 3, 4, 5, 6}}}, {"b", {{0}, {}}}, {"c", {{}, {7}}}},
                         {{"format", "pt"}});
  seed("safetensors", "two-tensors.safetensors", read_file(tmp));
  kvb::write_safetensors(tmp, {});
  seed("safetensors", "empty.safetensors", read_file(tmp));
  // The other dtypes the reader takes, in the writer's layout with the header edited.
  std::string bytes = read_file(tmp);
  const json header = {{"h", {{"dtype", "F16"}, {"shape", {2}}, {"data_offsets", {0, 4}}}},
                       {"b", {{"dtype", "BF16"}, {"shape", {1}}, {"data_offsets", {4, 6}}}},
                       {"i", {{"dtype", "I64"}, {"shape", {1}}, {"data_offsets", {6, 14}}}},
                       {"j", {{"dtype", "I32"}, {"shape", {1}}, {"data_offsets", {14, 18}}}}};
  const std::string text = header.dump();
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((text.size() >> (8 * i)) & 0xFF);
  file +=
      text +
      std::string("\x00\x3c\x00\xc0\x80\x3f\x05\x00\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff", 18);
  seed("safetensors", "dtypes.safetensors", file);

  const json index = {{"metadata", {{"total_size", 60}}},
                      {"weight_map",
                       {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                        {"model.norm.weight", "model-00001-of-00002.safetensors"},
                        {"lm_head.weight", "model-00002-of-00002.safetensors"}}}};
  seed("safetensors_index", "index.json", index.dump(2));
}

void hf_config_seeds() {
  for (const std::string& name : kvb::preset_names()) {
    const kvb::ModelConfig c = kvb::preset_config(name);
    const char* arch = c.architecture == kvb::Architecture::kQwen2     ? "Qwen2ForCausalLM"
                       : c.architecture == kvb::Architecture::kMistral ? "MistralForCausalLM"
                                                                       : "LlamaForCausalLM";
    json j = {{"architectures", {arch}},
              {"hidden_size", c.d_model},
              {"intermediate_size", c.ffn_dim},
              {"num_hidden_layers", c.n_layers},
              {"num_attention_heads", c.n_query_heads},
              {"num_key_value_heads", c.n_kv_heads},
              {"head_dim", c.head_dim},
              {"vocab_size", c.vocab_size},
              {"max_position_embeddings", c.max_context},
              {"rms_norm_eps", c.rms_norm_eps},
              {"rope_theta", c.rope_theta},
              {"tie_word_embeddings", c.tied_embeddings}};
    if (c.llama3_rope_scaling)
      j["rope_scaling"] = {
          {"rope_type", "llama3"},
          {"factor", c.llama3_rope_scaling->factor},
          {"low_freq_factor", c.llama3_rope_scaling->low_freq_factor},
          {"high_freq_factor", c.llama3_rope_scaling->high_freq_factor},
          {"original_max_position_embeddings", c.llama3_rope_scaling->original_max_position}};
    // Only configs the reader accepts are seeds.
    try {
      (void)kvb::model_config_from_hf_json(j, name);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "make_fuzz_seeds: preset %s as config.json: %s\n", name.c_str(),
                   e.what());
      std::exit(1);
    }
    seed("hf_config", name + ".json", j.dump(1));
  }
}

void sweep_config_seeds(const fs::path& source) {
  for (const auto& entry : fs::recursive_directory_iterator(source / "configs")) {
    if (entry.path().extension() != ".json") continue;
    const std::string text = read_file(entry.path());
    const std::string name = fs::relative(entry.path(), source / "configs").string();
    std::string flat = name;
    for (char& c : flat)
      if (c == '/') c = '_';
    seed("sweep_config", flat, text);
    // The config as the run record stores it (SweepConfig::source), comments gone.
    try {
      const kvb::SweepConfig config = kvb::load_sweep_config(entry.path());
      seed("sweep_config", "stored_" + flat, config.source.dump());
    } catch (const std::exception&) {
    }
  }
}

void benchmark_seeds(const kvb::Tokenizer& tokenizer) {
  const json longbench = {{"input", "What is the capital?"},
                          {"context", "Passage 1:\nParis is the capital of France. It is large."},
                          {"answers", {"Paris"}},
                          {"length", 12},
                          {"dataset", "hotpotqa"},
                          {"language", "en"},
                          {"all_classes", nullptr},
                          {"_id", "abc123"}};
  json classes = longbench;
  classes["all_classes"] = {"Location", "Person"};
  for (const char* name : {"hotpotqa", "qasper_e", "trec", "lcc", "passage_retrieval_zh"}) {
    for (char flags : {'\0', '\1'}) {
      const std::string head{choice_byte("longbench", name, false), flags};
      seed("benchmark_jsonl", std::string("lb_") + name + (flags ? "_trunc" : ""),
           head + jsonl({longbench,
                         classes,
                         {{"input", ""}, {"context", ""}, {"answers", json::array()}}}));
    }
  }
  // InfiniteBench: the project's generator for the synthetic tasks, the published layout for the
  // rest.
  for (const std::string& task : kvb::infinitebench_generated_tasks()) {
    kvb::GenerationRequest request;
    request.task = task;
    request.length = 256;
    request.num_samples = 2;
    const auto records = kvb::generate_infinitebench_records(request, tokenizer);
    seed("benchmark_jsonl", "ib_" + task,
         std::string{choice_byte("infinitebench", task, false), '\1'} + jsonl(records));
  }
  const json choice = {{"id", 0},
                       {"context", "A long book. The hero wins."},
                       {"input", "Who wins?"},
                       {"answer", {"The hero"}},
                       {"options", {"The hero", "The villain", "Nobody", "Everyone"}}};
  for (const char* task :
       {"longbook_choice_eng", "code_debug", "longbook_qa_eng", "math_calc", "longdialogue_qa_eng"})
    seed("benchmark_jsonl", std::string("ib_") + task,
         std::string{choice_byte("infinitebench", task, false), '\2'} + jsonl({choice}));
}

void ruler_qa_seeds() {
  // The layout of tests/datasets/ruler_test.cc's write_synthetic_qa, smaller.
  json squad = {{"version", "v2.0"}, {"data", json::array()}};
  for (int article = 0; article < 2; ++article) {
    json paragraphs = json::array();
    for (int p = 0; p < 3; ++p) {
      const std::string city = "Town" + std::to_string(article * 3 + p);
      paragraphs.push_back(
          {{"context", "The river " + std::to_string(p) + " flows past " + city + "."},
           {"qas",
            {{{"question", "Which town?"},
              {"id", "q"},
              {"answers", {{{"text", city}, {"answer_start", 0}}}},
              {"is_impossible", false}},
             {{"question", "Unanswerable?"},
              {"id", "x"},
              {"answers", json::array()},
              {"is_impossible", true}}}}});
    }
    squad["data"].push_back({{"title", "T" + std::to_string(article)}, {"paragraphs", paragraphs}});
  }
  seed("ruler_qa", "squad.json", std::string(1, '\0') + squad.dump());
  json hotpot = json::array();
  for (int q = 0; q < 3; ++q) {
    json context = json::array();
    for (int p = 0; p < 4; ++p)
      context.push_back(
          {"Title " + std::to_string(p), {"Sentence one. ", "Answer" + std::to_string(q) + "."}});
    hotpot.push_back({{"_id", "h"},
                      {"question", "What?"},
                      {"answer", "Answer" + std::to_string(q)},
                      {"context", context}});
  }
  seed("ruler_qa", "hotpotqa.json", std::string(1, '\1') + hotpot.dump());
}

void score_seeds() {
  const auto file = [](const std::string& benchmark, const std::string& dataset, char flags,
                       const std::vector<json>& records) {
    seed("score_predictions", benchmark + "_" + dataset + "_" + std::to_string(flags),
         std::string{choice_byte(benchmark, dataset, true), flags} + jsonl(records));
  };
  file("longbench", "hotpotqa", 1,
       {{{"pred", "Paris"}, {"answers", {"Paris"}}, {"all_classes", nullptr}}});
  file("longbench", "trec", 0,
       {{{"pred", "Location\nx"},
         {"answers", {"Location"}},
         {"all_classes", {"Location", "Person"}}}});
  file("longbench", "qasper_e", 1, {{{"pred", "yes"}, {"answers", {"yes"}}, {"length", 5000}}});
  file("longbench", "lcc", 2, {{{"pred", "int x = 1;\n"}, {"answers", {"int x = 2;"}}}});
  file("longbench", "lsht", 0,
       {{{"pred", "类别"}, {"answers", {"类别"}}, {"all_classes", {"类别", "其他"}}}});
  file("longbench", "dureader", 0, {{{"pred", "北京是中国的首都"}, {"answers", {"北京"}}}});
  file("infinitebench", "passkey", 1, {{{"prediction", "12345"}, {"ground_truth", "12345"}}});
  file("infinitebench", "longbook_choice_eng", 4, {{{"pred", "B"}, {"label", {"x", "B"}}}});
  file("infinitebench", "math_calc", 0, {{{"prediction", "1, 2, 3"}, {"ground_truth", {1, 2, 4}}}});
  file("infinitebench", "code_debug", 0,
       {{{"prediction", "funcA"}, {"ground_truth", {"funcA", "A"}}}});
  file("ruler", "niah_single_1", 1, {{{"pred", "The number is 123"}, {"outputs", {"123"}}}});
  file("ruler", "vt", 0, {{{"pred", "X Y Z"}, {"outputs", {"X", "Y"}}}});
  file("niah", "niah", 1,
       {{{"response", "eat a sandwich"}, {"needle", "The best thing is to eat a sandwich."}}});
}

void tokenizer_seeds(const fs::path& source) {
  const std::vector<std::string> texts = {
      "Hello world 12345!",
      "  tabs\tand\nnewlines  ",
      "naïve café ½ 🦙",
      "<|im_start|>user\nHi<|im_end|>",
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>",
      "[INST] x [/INST]</s>",
      "\x80 abc \xC3 end\xE2\x82",
      "一二三 四五",
      "    \n\n\n   x"};
  int n = 0;
  for (const std::string& text : texts)
    for (char head : {'\0', '\1', '\2', '\3', '\4', '\5', '\6', '\7', '\x0c', '\x0d'})
      seed("tokenizer", "text" + std::to_string(n++), std::string(1, head) + text);
  // llama.cpp's tokenizer test strings (data/tokenizers/*.inp, from setup.sh), when present.
  for (const char* vocab : {"gpt-2", "llama-spm"}) {
    const fs::path inp =
        kvb::test::fixture(std::string("tokenizers/ggml-vocab-") + vocab + ".gguf.inp");
    if (!fs::exists(inp)) continue;
    const std::string all = read_file(inp);
    const std::string marker = "\n__ggml_vocab_test__\n";
    size_t start = 0;
    for (int i = 0; start < all.size(); ++i) {
      size_t end = all.find(marker, start);
      if (end == std::string::npos) end = all.size();
      seed("tokenizer", std::string(vocab) + "_" + std::to_string(i),
           std::string(1, static_cast<char>(i)) + all.substr(start, end - start));
      start = end + marker.size();
    }
  }
  (void)source;
}

void chat_template_seeds() {
  const std::string nul(1, '\0');
  seed("chat_template", "render", nul + nul + "Hello there");
  seed("chat_template", "render_system",
       nul + "\3" + nul + " user message " + nul + " system message ");
  const json smollm = {
      {"chat_template", "{% for message in messages %}<|im_start|>...SmolLM...<|im_end|>"},
      {"bos_token", "<|im_start|>"}};
  const json list = {{"chat_template",
                      {{{"name", "default"}, {"template", "[INST] x ' [/INST]'"}},
                       {{"name", "tool_use"}, {"template", "<|start_header_id|>"}}}}};
  const json config = {{"model_type", "qwen2"}, {"_name_or_path", "Qwen/Qwen2.5-7B-Instruct"}};
  seed("chat_template", "folder_smollm",
       std::string(1, '\1') + smollm.dump() + std::string(1, '\0') + config.dump());
  seed("chat_template", "folder_list", std::string(1, '\1') + list.dump());
  seed("chat_template", "names",
       "\2<|start_header_id|> Cutting Knowledge Date" + nul + "llama" + nul +
           "Meta-Llama-3.1-8B-Instruct");
}

void results_db_seeds() {
  const fs::path db = kvb::fuzz::scratch_dir() / "seed.db";
  {
    kvb::ResultStore store(db, kvb::ResultStore::Mode::kReadWrite);
    kvb::RunInfo info;
    info.config_name = "seed";
    info.config = {{"name", "seed"}};
    const int64_t run = store.begin_run(info);
    kvb::Cell cell;
    cell.model = "m";
    cell.benchmark = "ruler";
    cell.task = "niah_single_1";
    cell.length = 1024;
    cell.policy = "snapkv";
    cell.budget = kvb::Budget::parse("128");
    const int64_t id = store.ensure_cell(cell);
    for (int i = 0; i < 2; ++i) {
      kvb::SampleResult r;
      r.sample_id = "s" + std::to_string(i);
      r.prediction = "123";
      r.references = {"123"};
      r.score = 1;
      store.insert_result(id, i, run, r);
    }
    store.finish_run(run, "finished");
  }
  const std::string bytes = read_file(db);
  seed("results_db", "readonly.db", std::string(1, '\0') + bytes);
  seed("results_db", "readwrite.db", std::string(1, '\1') + bytes);
  seed("results_db", "empty", std::string(1, '\1'));
  seed("results_db", "text", std::string(1, '\0') + "not a database");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR\n", argv[0]);
    return 2;
  }
  g_root = argv[1];
  const fs::path source = kvb::test::source_dir();
  safetensors_seeds();
  hf_config_seeds();
  sweep_config_seeds(source);
  benchmark_seeds(kvb::fuzz::default_tokenizer());
  ruler_qa_seeds();
  score_seeds();
  tokenizer_seeds(source);
  chat_template_seeds();
  results_db_seeds();
  return 0;
}
