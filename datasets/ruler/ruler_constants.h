// RULER's protocol constants, written exactly as NVIDIA/RULER has them (HEAD c3f5e3b):
//   templates and answer prefixes: scripts/data/synthetic/constants.py (TASKS);
//   tokens_to_generate: same file; task arguments: scripts/synthetic.yaml;
//   needle sentence, noise sentence and depth list: scripts/data/synthetic/niah.py;
//   document format: scripts/data/synthetic/qa.py.
// HEAD fixed the 2024 typo "assgined" in the VT answer prefix (docs/benchmarks.md §1.1); HEAD's
// text is used.
#pragma once

namespace kvb::ruler {

inline constexpr char kNiahTemplate[] =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the {type_needle_v} afterwards.\n{context}\nWhat are all "
    "the special magic {type_needle_v} for {query} mentioned in the provided text?";
inline constexpr char kNiahAnswerPrefix[] =
    " The special magic {type_needle_v} for {query} mentioned in the provided text are";
inline constexpr int kNiahTokensToGenerate = 128;

inline constexpr char kVtTemplate[] =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    "{context}\nQuestion: Find all variables that are assigned the value {query} in the text "
    "above.";
inline constexpr char kVtAnswerPrefix[] =
    " Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
    "variables are assigned the value {query}, they are: ";
inline constexpr int kVtTokensToGenerate = 30;

inline constexpr char kCweTemplate[] =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most common "
    "words in the above list?";
inline constexpr char kCweAnswerPrefix[] =
    " Answer: The top 10 words that appear most often in the list are:";
inline constexpr int kCweTokensToGenerate = 120;

inline constexpr char kFweTemplate[] =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the "
    "above coded text?";
inline constexpr char kFweAnswerPrefix[] =
    " Answer: According to the coded text above, the three most frequently appeared words are:";
inline constexpr int kFweTokensToGenerate = 50;

inline constexpr char kQaTemplate[] =
    "Answer the question based on the given documents. Only give me the answer and do not output "
    "any other words.\n\nThe following are given documents.\n\n{context}\n\nAnswer the question "
    "based on the given documents. Only give me the answer and do not output any other words.\n\n"
    "Question: {query}";
inline constexpr char kQaAnswerPrefix[] = " Answer:";
inline constexpr int kQaTokensToGenerate = 32;
// qa.py DOCUMENT_PROMPT; documents are joined with "\n\n".
inline constexpr char kQaDocument[] = "Document {i}:\n{document}";

// niah.py
inline constexpr char kNeedle[] = "One of the special magic {type_needle_v} for {key} is: {value}.";
inline constexpr char kNoise[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
// round(np.linspace(0, 100, 40)) as in niah.py's DEPTHS.
inline constexpr int kNeedleDepths[40] = {0,  3,  5,  8,  10, 13, 15, 18, 21, 23, 26, 28, 31, 33,
                                          36, 38, 41, 44, 46, 49, 51, 54, 56, 59, 62, 64, 67, 69,
                                          72, 74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100};

// Where the question starts inside the user message (kvpress's split of RULER inputs,
// docs/benchmarks.md §1.1).
inline constexpr char kNiahQuestionPluralMarker[] = "What are all the special magic";
inline constexpr char kNiahQuestionSingularMarker[] = "What is the special magic";
inline constexpr char kVtQuestionMarker[] = "Question: Find all variables";
inline constexpr char kCweQuestionMarker[] = "Question: What are the 10 most common words";
inline constexpr char kFweQuestionMarker[] = "Question: Do not provide any explanation.";
inline constexpr char kQaQuestionMarker[] = "Answer the question based on the given documents.";

}  // namespace kvb::ruler
