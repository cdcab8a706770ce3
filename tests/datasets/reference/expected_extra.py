# More expected values for tests/datasets/metrics_test.cc: difflib ratios of random pairs and
# jieba.cut segmentations. Run: /tmp/scoring-venv/bin/python expected_extra.py
import difflib, json, random, logging
import jieba; jieba.setLogLevel(logging.ERROR)
def c(s): return json.dumps(s, ensure_ascii=False)
rng = random.Random(7)
print("// difflib")
for n in range(24):
    alphabet = rng.choice(["ab", "abc", "abcdefgh ", "xyz(){};= \n"])
    la = rng.choice([3, 10, 40, 120, 250]); lb = rng.choice([3, 10, 40, 199, 200, 260, 400])
    a = ''.join(rng.choice(alphabet) for _ in range(la)); b = ''.join(rng.choice(alphabet) for _ in range(lb))
    print(f"    {{{c(a)}, {c(b)}, {difflib.SequenceMatcher(None, a, b).ratio()!r}}},")
print("// jieba")
for s in ["我来到北京清华大学", "他来到了网易杭研大厦", "小明硕士毕业于中国科学院计算所，后在日本京都大学深造",
          "iPhone 11售价5999元，涨幅3.5%左右", "Hello world!\r\n你好 世界\t", "工信处女干事每月经过下属科室都要亲口交代24口交换机等技术性器件的安装工作",
          "结婚的和尚未结婚的", "C++和c#是编程语言", "ＡＢＣ全角字母１２３", "永和服装饰品有限公司", "AT&T的B超", "中华人民共和国万岁！", "α和β"]:
    print(f"    {{{c(s)}, {{{', '.join(c(w) for w in jieba.cut(s, cut_all=False))}}}}},")
