# The fourth call's script, as run (inline, `python3 - > $OUT/profile_r18_224.txt`): FCPTS on a random-weight
# ResNet-18 at 224 px, batch 64, on the GPU; whole-run times, one batch's fetch + stack + copy, and a torch profile
# of a 12-iteration run (its set-up and export included, so not a per-step profile).
import torch, copy, time
from torch.profiler import profile, ProfilerActivity
from torch.utils.data import Dataset
from benchmarks.speed import step_time as st
import fcpts
class Imgs(Dataset):
    def __init__(s, x): s.x = x
    def __len__(s): return len(s.x)
    def __getitem__(s, i): return s.x[i]
m, _, _ = st.model_and_images("resnet18"); m = m.cuda()
x = torch.randn(64, 3, 224, 224)
def run(n, **kw):
    t = time.perf_counter()
    _, rep = fcpts.sparsify(copy.deepcopy(m), Imgs(x), 0.9, iterations=n, batch_size=64, progress=False, log_every=1, device="cuda", **kw)
    return rep, time.perf_counter() - t
run(4)
for n in (10, 30):
    rep, wall = run(n)
    print(n, "iters wall", round(wall, 2), "median step ms", round(1000 * sorted(h["step_s"] for h in rep.history)[n // 2], 2))
t = time.perf_counter()
for _ in range(10):
    b = torch.stack([x[i] for i in range(64)]).cuda(); torch.cuda.synchronize()
print("fetch+stack+H2D ms", round(100 * (time.perf_counter() - t), 2))
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
    run(12)
ka = prof.key_averages()
print(ka.table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=50))
print(ka.table(sort_by="self_cuda_time_total", row_limit=20, max_name_column_width=50))
