# Expected values for tests/datasets/metrics_test.cc, from the official LongBench metric functions.
# Run: /tmp/scoring-venv/bin/python expected.py          (difflib-backed fuzzywuzzy)
#      /tmp/lev-venv/bin/python expected.py --levenshtein (fuzzywuzzy with python-Levenshtein)
import sys, json
sys.path.insert(0, '/tmp/lbref')
import warnings; warnings.filterwarnings('ignore')
import logging
import jieba; jieba.setLogLevel(logging.ERROR)
import metrics as M

def c(s):  # C++ u8 literal
    return json.dumps(s, ensure_ascii=False)

def emit(fn, pred, gt, **kw):
    v = getattr(M, fn)(pred, gt, **kw)
    extra = ''
    if 'all_classes' in kw: extra = ', {' + ', '.join(c(x) for x in kw['all_classes']) + '}'
    print(f'    {{"{fn}", {c(pred)}, {c(gt)}{extra}, {float(v)!r}}},')

if '--levenshtein' in sys.argv:
    for a, b in [("abcdefgh", "ijklmnoa"), ("return self.x + 1", "return self.y+1"), ("for i in range(n):", "for j in range(m):"),
                 ("int main(int argc, char** argv) {", "int main() {"), ("xaaaybbbb", "bbbbxaaay"), ("ccaacbb", "cababcc")]:
        emit('code_sim_score', a, b)
    sys.exit()

cases = []
# qa_f1
for p, g in [("The cat sat on a mat.", "cat on the mat"), ("U.S.A.", "USA"), ("ÉCOLE Normale", "école normale"),
             ("théa an", "théa"), ("a-b", "ab"), ("foo\u00a0bar\u3000baz", "foo bar"), ("nothing here", "else"),
             ("the the cat cat cat", "cat"), ("an apple and the pear", "apple pear"), ("Anna", "anna a"),
             ("İstanbul", "i̇stanbul"), ("__the__ x", "the x")]:
    emit('qa_f1_score', p, g)
# qa_f1_zh
for p, g in [("北京大学的学生", "北京大学"), ("他来到了网易杭研大厦", "网易杭研大厦"), ("我来到北京清华大学", "清华大学"),
             ("iPhone 11售价5999元，很贵。", "5999元"), ("小明硕士毕业于中国科学院计算所，后在日本京都大学深造", "中国科学院计算所"),
             ("A.B.C", "a b c"), ("结婚的和尚未结婚的", "尚未结婚")]:
    emit('qa_f1_zh_score', p, g)
# rouge (pltrdy)
for p, g in [("the cat sat on the mat", "the cat is on the mat"), ("The Cat", "the cat"), ("a nice day,", "a nice day"),
             ("...", "a b"), ("", "a b"), ("a b", "..."), ("a. . b", "a b"), ("x x x y", "x y y"),
             ("one two. three four five. six", "one three. five six seven"), ("w w. w", "w"),
             ("  spaced   out  words ", "spaced words")]:
    emit('rouge_score', p, g)
def scorer_like_eval_py(p, g):  # eval.py: <module> -> scorer -> dataset2metric[...] (same depth)
    return M.rouge_score(p, g)
# recursion depth: hypothesis "w0 h1 .. h{k-1}" against reference "w0"
for k in (990, 991):
    p = " ".join(["w0"] + [f"h{i}" for i in range(1, k)])
    v = scorer_like_eval_py(p, "w0")
    print(f'    // recursion probe: {k} hypothesis words -> {v!r}')
# rouge_zh
for p, g in [("会议讨论了预算问题。大家同意增加投入。", "会议讨论了预算。"), ("今天天气很好", "今天天气不好"), ("。。。", "好")]:
    emit('rouge_zh_score', p, g)
# classification
trec = ["Abbreviation", "Manner", "action", "Manner of an action", "Other", "Other number"]
for p, g in [("Manner of an action", "Manner of an action"), ("Other number", "Other number"), ("Other", "Other number"),
             ("Abbreviation or Other", "Other"), ("nothing", "Other"), ("Manner action Other number", "Other number")]:
    emit('classification_score', p, g, all_classes=trec)
lsht = ["体育", "体育新闻", "财经", "新闻"]
for p, g in [("体育新闻", "体育新闻"), ("财经新闻", "财经")]:
    emit('classification_score', p, g, all_classes=lsht)
# retrieval, count
for p, g in [("Paragraph 12", "Paragraph 12"), ("Paragraph 12 or Paragraph 3", "Paragraph 12"), ("no idea", "Paragraph 2"),
             ("Paragraph １２", "Paragraph 12"), ("1212", "Paragraph 12")]:
    emit('retrieval_score', p, g)
for p, g in [("段落5", "段落5"), ("段落5和段落15", "段落5")]:
    emit('retrieval_zh_score', p, g)
for p, g in [("12", "12"), ("There are 12 unique paragraphs out of 20", "12"), ("twelve", "12"), ("012", "12")]:
    emit('count_score', p, g)
# code_sim (difflib)
long_gt = "    " + "x = foo(a, b, c) + bar(d, e, f) " * 8
for p, g in [("abcdefgh", "ijklmnoa"), ("\n\n```python\n# comment\nreturn self.x + 1\n", "return self.x+1"),
             ("// c\n#x\n`y`", ""), ("// c\n#x", "anything"), ("", ""), ("return self.x + 1", "return self.y+1"),
             ("for i in range(n):", "for j in range(m):"), ("int main(int argc, char** argv) {", "int main() {"),
             ("x = foo(a, b, c) + bar(d, e, f)", long_gt), ("a\nb", "b"), ("xaaaybbbb", "bbbbxaaay"), ("ccaacbb", "cababcc"),
             ("def f(x):", "def f(x):" + " " * 195 + "return x"), ("return " + "a" * 150, "return " + "ab" * 100)]:
    emit('code_sim_score', p, g)
