# Usage: zh_real.py PATH/gpt4_preds_longbook_qa_chn.jsonl (InfiniteBench's published GPT-4 answers).
import json, subprocess, sys, warnings, logging
# The kvbench binary under test: $KVBENCH, else build/kvbench of this checkout.
import os
KVBENCH = os.environ.get('KVBENCH', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'build', 'kvbench'))
warnings.filterwarnings('ignore'); sys.path.insert(0,'/tmp/lbref')
import jieba; jieba.setLogLevel(logging.ERROR)
import metrics as M
recs=[json.loads(l) for l in open(sys.argv[1]) if l.strip()]
for ds, fn in [('multifieldqa_zh', M.qa_f1_zh_score), ('dureader', M.rouge_zh_score)]:
    with open('/tmp/lbref/zh_real.jsonl','w') as f:
        for r in recs: f.write(json.dumps({"pred": r["prediction"], "answers": r["ground_truth"], "all_classes": None})+"\n")
    out=json.loads(subprocess.run([KVBENCH,'score','--benchmark','longbench','--dataset',ds,'--predictions','/tmp/lbref/zh_real.jsonl','--json','--per-sample'],capture_output=True,text=True).stdout)
    bad=0
    for r,v in zip(recs,out['per_sample']):
        e=max(fn(r["prediction"], g) for g in r["ground_truth"])
        if abs(e-v)>1e-12: bad+=1; print(ds, r["prediction"][:50], e, v)
    print(ds, len(recs), 'mismatches', bad)
# segmentation of whole long texts
texts=[r["prediction"] for r in recs]
open('/tmp/lbref/zh_seg_expected.json','w').write(json.dumps([list(jieba.cut(t)) for t in texts], ensure_ascii=False))
