import json, random, subprocess, sys, warnings
# The kvbench binary under test: $KVBENCH, else build/kvbench of this checkout.
import os
KVBENCH = os.environ.get('KVBENCH', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'build', 'kvbench'))
warnings.filterwarnings('ignore'); sys.path.insert(0,'/tmp/lbref')
import metrics as M
rng=random.Random(5)
bad=0
for trial in range(40):
    base=['ab','abc','b','bc','c','abcd','d','cd']
    classes=rng.sample(base, rng.randint(2,7))
    recs=[]
    for _ in range(30):
        p=''.join(rng.choice('abcd ') for _ in range(rng.randint(0,10)))
        g=rng.choice(classes)
        recs.append((p,g))
    with open('/tmp/lbref/fz_trec.jsonl','w') as f:
        for p,g in recs: f.write(json.dumps({"pred":p,"answers":[g],"all_classes":classes})+"\n")
    out=json.loads(subprocess.run([KVBENCH,'score','--benchmark','longbench','--dataset','trec','--predictions','/tmp/lbref/fz_trec.jsonl','--json','--per-sample'],capture_output=True,text=True).stdout)
    for (p,g),v in zip(recs,out['per_sample']):
        e=M.classification_score(p.lstrip('\n').split('\n')[0],g,all_classes=classes)
        if abs(e-v)>1e-12:
            bad+=1; print(classes,p,g,e,v)
print('mismatches',bad)
