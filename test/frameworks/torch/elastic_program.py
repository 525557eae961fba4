"""Run by elastic_test.py under `tower elastic`: a PyTorch program that checkpoints through
tower.torch.Checkpoints (its directory, and whether to resume, come from the launcher), writes
each rank's pid into PIDS for the test to kill one, and prints its parameters' sum at the end.
Usage: elastic_program.py PIDS STEPS EVERY"""
import os
import sys
import time

import torch
import torch.nn.functional as F

import tower.torch as hvd
from lines import say

pids, steps, every = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
hvd.init(stall_warn_s=5, stall_abort_s=30)
R = hvd.rank()
with open(os.path.join(pids, f"rank-{R}"), "w") as f:
    f.write(str(os.getpid()))
torch.set_num_threads(1)
GLOBAL_BATCH = 24

torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(12, 32), torch.nn.Tanh(), torch.nn.Linear(32, 5))
opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
checkpoints = hvd.Checkpoints(opt)
start, _ = checkpoints.restore()
per = GLOBAL_BATCH // hvd.size()
for step in range(start, steps):
    # The same global batch at every step whatever the size: each rank takes its share.
    g = torch.Generator().manual_seed(1000 + step)
    x, y = torch.randn(GLOBAL_BATCH, 12, generator=g), torch.randint(0, 5, (GLOBAL_BATCH,), generator=g)
    opt.zero_grad()
    F.cross_entropy(model(x[R * per:(R + 1) * per]), y[R * per:(R + 1) * per]).backward()
    opt.step()
    if (step + 1) % every == 0:
        checkpoints.save(step + 1)
    time.sleep(0.02)  # long enough a run for the test to kill a rank in the middle
checkpoints.wait()
total = sum(p.detach().double().sum().item() for p in model.parameters())
if R == 0:
    say(f"final: {hvd.size()} ranks from step {start}, parameter sum {total:.12e}")
hvd.shutdown()
