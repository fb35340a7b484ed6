import json, collections, re, sys
rows=[json.loads(l) for l in open(sys.argv[1])]
def qs(t): return re.findall(r'<question>(.*?)</question>', t)
catall=collections.Counter()
for r in rows:
    q=qs(r['text']); gold=[g[0] for g in r['gold']]
    ok = r['verdict']==r['label']
    if q==gold: c='exact_chain'
    elif q[:len(gold)]==gold: c='chain+extra'
    elif len(q)<len(gold) and q==gold[:len(q)]: c='early_stop'
    else:
        i=next(i for i,(a,b) in enumerate(zip(q+['<none>']*9,gold)) if a!=b); c=f'diverge_at_{i}'
    catall[(c,ok)]+=1
for k,v in sorted(catall.items()): print(k,v)
qpc=collections.defaultdict(list)
for r in rows: qpc[r['hops']].append(r['questions'])
print({h: sum(v)/len(v) for h,v in sorted(qpc.items())})
print('no verdict', sum(r['verdict'] is None for r in rows), collections.Counter(r['finish'] for r in rows))
def results(t): return [x.strip() for x in re.findall(r'<result>(.*?)</result>', t, re.S)]
good=bad=0; badex=collections.Counter()
for r in rows:
    gold=dict(r['gold'])
    for q,res in zip(qs(r['text']), results(r['text'])):
        if q in gold:
            if gold[q] in res: good+=1
            else: bad+=1; badex[q.split()[0]+' '+q.split()[1]]+=1
print('search reports right on gold questions', good, 'wrong', bad, badex.most_common(5))
