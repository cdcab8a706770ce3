# Porter stems (NLTK 3.10.4 PorterStemmer(), NLTK_EXTENSIONS) and KVCache-Factory's stored NIAH
# score: RougeScorer(['rouge1', 'rougeL'], use_stemmer=True).score(needle, response)['rouge1'].fmeasure * 10
# Run: /tmp/scoring-venv/bin/python expected_niah.py
import json
from nltk.stem.porter import PorterStemmer
from rouge_score import rouge_scorer
def c(s): return json.dumps(s, ensure_ascii=False)
p = PorterStemmer()
words = ["skies", "dying", "caresses", "ponies", "ties", "cats", "feed", "agreed", "plastered", "motoring", "sing",
         "conflated", "troubled", "sized", "hopping", "tanned", "falling", "hissing", "fizzed", "failing", "filing",
         "happy", "sky", "relational", "conditional", "rational", "valenci", "hesitanci", "digitizer", "conformabli",
         "radicalli", "differentli", "vileli", "analogousli", "vietnamization", "predication", "operator", "feudalism",
         "decisiveness", "hopefulness", "callousness", "formaliti", "sensitiviti", "sensibiliti", "triplicate",
         "formative", "formalize", "electriciti", "electrical", "hopeful", "goodness", "revival", "allowance",
         "inference", "airliner", "gyroscopic", "adjustable", "defensible", "irritant", "replacement", "adjustment",
         "dependent", "adoption", "homologou", "communism", "activate", "angulariti", "homologous", "effective",
         "bowdlerize", "probate", "rate", "cease", "controll", "roll", "enjoying", "syzygy", "yearly", "biology",
         "fully", "logically", "sandwiches", "francisco", "dolores", "sunny", "thing"]
print("// stems")
for w in words:
    print(f"    {{{c(w)}, {c(p.stem(w))}}},")
scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
needle = "\nThe best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.\n"
print("// niah")
for r in ["eat a sandwich and sit in Dolores Park on a sunny day.", "Eating sandwiches and sitting in the park on sunny days!",
          "The best thing to do in San Francisco is: go to the Golden Gate Bridge.", "I don't know.",
          "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."]:
    print(f"    {{{c(r)}, {scorer.score(needle, r)['rouge1'].fmeasure * 10!r}}},")
