"""Run under mpirun by torch_test.py: examples/torch/gpt.py's model, given tower's GPT's initial
weights and batches (gpt_dump), trained through tower.torch with torch's AdamW at this many ranks,
follows the losses of tower's own GPT trained alone with tower's AdamW, step by step.
Usage: gpt_example.py DUMP_PREFIX"""
import json
import os
import sys

import numpy as np
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "../../../examples/torch"))
from gpt import Gpt  # noqa: E402

import tower.torch as hvd  # noqa: E402
from lines import say  # noqa: E402


# torch's AdamW adds epsilon after the bias correction, tower's before it: at these gradients the
# difference is below float32's rounding. What remains is summation order, which gpt_vs_torch.py
# measured at 2e-5 over 200 steps in one process (its bound 1e-4).
CURVE_TOL = 1e-4

hvd.init()
torch.set_num_threads(1)
prefix = sys.argv[1]
index = json.load(open(prefix + ".json"))
raw = open(prefix + ".bin", "rb").read()
tensors = {}
for t in index["tensors"]:
    dtype = {"f32": np.float32, "i32": np.int32}[t["dtype"]]
    count = int(np.prod(t["shape"])) if t["shape"] else 1
    tensors[t["name"]] = np.frombuffer(raw, dtype=dtype, count=count, offset=t["offset"]).reshape(t["shape"])
cfg = index["config"]
model = Gpt(cfg["layers"], cfg["width"], cfg["heads"], cfg["context"])
with torch.no_grad():
    for name, p in model.named_parameters():
        tower_name = name[:-len(".weight")] if name in ("wte.weight", "wpe.weight") else name
        p.copy_(torch.from_numpy(tensors["init/" + tower_name].copy()))
opt = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], betas=(cfg["beta1"], cfg["beta2"]), eps=cfg["epsilon"],
                        weight_decay=cfg["weight_decay"])
opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters(), fusion_mb=0.05)
R, N = hvd.rank(), hvd.size()
per = cfg["batch"] // N
worst = (0.0, -1)
for s in range(cfg["steps"]):
    tokens = torch.from_numpy(tensors[f"steps/{s}"].astype(np.int64))[R * per:(R + 1) * per]
    opt.zero_grad()
    loss = model(tokens)
    loss.backward()
    opt.step()
    mean = hvd.allreduce(loss.detach(), name="loss").item()
    worst = max(worst, (abs(mean - tensors["losses"][s]) / tensors["losses"][s], s))
ok = worst[0] <= CURVE_TOL
say(f"rank {R}/{N}: {cfg['steps']} steps, loss {tensors['losses'][0]:.4f} -> {tensors['losses'][-1]:.4f} in tower "
      f"train's GPT; largest gap {worst[0]:.2e} at step {worst[1]} (bound {CURVE_TOL:g}) {'ok' if ok else 'FAIL'}")
hvd.shutdown()
sys.exit(0 if ok else 1)
