# rougeLsum expected values (InfiniteBench longbook_sum_eng) from Google's rouge_score 0.1.2, as HF
# evaluate's "rouge" calls it: RougeScorer(["rougeLsum"], use_stemmer=False).score_multi(refs, pred).
# Run: /tmp/scoring-venv/bin/python expected_lsum.py
import json
from rouge_score import rouge_scorer
sc = rouge_scorer.RougeScorer(["rougeLsum"], use_stemmer=False)
def c(s): return json.dumps(s, ensure_ascii=False)
for refs, pred in [
    (["The cat sat on the mat.\nIt was happy."], "A cat was on a mat.\nThe cat was happy!"),
    (["first line\n\nsecond line here"], "second line\nfirst line"),
    (["Café au lait, naïve résumé."], "cafe au lait naive resume"),
    (["one two three", "completely different words"], "different words entirely"),
    (["the the the cat"], "the cat the"),
    (["x y z"], "\n\n"),
    (["alpha beta. gamma delta\nepsilon"], "alpha gamma\nbeta delta epsilon alpha"),
]:
    f = sc.score_multi(refs, pred)["rougeLsum"].fmeasure
    print(f"    {{{{{', '.join(c(r) for r in refs)}}}, {c(pred)}, {f!r}}},")
