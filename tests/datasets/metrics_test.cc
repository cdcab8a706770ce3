// LongBench v1 metrics (datasets/metrics/*, datasets/longbench/longbench.h) against the official
// metric code, plus the RULER and NIAH string metrics.
// (The generator scripts are in tests/datasets/reference/, with a README.)
//
// HOW THE EXPECTED VALUES WERE OBTAINED. Every number in the tables below was printed by running
// the official LongBench metric functions (LongBench/metrics.py of THUDM/LongBench, written out
// under /tmp, outside the project) in a virtual environment under /tmp:
//   python3 -m venv /tmp/scoring-venv
//   /tmp/scoring-venv/bin/pip install rouge fuzzywuzzy jieba      # rouge 1.0.1, fuzzywuzzy 0.18.0,
//                                                                # jieba 0.42.1 (CPython 3.11.7)
//   /tmp/scoring-venv/bin/python expected.py        -> kLongBenchCases (fuzzywuzzy on difflib, as
//                                                      LongBench's requirements install it)
//   /tmp/scoring-venv/bin/python expected_extra.py  -> kDifflibRatios
//   (difflib.SequenceMatcher(None,
//                                                      a, b).ratio() of seeded random pairs) and
//                                                      kJiebaCuts (list(jieba.cut(s,
//                                                      cut_all=False)))
//   python3 -m venv /tmp/lev-venv && /tmp/lev-venv/bin/pip install fuzzywuzzy python-Levenshtein
//                                                      # python-Levenshtein 0.27.5
//   /tmp/lev-venv/bin/python expected.py --levenshtein -> kLevenshteinCodeSimCases
// expected.py calls e.g. metrics.qa_f1_score(pred, gt) and prints repr() of the result; the
// recursion probes call rouge_score through one wrapper function, the depth eval.py calls it at.
// jieba's dict.txt and finalseg tables in that venv are byte-identical (md5) to Debian's
// python3-jieba 0.42.1, which the C++ reads.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "common/errors.h"
#include "datasets/longbench/longbench.h"
#include "datasets/metrics/jieba.h"
#include "datasets/metrics/longbench_metrics.h"
#include "datasets/metrics/porter_stemmer.h"
#include "datasets/metrics/py_text.h"
#include "datasets/metrics/qa_f1.h"
#include "datasets/metrics/rouge.h"
#include "datasets/metrics/sequence_matcher.h"
#include "datasets/metrics/string_match.h"
#include "datasets/niah/niah.h"

namespace kvb {
namespace {

using py::T;

struct MetricCase {
  const char* metric;
  const char* prediction;
  const char* ground_truth;
  std::vector<std::string> all_classes;
  double expected;
};

// Cases chosen to hit each quirk of docs/benchmarks.md §3.5: articles and punctuation, Unicode
// lowercase and whitespace, \b over non-ASCII letters, jieba segmentation with HMM words, the
// pltrdy rouge's "." splitting, case sensitivity, word sets, empty/dots-only inputs and kept
// whitespace pieces, the classification remove-while-iterating skip, \d matching full-width
// digits in retrieval/count, code_sim's line choice, "" == "" -> 100, difflib's autojunk and
// round-half-even (12.5 -> 12).
const std::vector<MetricCase> kLongBenchCases = {
    {"qa_f1_score", "The cat sat on a mat.", "cat on the mat", {}, 0.8571428571428571},
    {"qa_f1_score", "U.S.A.", "USA", {}, 1.0},
    {"qa_f1_score", "ÉCOLE Normale", "école normale", {}, 1.0},
    {"qa_f1_score", "théa an", "théa", {}, 1.0},
    {"qa_f1_score", "a-b", "ab", {}, 1.0},
    {"qa_f1_score", "foo bar　baz", "foo bar", {}, 0.8},
    {"qa_f1_score", "nothing here", "else", {}, 0.0},
    {"qa_f1_score", "the the cat cat cat", "cat", {}, 0.5},
    {"qa_f1_score", "an apple and the pear", "apple pear", {}, 0.8},
    {"qa_f1_score", "Anna", "anna a", {}, 1.0},
    {"qa_f1_score", "İstanbul", "i̇stanbul", {}, 1.0},
    {"qa_f1_score", "__the__ x", "the x", {}, 1.0},
    {"qa_f1_zh_score", "北京大学的学生", "北京大学", {}, 0.5},
    {"qa_f1_zh_score", "他来到了网易杭研大厦", "网易杭研大厦", {}, 0.6666666666666666},
    {"qa_f1_zh_score", "我来到北京清华大学", "清华大学", {}, 0.4},
    {"qa_f1_zh_score", "iPhone 11售价5999元，很贵。", "5999元", {}, 0.4444444444444445},
    {"qa_f1_zh_score",
     "小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
     "中国科学院计算所",
     {},
     0.33333333333333337},
    {"qa_f1_zh_score", "A.B.C", "a b c", {}, 1.0},
    {"qa_f1_zh_score", "结婚的和尚未结婚的", "尚未结婚", {}, 0.5},
    {"rouge_score", "the cat sat on the mat", "the cat is on the mat", {}, 0.7999999950000002},
    {"rouge_score", "The Cat", "the cat", {}, 0.0},
    {"rouge_score", "a nice day,", "a nice day", {}, 0.6666666616666668},
    {"rouge_score", "...", "a b", {}, 0.0},
    {"rouge_score", "", "a b", {}, 0.0},
    {"rouge_score", "a b", "...", {}, 0.0},
    {"rouge_score", "a. . b", "a b", {}, 0.7999999952000001},
    {"rouge_score", "x x x y", "x y y", {}, 0.999999995},
    {"rouge_score",
     "one two. three four five. six",
     "one three. five six seven",
     {},
     0.7272727223140496},
    {"rouge_score", "w w. w", "w", {}, 0.999999995},
    {"rouge_score", "  spaced   out  words ", "spaced words", {}, 0.7999999952000001},
    {"rouge_zh_score",
     "会议讨论了预算问题。大家同意增加投入。",
     "会议讨论了预算。",
     {},
     0.6666666622222223},
    {"rouge_zh_score", "今天天气很好", "今天天气不好", {}, 0.39999999520000007},
    {"rouge_zh_score", "。。。", "好", {}, 0.0},
    {"classification_score",
     "Manner of an action",
     "Manner of an action",
     {"Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"},
     0.5},
    {"classification_score",
     "Other number",
     "Other number",
     {"Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"},
     1.0},
    {"classification_score",
     "Other",
     "Other number",
     {"Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"},
     0.0},
    {"classification_score",
     "Abbreviation or Other",
     "Other",
     {"Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"},
     0.5},
    {"classification_score",
     "nothing",
     "Other",
     {"Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"},
     0.0},
    {"classification_score",
     "Manner action Other number",
     "Other number",
     {"Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"},
     0.3333333333333333},
    {"classification_score", "体育新闻", "体育新闻", {"体育", "体育新闻", "财经", "新闻"}, 1.0},
    {"classification_score", "财经新闻", "财经", {"体育", "体育新闻", "财经", "新闻"}, 0.5},
    {"retrieval_score", "Paragraph 12", "Paragraph 12", {}, 1.0},
    {"retrieval_score", "Paragraph 12 or Paragraph 3", "Paragraph 12", {}, 0.5},
    {"retrieval_score", "no idea", "Paragraph 2", {}, 0.0},
    {"retrieval_score", "Paragraph １２", "Paragraph 12", {}, 0.0},
    {"retrieval_score", "1212", "Paragraph 12", {}, 0.0},
    {"retrieval_zh_score", "段落5", "段落5", {}, 1.0},
    {"retrieval_zh_score", "段落5和段落15", "段落5", {}, 0.5},
    {"count_score", "12", "12", {}, 1.0},
    {"count_score", "There are 12 unique paragraphs out of 20", "12", {}, 0.5},
    {"count_score", "twelve", "12", {}, 0.0},
    {"count_score", "012", "12", {}, 0.0},
    {"code_sim_score", "abcdefgh", "ijklmnoa", {}, 0.12},
    {"code_sim_score",
     "\n\n```python\n# comment\nreturn self.x + 1\n",
     "return self.x+1",
     {},
     0.94},
    {"code_sim_score", "// c\n#x\n`y`", "", {}, 1.0},
    {"code_sim_score", "// c\n#x", "anything", {}, 0.0},
    {"code_sim_score", "", "", {}, 1.0},
    {"code_sim_score", "return self.x + 1", "return self.y+1", {}, 0.88},
    {"code_sim_score", "for i in range(n):", "for j in range(m):", {}, 0.89},
    {"code_sim_score", "int main(int argc, char** argv) {", "int main() {", {}, 0.53},
    {"code_sim_score",
     "x = foo(a, b, c) + bar(d, e, f)",
     "    x = foo(a, b, c) + bar(d, e, f) x = foo(a, b, c) + bar(d, e, f) x = foo(a, b, c) + "
     "bar(d, e, f) x = foo(a, b, c) + bar(d, e, f) x = foo(a, b, c) + bar(d, e, f) x = foo(a, b, "
     "c) + bar(d, e, f) x = foo(a, b, c) + bar(d, e, f) x = foo(a, b, c) + bar(d, e, f) ",
     {},
     0.0},
    {"code_sim_score", "a\nb", "b", {}, 0.0},
    {"code_sim_score", "xaaaybbbb", "bbbbxaaay", {}, 0.56},
    {"code_sim_score", "ccaacbb", "cababcc", {}, 0.29},
    {"code_sim_score",
     "def f(x):",
     "def f(x):                                                                                    "
     "                                                                                             "
     "                  return x",
     {},
     0.08},
    {"code_sim_score",
     "return "
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
     "return "
     "ababababababababababababababababababababababababababababababababababababababababababababababa"
     "babababababababababababababababababababababababababababababababababababababababababababababab"
     "ababababababab",
     {},
     0.04},
};

const std::vector<MetricCase> kLevenshteinCodeSimCases = {
    {"code_sim_score", "abcdefgh", "ijklmnoa", {}, 0.12},
    {"code_sim_score", "return self.x + 1", "return self.y+1", {}, 0.88},
    {"code_sim_score", "for i in range(n):", "for j in range(m):", {}, 0.89},
    {"code_sim_score", "int main(int argc, char** argv) {", "int main() {", {}, 0.53},
    {"code_sim_score", "xaaaybbbb", "bbbbxaaay", {}, 0.56},
    {"code_sim_score", "ccaacbb", "cababcc", {}, 0.57},
};

struct RatioCase {
  const char* a;
  const char* b;
  double expected;
};
const std::vector<RatioCase> kDifflibRatios = {
    {"ab bfa dab",
     "ggbdb gabdagada cegc be cbdfb badh gfhhfedcdbe hfhebb gcfchgab "
     "fffhhbbehbaehegfahfcbhadecdgghbchg ecg egfgdcbccddahceeacg ffc ah ggggbhgadbdhcbfabac "
     "bfabdgceffhbbhhhhebcbfehc ad fc a ebe fcfd   fdddg",
     0.09569377990430622},
    {"bbcaabbbac",
     "cbbcbbaaaabababccabcbcacabcababcbacbbbcacaaaaacbcaccbcbaccaaaccaccabaaababcacbbcbaacbbcccbcac"
     "accabacaaaabccacabccccbacaaabaacbcaabbccccacbbccbcaccbcabababbbacabaacbaacccbababacabbacaacbc"
     "bbbabbacbabcbb",
     0.0},
    {"baaaaabbaababbbabbabaababaabaaabababbbaaaaabaaabbabbabbabaaaabababbbbaabaabbaaaabbaaabbababaa"
     "bbabbbbaababaabbabbaaaabaab",
     "ababbaaabbbabaabaaaaaaababbaaabbabaaabba", 0.4625},
    {"ddhhgbhead",
     "bcfeecahahebdhe ehhhb debhaehb hegddbbc efc ebfdhhgacahhgecgfgfbfaffgbdaeefbggbfgeaebaecdeg "
     "fdfgag  dbaghceha cchgfeeeegdeh gbccbd h dhfhgc ddbcf bfdfedaggg dgefahefc  "
     "dbedgghgeacaghhabg hhdbdcc bhb aacdaece gbbbe dgedaa ehefdh d dageaadhgbedgfdhafgfgdae bdhde",
     0.0},
    {"abbacbcaab",
     "bcacabaaacabacaabbcbcaaabaacccbabccbbbbaaaababbacabbbbaacbabcbabbcbacbacbababaabacacbbbbcabcc"
     "cbbbacccaaaabcbbbbbabaacbcacabbbbcacabaabacabccbabaabcaaabbcbaaabbccacccabbbcbbbcbabaaaaabcab"
     "abbaccacacbaa",
     0.09569377990430622},
    {"abbabaaaaaababbaabaabbaaabaaabbbabaaabbababaaabbbbbbabbbbababbaababaabbbaaaaababaabbaaaabbaba"
     "abbabaaababaaababbaaaaaabab",
     "bbbbabbbbbaaabbabbabbaaabbbabaaaabaabaaaaaabbaaabbabbbabbababbaaababbbabaabbabbbbbbabbabaaabb"
     "bbaaaabbbbaabaaaaabbababbaabbaaaaabaaabbbaabbbaaaaaabaaaaaaaababababababbbabaaabaaabbabbbbaaa"
     "abaaababbabbbaabababaaaaaaaabaaaaaaaaabaabaaaaaaaabbaaaabbbbbabbbabbbbabababbaaababaabaabbaba"
     "bbbabaabaaababbabbabababbbababaabbabbabbbaabbaabbaaabbaababaaaabaabbbbaaababbaabbabbaabbaabba"
     "aaabbbbabababbbbabababbaabaa",
     0.0},
    {"acbcacbcacbcbbcbacabcaccbcabbbbaaabbcccbcbaabcbcabbaaaacabcccaabccbbbccabbabcbcbbcabacbbacbbb"
     "bbccacbabbaacbacbccacaaacbbcacaaabbaabcacccacccbabcacacbcacabbaabbcabbacbabacccaabbccbcbbbbbc"
     "aacbccaacaccbacbbaaacbcabacbbbccabbbbbcabbbbbbcbcbacbababcbaccaa",
     "bccbccabbaaaabccacccbcaccccccaaaccbcaaca", 0.2689655172413793},
    {"aababbbababababaabbbaababbaabaaabaaaaaaabababaabaabbbbaaaaaabbbababbbbaaababbbbbbbbabaabbabbb"
     "abbabbbbaabaabbbabbaababbab",
     "abbabaabbbbaaaaaabbbbaaabbabbaababbaaaababbbabababaabaaaabbbabaabbaabababaaaabbaaabbaaabaabba"
     "bbbbbabbbabaaabaaaaabababaabbbabababaaabababbbaaabbbabbabbbaaaabbababbbaaabbbaabaabbabababbab"
     "abaaaaaaaabbaaaabaaababbbbaabbabaabaababbaababbababbaaaaaaaaabbaaaababababaaababbbaaabaaaabba"
     "abbababbbabbbbababababaaabbaaaabbbaaabbaabaabaababbaaabababaabbbbaabbababbbbbbaabaabbabaabbbb"
     "babaaaabbabbbaaabbbaababbaba",
     0.0038461538461538464},
    {"abbabbabbbbbbbbbbabbbbababbaabbababaaabbbbbbbbbabbaaaabbbaabbbbbaabbbabaabbbabaabaaababaababb"
     "aaaaabbaabaaaaaaaabbbaabaab",
     "baabaababbaaababaaaaaaababbbbbaababbbbaaaaabbaabbbabbbbaabbababbbabababaaaaababbaabbabbabbaab"
     "abbbabaaaabbaababaaabaaabbaabaababbbbbabaabbbababbaababaabaababababaabbbbaabaaaaabababbababbb"
     "bbaababaabaaabaaabbbaabaabbaaababbaaababaabbaababbaaabbaabbaabbbbbaaaabbabbabbbabababbaaaaaba"
     "bbaaabbbabbababbaaaabaabbbabaaaaabbaabbaabaababaabbabaaabbabbababbbabaabbbbbabbaaabaabbbabbba"
     "aaaaabaabbabaaababaaabbaabaa",
     0.0},
    {"gdafaadhebcgbdbfcffaebdf  fhafbf fbadefdhahbahbbecc egce ehaafch haabcghchgd bff "
     "decadcfhfhgffafhfdadhaccegeb ef ca bdgbfedcbeff df gfaffh fddfccdahghgecbceee "
     "fbdbcefhfgbhfcee acedadaghde bddacabbfcade afadffahgfcagabfhgehaaffagfcbacdc bffgf  cfdehae",
     " h ", 0.023715415019762844},
    {" ecea hbfcdgbacba  d cefccc afdhhdfghdfa",
     "babgfadgggdaeaegddfdfgeehdcheceebfahdcfhdadfahcgceabcacec fbchgbgfgfaddaac dgbaafbbbhc gacd "
     "c  b fhbfddbecaeebad ag feafah e fgeggf ggcgggcad egddbbaag fh fhahh f gdgfbg efb deehf hdcb "
     "f d cfdcchcafgf",
     0.0},
    {"z)}",
     "y{{\n==);\ny)});y;\n;z=zx\nz{;=\n( {={})x=(x )x z)=){)();y=\n;y(z}) {x;}{x)}}\n ){(} z ( "
     "{y\n({yy;}}=};\nxy  ;;}};zy;};z=x\n((}=x\n)={};yy(y xy;y( ;x\n({;x=} "
     "z}x\nz{{(=xz=)=)y{})\n)=}=}\nx))(}}=))(zx(=\n{;\n; z{{(;=\n",
     0.0297029702970297},
    {"abbababbaabbbaaaabaaaabaaababaaaaabaaaab", "abb", 0.13953488372093023},
    {"xzxz;)( {=",
     "z)){=(z\n(}x{}z\n)(\n=y(;zz}{\n}yx{y\n(\n==y);{x;y(;))  =y(z;)( )x  "
     "yx{(z\n)xz{{;;({{zy)y=;y=yz };xxx= y}\nz} {y{\nz{z\ny{x\n;)z)yy(yz;)==y{;(z "
     "=x=){()}=(z(==(yxyx; ((yzz)x}} =y) yy\n ((( =x(y {yx( z){y; zx{}}xy(z=\nzz{z(((\n{yx;x;={y "
     "\ny(\nx{}y\n{ z;\n;z))x;\n z}}\n=) =\n\nyy)((( ;=(; \nx}\n}\n\n{}}y(\n\n{\n })x); xy;}} "
     ");z{=(y{}; x){y)z;}\n=(y(\n\nx}z}){z{z({ });{= (z}=xxzy(; \n){\ny==\n}z)\n}y= "
     "{;)){)\n\n\n}=\nx\n;;{xx\ny=};)=z ;x{;zx)",
     0.0},
    {"ccabacccbc",
     "abcabcbcaccbbcbcbbacbacbaacaabccacbacbbbcabbbacbbbacbbbbbbbaacbcbcabaabcbcccbabbbcbcbcabbaacc"
     "cbbcbbaacaccbcabacaccccabbcbbbbbbacacccbcbaabcabacaccacbbaccbcaaacacabaccbbacccbcbcacccbcaaba"
     "bccabaccaabaab",
     0.0},
    {"cabcccaacbababcbbccaacabcccaaaacbbbacbcacabbccbacabcbcbacbcabbcccbabcaababaaccabaccabaccbcacc"
     "ccaababacccccbcbcaccbbbaaca",
     "cbbacbabaabbbabbbaaccbcbabbcaacbcbccbaba", 0.25},
    {"acc", "cba", 0.3333333333333333},
    {"aaa",
     "bbbbaaaabbaaaabbbaabababbaabbaaaabaaaaaaababaaabbaababaaaaababaaaaaabbbaaaabaaabaabaaaaabbbbb"
     "abbaaaaaaabbbaaaaaabaabbbabbbabbaababbbaabababbaabaaaabbbbaabaaaabaaababbaababbabbaaabaaabbaa"
     "aaabaaabbbaab",
     0.0297029702970297},
    {"chbhffdagdbdffeadbbceecachbagebdabeaecff ccfeffc bdcegadddgfdheaabgfdeahhhbbh "
     "hbgbhhcdghabdbefhhdf ab dhdgbag ad c fdbbh",
     "ehhcbhfbdefbbhhec a aha dhcfcgfafcdahbhdaehcdefdbgacafhdbhf hdddhdehedfagcfgafcdacehh  gced "
     "begcc cfacdgcbhgedcegbagbaebeccgb ge bhdh f  dgbegcedgf ebahdfahhfchfdgbd ggcdffghfcddeba "
     "cggbhhf ffgfchacg",
     0.2884012539184953},
    {"e d",
     "ddfeecbhada g eabacbdacdcedaabbbdchfb ffeghefabecebbaecff hcd acggeadebhbbcdhhdbhgcaddbhde g "
     " faadad edhdcdeeccadhfegf eafbeaf dccdhadfb  fh ebbbgghbe dhfhgf hfabhbeca cbhaebfg bcgbaaec "
     "bbfc gcdcggffbdh bbeghdcehgdcdhb fdae hcffcfdgaadfaeaafdfefeffggebdagdacce",
     0.0},
    {"fggecd fafcfc a hfhhdffdbbbfaadfbbhadhgehgehffefb bhhgadddf fbahgacgbc e fbdadfgcgbgdfef ch  "
     "acg cca bfaad a d hc dcchagceedgd habafcd ed cdcdbhdeg ahahbb gcfhcd fgdddcgfgeecdhbcdfb "
     "ecghhhheh dh c cdbfgbgbfgffgch aahf ggec acfgfdfc  gcebcafhhhef af  ",
     "fhbfegeafgbf aefehcgabddacceddagebbc  bcgdahggbcceabacbaafcbhcbcdfdfbgfggehdhaccccfah ah "
     "ahhafg ca  chcgca  afgdggfhcfgdedaff efc hebhacgbge gabcbgebghebhfbahedbeefd   gehfghbacea "
     "cfgde ahhabbadhhbefccbc efccdhdeeadcebg hdbghfagdhh dec b fgcchhhefb hfcfbfgbche",
     0.00392156862745098},
    {" cfafdhbehffhd cfddeedbgad bd  bdbebdaeagbefa gf cadcdbdbe fggabgbe cgfaaag gcff cffe "
     "cccccbbce b hgh aadgcdadfdbhggfhad",
     "ah dacdbebfbfbgeb hdccegfb gcahbcae afab d gcddgehbdhadgbdgb effdefdagggbcbba debg "
     "hedbhhebhccbhgcacabbfdadefcfgechhcacb gdcebbgbdacafbef h de dhfcff  de c aggca eebhf hd  g "
     "eegaehfdhfehfbfddgefae aff",
     0.0},
    {" =\n",
     ")({{;yz;y{();xz{};)}z{z\nzz{)x\n({xzx}}(z{=yy);=} )x}}z}x{y{{z\nx ((x \n  ()y(((;  {yx {=\n "
     "y=;y((;)}{x(y{}(\n}({ (}\nx==));;;xx\n};(  z ;=}zy);y);(xyyyz{x}}=;){={zy==;y{)=((}{{  = ))y "
     "{y{\n=\n{z{\ny{z}x{(}xz\n(",
     0.0297029702970297},
    {")(z;z{xx}({\n}\nx;=;(=zy\nzz)\n=z z\n={)==z; ",
     "yz)))\n(=  (\n;{ z{;;=zx\nyy  x =z)yz=xx (;y;=(z({\n{ xz{{yyx yxz)\n))y(; )=xx)()y\n=;  "
     "z}=;};(())=(z)}x(y(;{;={=;x {}(z{;\n}z=z}z;=((\n({ y)){\ny;)}  ({}x))z==  "
     "\nzz)\ny\n};}\n}(yz}z=z{(\n}})zyz (z; =(;\n=;yx(;x\n ",
     0.2175732217573222},
};

struct JiebaCase {
  const char* sentence;
  std::vector<std::string> words;
};
const std::vector<JiebaCase> kJiebaCuts = {
    {"我来到北京清华大学", {"我", "来到", "北京", "清华大学"}},
    {"他来到了网易杭研大厦", {"他", "来到", "了", "网易", "杭研", "大厦"}},
    {"小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
     {"小明", "硕士", "毕业", "于", "中国科学院", "计算所", "，", "后", "在", "日本京都大学",
      "深造"}},
    {"iPhone 11售价5999元，涨幅3.5%左右",
     {"iPhone", " ", "11", "售价", "5999", "元", "，", "涨幅", "3.5%", "左右"}},
    {"Hello world!\r\n你好 世界\t",
     {"Hello", " ", "world", "!", "\r\n", "你好", " ", "世界", "\t"}},
    {"工信处女干事每月经过下属科室都要亲口交代24口交换机等技术性器件的安装工作",
     {"工信处", "女干事", "每月", "经过", "下属", "科室", "都", "要", "亲口", "交代", "24", "口",
      "交换机", "等", "技术性", "器件", "的", "安装", "工作"}},
    {"结婚的和尚未结婚的", {"结婚", "的", "和", "尚未", "结婚", "的"}},
    {"C++和c#是编程语言", {"C++", "和", "c#", "是", "编程语言"}},
    {"ＡＢＣ全角字母１２３", {"Ａ", "Ｂ", "Ｃ", "全角字", "母", "１", "２", "３"}},
    {"永和服装饰品有限公司", {"永和", "服装", "饰品", "有限公司"}},
    {"AT&T的B超", {"AT&T", "的", "B超"}},
    {"中华人民共和国万岁！", {"中华人民共和国", "万岁", "！"}},
    {"α和β", {"α", "和", "β"}},
};

bool jieba_available() {
  return std::filesystem::exists(std::filesystem::path(JiebaSegmenter::default_dir()) / "dict.txt");
}

#define KVB_REQUIRE_JIEBA()                                                           \
  do {                                                                                \
    if (!jieba_available())                                                           \
      GTEST_SKIP() << "jieba's data is missing (" << JiebaSegmenter::default_dir()    \
                   << "): install Debian's python3-jieba (harness/scripts/setup.sh)"; \
  } while (0)

double run_metric(const MetricCase& c, FuzzBackend backend) {
  const std::string m = c.metric;
  const py::Text pred = T(c.prediction), truth = T(c.ground_truth);
  if (m == "qa_f1_score") return qa_f1_score(pred, truth);
  if (m == "qa_f1_zh_score") return qa_f1_zh_score(pred, truth, JiebaSegmenter::shared());
  if (m == "rouge_score") return longbench_rouge_score(pred, truth);
  if (m == "rouge_zh_score") return longbench_rouge_zh_score(pred, truth);
  if (m == "retrieval_score") return retrieval_score(pred, truth);
  if (m == "retrieval_zh_score") return retrieval_zh_score(pred, truth);
  if (m == "count_score") return count_score(pred, truth);
  if (m == "code_sim_score") return code_sim_score(pred, truth, backend);
  if (m == "classification_score") {
    std::vector<py::Text> classes;
    for (const auto& name : c.all_classes) classes.push_back(T(name));
    return classification_score(pred, truth, classes);
  }
  ADD_FAILURE() << "no metric " << m;
  return -1;
}

TEST(LongBenchMetrics, MatchTheOfficialMetricCode) {
  for (const auto& c : kLongBenchCases) {
    const std::string m = c.metric;
    if ((m == "qa_f1_zh_score" || m == "rouge_zh_score") && !jieba_available()) continue;
    EXPECT_DOUBLE_EQ(run_metric(c, FuzzBackend::kDifflib), c.expected)
        << m << "(" << c.prediction << " | " << c.ground_truth << ")";
  }
}

TEST(LongBenchMetrics, ChineseMetricsNeedJieba) {
  KVB_REQUIRE_JIEBA();
  int chinese = 0;
  for (const auto& c : kLongBenchCases)
    chinese += std::string(c.metric).find("_zh") != std::string::npos;
  EXPECT_GE(chinese, 10);
}

TEST(LongBenchMetrics, CodeSimLevenshteinVariantMatchesFuzzywuzzyWithPythonLevenshtein) {
  for (const auto& c : kLevenshteinCodeSimCases)
    EXPECT_DOUBLE_EQ(run_metric(c, FuzzBackend::kLevenshtein), c.expected)
        << c.prediction << " | " << c.ground_truth;
  // The two backends disagree on this pair (0.29 with difflib).
  EXPECT_DOUBLE_EQ(code_sim_score(T("ccaacbb"), T("cababcc"), FuzzBackend::kDifflib), 0.29);
}

TEST(LongBenchMetrics, RougeRecursionLimitAsInEvalPy) {
  // A reconstruction needing 991 Python frames succeeds, 992 raises RecursionError -> 0.0.
  const auto hypothesis = [](int words) {
    std::string s = "w0";
    for (int i = 1; i < words; ++i) s += " h" + std::to_string(i);
    return s;
  };
  EXPECT_DOUBLE_EQ(longbench_rouge_score(T(hypothesis(990)), T("w0")), 0.002018163451079901);
  EXPECT_DOUBLE_EQ(longbench_rouge_score(T(hypothesis(991)), T("w0")), 0.0);
}

TEST(SequenceMatcher, RatioMatchesDifflibIncludingAutojunk) {
  for (const auto& c : kDifflibRatios)
    EXPECT_DOUBLE_EQ(sequence_matcher_ratio(T(c.a), T(c.b)), c.expected) << c.a << " | " << c.b;
  EXPECT_DOUBLE_EQ(sequence_matcher_ratio(T(""), T("")), 1.0);
  EXPECT_EQ(fuzz_ratio(T("abcdefgh"), T("ijklmnoa")), 12);  // 12.5 rounds half to even
  EXPECT_EQ(fuzz_ratio(T(""), T("")), 100);
  EXPECT_EQ(fuzz_ratio(T("a"), T("")), 0);
}

TEST(Jieba, CutMatchesJieba0421) {
  KVB_REQUIRE_JIEBA();
  const JiebaSegmenter& jieba = JiebaSegmenter::shared();
  for (const auto& c : kJiebaCuts) {
    std::vector<std::string> words;
    for (const auto& w : jieba.cut(T(c.sentence))) words.push_back(py::to_utf8(w));
    EXPECT_EQ(words, c.words) << c.sentence;
  }
}

TEST(Jieba, MissingDictionaryIsAClearUnsupportedError) {
  try {
    JiebaSegmenter segmenter("/nonexistent/jieba");
    FAIL() << "expected an error";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("python3-jieba"), std::string::npos) << e.what();
  }
}

TEST(LongBenchMetrics, RetrievalAnswerWithoutParagraphIdIsAnError) {
  EXPECT_THROW(retrieval_score(T("1"), T("no id here")), InputError);
}

TEST(PythonText, StrMethodsFollowCPython) {
  EXPECT_EQ(py::split_whitespace(T(" a\u00a0b\x1c"
                                   "c  ")),
            (std::vector<py::Text>{T("a"), T("b"), T("c")}));
  EXPECT_EQ(py::split(T("a  b"), T(" ")), (std::vector<py::Text>{T("a"), T(""), T("b")}));
  EXPECT_EQ(py::to_utf8(py::lower(T("ÀÉÎ İ ΣΑ"))), "àéî i\u0307 σα");
  EXPECT_TRUE(py::is_decimal_digit(U'\uFF11'));  // full-width 1
  EXPECT_EQ(py::parse_int(T(" -1_000 ")), -1000);
  EXPECT_FALSE(py::parse_int(T("1__0")).has_value());
  EXPECT_EQ(py::parse_int(T("\uFF11\uFF12")), 12);
  EXPECT_EQ(py::to_utf8(py::from_utf8("a\xff"
                                      "b")),
            "a\uFFFD"
            "b");
}

TEST(RulerMetrics, StringMatchAllAndPart) {
  const std::vector<py::Text> refs = {T("8080621"), T("ABCDE")};
  // evaluate.py postprocess: control characters become newlines, then strip.
  EXPECT_EQ(py::to_utf8(ruler_postprocess(T("  x\x01y\t"))), "x\ny");
  EXPECT_DOUBLE_EQ(string_match_all(T("the numbers are 8080621 and abcde"), refs), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all(T("8080621"), refs), 0.5);
  EXPECT_DOUBLE_EQ(string_match_part(T("abcde!"), refs), 1.0);
  EXPECT_DOUBLE_EQ(string_match_part(T("nothing"), refs), 0.0);
}

// Stems printed by NLTK 3.10.4's PorterStemmer() and NIAH scores printed by rouge_score 0.1.2's
// RougeScorer(["rouge1", "rougeL"], use_stemmer=True).score(needle, response)["rouge1"].fmeasure *
// 10 (tests/datasets/reference/expected_niah.py). Beyond these cases, all 15,648 distinct tokens
// longer than 3 letters of the fixture essays and word lists stemmed identically when this was
// written.
const std::vector<std::pair<std::string, std::string>> kPorterStems = {
    {"skies", "sky"},
    {"dying", "die"},
    {"caresses", "caress"},
    {"ponies", "poni"},
    {"ties", "tie"},
    {"cats", "cat"},
    {"feed", "feed"},
    {"agreed", "agre"},
    {"plastered", "plaster"},
    {"motoring", "motor"},
    {"sing", "sing"},
    {"conflated", "conflat"},
    {"troubled", "troubl"},
    {"sized", "size"},
    {"hopping", "hop"},
    {"tanned", "tan"},
    {"falling", "fall"},
    {"hissing", "hiss"},
    {"fizzed", "fizz"},
    {"failing", "fail"},
    {"filing", "file"},
    {"happy", "happi"},
    {"sky", "sky"},
    {"relational", "relat"},
    {"conditional", "condit"},
    {"rational", "ration"},
    {"valenci", "valenc"},
    {"hesitanci", "hesit"},
    {"digitizer", "digit"},
    {"conformabli", "conform"},
    {"radicalli", "radic"},
    {"differentli", "differ"},
    {"vileli", "vile"},
    {"analogousli", "analog"},
    {"vietnamization", "vietnam"},
    {"predication", "predic"},
    {"operator", "oper"},
    {"feudalism", "feudal"},
    {"decisiveness", "decis"},
    {"hopefulness", "hope"},
    {"callousness", "callous"},
    {"formaliti", "formal"},
    {"sensitiviti", "sensit"},
    {"sensibiliti", "sensibl"},
    {"triplicate", "triplic"},
    {"formative", "form"},
    {"formalize", "formal"},
    {"electriciti", "electr"},
    {"electrical", "electr"},
    {"hopeful", "hope"},
    {"goodness", "good"},
    {"revival", "reviv"},
    {"allowance", "allow"},
    {"inference", "infer"},
    {"airliner", "airlin"},
    {"gyroscopic", "gyroscop"},
    {"adjustable", "adjust"},
    {"defensible", "defens"},
    {"irritant", "irrit"},
    {"replacement", "replac"},
    {"adjustment", "adjust"},
    {"dependent", "depend"},
    {"adoption", "adopt"},
    {"homologou", "homolog"},
    {"communism", "commun"},
    {"activate", "activ"},
    {"angulariti", "angular"},
    {"homologous", "homolog"},
    {"effective", "effect"},
    {"bowdlerize", "bowdler"},
    {"probate", "probat"},
    {"rate", "rate"},
    {"cease", "ceas"},
    {"controll", "control"},
    {"roll", "roll"},
    {"enjoying", "enjoy"},
    {"syzygy", "syzygi"},
    {"yearly", "yearli"},
    {"biology", "biolog"},
    {"fully", "fulli"},
    {"logically", "logic"},
    {"sandwiches", "sandwich"},
    {"francisco", "francisco"},
    {"dolores", "dolor"},
    {"sunny", "sunni"},
    {"thing", "thing"},
};
const std::vector<std::pair<std::string, double>> kNiahRouge1Cases = {
    {"eat a sandwich and sit in Dolores Park on a sunny day.", 7.272727272727273},
    {"Eating sandwiches and sitting in the park on sunny days!", 6.451612903225806},
    {"The best thing to do in San Francisco is: go to the Golden Gate Bridge.", 5.0},
    {"I don't know.", 0.0},
    {"The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny "
     "day.",
     10.0},
};

TEST(PorterStemmer, MatchesNltkDefaultMode) {
  for (const auto& [word, stem] : kPorterStems) EXPECT_EQ(porter_stem(word), stem) << word;
}

TEST(NiahMetrics, StoredRouge1ScoreAsKvCacheFactory) {
  for (const auto& [response, expected] : kNiahRouge1Cases)
    EXPECT_DOUBLE_EQ(niah_rouge1_f_times_10(T(response), py::T(kNiahNeedle)), expected) << response;
  EXPECT_DOUBLE_EQ(niah_rouge1_f_times_10(T("  "), py::T(kNiahNeedle)), 0.0);
}

TEST(NiahMetrics, WordRecallAsKvCacheFactoryVisualize) {
  const py::Text expected(kNiahExpectedAnswer);
  // 11 distinct words (|set| of the split; "a" twice); "day." keeps its period, so "day" misses.
  EXPECT_DOUBLE_EQ(
      niah_word_recall(T("Eat a sandwich and sit in Dolores Park on a sunny day."), expected), 1.0);
  EXPECT_DOUBLE_EQ(
      niah_word_recall(T("eat a sandwich and sit in dolores park on a sunny day"), expected),
      10.0 / 11.0);
  EXPECT_DOUBLE_EQ(
      niah_substring_match(
          T("The best thing: EAT A SANDWICH AND SIT IN DOLORES PARK ON A SUNNY DAY."), expected),
      1.0);
  EXPECT_DOUBLE_EQ(niah_substring_match(T("sandwich"), expected), 0.0);
}

TEST(InfiniteBenchRouge, RougeLsumCountsTokenBudgets) {
  // LCS of [a a b] against [a b a] has length 2 (ref indices {0, 2} or {1, 2}); with the per-token
  // budgets the hits are 2, so R = P = F = 2/3.
  EXPECT_NEAR(rouge_lsum_f(T("a a b"), T("a b a")), 2.0 / 3.0, 1e-12);
  EXPECT_EQ(rouge_score_tokenize(T("Hello, WORLD-42 café")),
            (std::vector<py::Text>{T("hello"), T("world"), T("42"), T("caf")}));
}

}  // namespace
}  // namespace kvb
