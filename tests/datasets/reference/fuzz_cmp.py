import json, random, subprocess, sys, warnings
# The kvbench binary under test: $KVBENCH, else build/kvbench of this checkout.
import os
KVBENCH = os.environ.get('KVBENCH', os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', 'build', 'kvbench'))
warnings.filterwarnings('ignore')
sys.path.insert(0,'/tmp/lbref')
import logging, jieba; jieba.setLogLevel(logging.ERROR)
import metrics as M
rng=random.Random(11)
def rnd_text(vocab, n, dot=0.15):
    out=[]
    for _ in range(n):
        w=rng.choice(vocab)
        if rng.random()<dot: w+='.'
        out.append(w)
    return rng.choice([' ','  ','\n']).join(out)
cases={'gov_report':[], 'narrativeqa':[], 'lcc':[], 'dureader':[], 'multifieldqa_zh':[]}
en=['a','the','cat','Cat','dog,','an','sat','on','mat','x','y','z','The','über','naïve']
code=list('abc(){};= x\n#/`')
zh=['我','来到','北京','清华大学','的','学生','了','网易','杭研','大厦','，','。','今天','天气','很','好','A','1','2.5%',' ']
for i in range(300):
    cases['gov_report'].append((rnd_text(en, rng.randint(0,40)), rnd_text(en, rng.randint(1,40))))
    cases['narrativeqa'].append((rnd_text(en, rng.randint(0,12),0), rnd_text(en, rng.randint(1,8),0)))
    cases['lcc'].append((''.join(rng.choice(code) for _ in range(rng.randint(0,60))), ''.join(rng.choice(code[:-3]) for _ in range(rng.randint(1,250)))))
    cases['dureader'].append((''.join(rng.choice(zh) for _ in range(rng.randint(0,30))), ''.join(rng.choice(zh) for _ in range(rng.randint(1,30)))))
    cases['multifieldqa_zh'].append((''.join(rng.choice(zh) for _ in range(rng.randint(0,15))), ''.join(rng.choice(zh) for _ in range(rng.randint(1,10)))))
fn={'gov_report':M.rouge_score,'narrativeqa':M.qa_f1_score,'lcc':M.code_sim_score,'dureader':M.rouge_zh_score,'multifieldqa_zh':M.qa_f1_zh_score}
bad=0
for ds, cs in cases.items():
    with open(f'/tmp/lbref/fz_{ds}.jsonl','w') as f:
        for p,g in cs: f.write(json.dumps({"pred":p,"answers":[g],"all_classes":None})+"\n")
    out=json.loads(subprocess.run([KVBENCH,'score','--benchmark','longbench','--dataset',ds,'--predictions',f'/tmp/lbref/fz_{ds}.jsonl','--json','--per-sample'],capture_output=True,text=True).stdout)
    for (p,g),v in zip(cs,out['per_sample']):
        e=fn[ds](p,g)
        if abs(e-v)>1e-12:
            bad+=1
            if bad<8: print(ds, repr(p)[:80], repr(g)[:80], e, v)
    print(ds, 'done')
print('mismatches', bad)
