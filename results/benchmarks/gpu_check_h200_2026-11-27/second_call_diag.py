"""Why the graph-vs-eager test failed: per-layer steps_on, max weight diff, final losses."""
import copy, sys
import torch
from baselines.pot import POTOptions, pot
from fcpts.core.masks import prunable_layers
from tasks.grid.cifar_models import cifar_resnet

for gram in (True, False):
    torch.manual_seed(0)
    model = cifar_resnet("resnet20")
    x = torch.randn(256, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    opts = dict(iterations=300, batch_size=64, lr_weight=1e-3, lr_bias=1e-3, early_stop_loss=0.0, gram=gram)
    runs = {}
    for graphs in (False, True):
        try:
            runs[graphs] = pot(copy.deepcopy(model), x, 0.8, POTOptions(progress=False, device="cuda", cuda_graphs=graphs, **opts))
        except Exception as e:
            print("gram", gram, "graphs", graphs, "RAISED", type(e).__name__, str(e)[:800]); runs[graphs] = None
    if None in runs.values():
        continue
    (ea, er), (ga, gr) = runs[False], runs[True]
    print("gram", gram, "steps_on", sorted({r["steps_on"] for r in gr.per_layer}), sorted({r["steps_on"] for r in er.per_layer}))
    for (name, a), b, ra, rb in zip(prunable_layers(ea).items(), prunable_layers(ga).values(), er.per_layer, gr.per_layer):
        d = (a.weight - b.weight).abs().max().item(); s = a.weight.abs().max().item()
        print(f"  {name:28s} maskeq {torch.equal(a.weight != 0, b.weight != 0)} maxdiff {d:.3e} scale {s:.3e} it {ra['iterations']} {rb['iterations']} loss {ra['final_loss']:.6e} {rb['final_loss']:.6e}")
sys.stdout.flush()
