#!/usr/bin/env python3
"""The GPT against PyTorch: tower's loss and gradients of one batch, and a short AdamW run, against the
same model written in PyTorch from tower's initial weights (float64 and float32).

Usage: gpt_vs_torch.py GPT_DUMP CORPUS [--precision fp32|bf16|fp16] [--steps N] [...]
Exits 77 (skip) when PyTorch is not installed; any check outside its tolerance fails.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as e:  # the test needs them; say so and skip
    print(f"SKIP: {e} (scripts/setup-deps torch installs PyTorch)")
    sys.exit(77)

# Tolerances, stated once, each a few times what was measured (docs/transformer.md). fp32 sums in
# another order than PyTorch: gradients within 4e-7, losses within 1e-8 of float64. 16-bit compute
# rounds activations and gradients to 8 (bf16) or 11 (fp16) significant bits at every operation:
# gradients within 8e-3 (bf16) and 9e-4 (fp16) of float64.
GRAD_TOL = {"fp32": 1e-5, "fp16": 5e-3, "bf16": 3e-2}   # relative L2 error of each parameter's gradient
LOSS_TOL = {"fp32": 1e-6, "fp16": 1e-4, "bf16": 1e-3}   # relative error of the batch loss
CURVE_TOL = 1e-4   # fp32: largest relative gap between the two loss curves, step by step (2e-5 measured)
CURVE_STEPS = 200  # the steps the curves are compared over
EVAL_TOL = 1e-3    # fp32: validation loss after the run, relative (the issue asks for 1%)


def load(prefix):
    with open(prefix + ".json") as f:
        index = json.load(f)
    raw = open(prefix + ".bin", "rb").read()
    types = {"f32": np.float32, "i32": np.int32}
    tensors = {}
    for t in index["tensors"]:
        dt = types[t["dtype"]]
        count = int(np.prod(t["shape"])) if t["shape"] else 1
        a = np.frombuffer(raw, dtype=dt, count=count, offset=t["offset"]).reshape(t["shape"])
        tensors[t["name"]] = a
    return index, tensors


def gpt_loss(P, tokens, cfg):
    """The same model as models/gpt.cpp: pre-LayerNorm blocks, tanh GELU, head tied to wte."""
    L, C, H = cfg["layers"], cfg["width"], cfg["heads"]
    D = C // H
    inp, tgt = tokens[:, :-1], tokens[:, 1:]
    B, T = inp.shape
    x = P["wte"][inp] + P["wpe"][:T]
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    for i in range(L):
        p = lambda n: P[f"h{i}.{n}"]
        h = F.layer_norm(x, (C,), p("ln1.weight"), p("ln1.bias"), 1e-5)
        qkv = h @ p("attn.qkv.weight").T + p("attn.qkv.bias")
        q, k, v = (t.view(B, T, H, D).transpose(1, 2) for t in qkv.split(C, dim=2))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(D)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.proj.weight").T + p("attn.proj.bias")
        h = F.layer_norm(x, (C,), p("ln2.weight"), p("ln2.bias"), 1e-5)
        f = F.gelu(h @ p("mlp.fc.weight").T + p("mlp.fc.bias"), approximate="tanh")
        x = x + f @ p("mlp.proj.weight").T + p("mlp.proj.bias")
    x = F.layer_norm(x, (C,), P["lnf.weight"], P["lnf.bias"], 1e-5)
    logits = x @ P["wte"].T
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1).long())


def params_from(index, tensors, dtype):
    return {n: torch.tensor(tensors["init/" + n].copy(), dtype=dtype, requires_grad=True) for n in index["parameters"]}


def check_gradients(index, tensors, precision):
    cfg = index["config"]
    P = params_from(index, tensors, torch.float64)
    tokens = torch.tensor(tensors["batch/0"].copy(), dtype=torch.long)
    loss = gpt_loss(P, tokens, cfg)
    loss.backward()
    ok = True
    rel = abs(index["loss"] - loss.item()) / abs(loss.item())
    print(f"loss: tower {index['loss']:.7f}  pytorch float64 {loss.item():.7f}  relative {rel:.2e} "
          f"(tolerance {LOSS_TOL[precision]:.0e})")
    ok &= rel <= LOSS_TOL[precision]
    worst = (0.0, "")
    for n in index["parameters"]:
        ref = P[n].grad.numpy()
        got = tensors["grad/" + n].astype(np.float64)
        err = np.linalg.norm(got - ref) / max(np.linalg.norm(ref), 1e-30)
        worst = max(worst, (err, n))
        if err > GRAD_TOL[precision]:
            print(f"  gradient of {n}: relative error {err:.2e} over {GRAD_TOL[precision]:.0e}")
            ok = False
    print(f"gradients: {len(index['parameters'])} parameters, worst relative error {worst[0]:.2e} ({worst[1]}), "
          f"tolerance {GRAD_TOL[precision]:.0e}")
    return ok


def adamw_step(P, cfg, lr, t):
    """tower's AdamW (optim/update_rules.h): decoupled decay, epsilon on the uncorrected second moment."""
    b1, b2, eps, wd = cfg["beta1"], cfg["beta2"], cfg["epsilon"], cfg["weight_decay"]
    step_size = lr * math.sqrt(1 - b2 ** t) / (1 - b1 ** t)
    with torch.no_grad():
        for name, p in P.items():
            m, v = adamw_step.state.setdefault(name, (torch.zeros_like(p), torch.zeros_like(p)))
            p -= lr * wd * p
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p -= step_size * m / (v.sqrt() + eps)
            p.grad = None


def check_training(index, tensors):
    cfg = index["config"]
    steps = cfg["steps"]
    if steps == 0:
        return True
    torch.manual_seed(0)
    P = params_from(index, tensors, torch.float32)
    adamw_step.state = {}
    ours = tensors["losses"]
    gaps = []
    for s in range(steps):
        loss = gpt_loss(P, torch.tensor(tensors[f"steps/{s}"].copy(), dtype=torch.long), cfg)
        loss.backward()
        adamw_step(P, cfg, cfg["lr"], s + 1)
        gaps.append(abs(ours[s] - loss.item()) / loss.item())
    # Two float32 runs that sum in different orders drift apart slowly; the curves are compared
    # over the first CURVE_STEPS steps, and the largest gap after them is reported.
    worst = max((g, s) for s, g in enumerate(gaps[:CURVE_STEPS]))
    later = max(gaps[CURVE_STEPS:], default=0.0)
    with torch.no_grad():
        windows = torch.tensor(tensors["eval"].copy(), dtype=torch.long)
        ref_eval = float(np.mean([gpt_loss(P, windows[i:i + 1], cfg).item() for i in range(len(windows))]))
    eval_rel = abs(index["eval_loss"] - ref_eval) / ref_eval
    print(f"training: {steps} AdamW steps, loss {ours[0]:.4f} -> {ours[-1]:.4f}; largest gap to PyTorch float32 "
          f"in the first {min(steps, CURVE_STEPS)} steps {worst[0]:.2e} at step {worst[1]} (tolerance {CURVE_TOL:.0e})"
          + (f", after them {later:.2e}" if steps > CURVE_STEPS else ""))
    print(f"validation loss after the run: tower {index['eval_loss']:.5f}  pytorch {ref_eval:.5f}  relative "
          f"{eval_rel:.2e} (tolerance {EVAL_TOL:.0e})")
    return worst[0] <= CURVE_TOL and eval_rel <= EVAL_TOL


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("gpt_dump")
    ap.add_argument("corpus")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--layers", default="2")
    ap.add_argument("--width", default="64")
    ap.add_argument("--heads", default="4")
    ap.add_argument("--context", default="32")
    ap.add_argument("--batch", default="8")
    ap.add_argument("--lr", default="1e-3")
    ap.add_argument("--eval-windows", default="64")
    args = ap.parse_args()
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        prefix = os.path.join(tmp, "gpt")
        steps = args.steps if args.precision == "fp32" else 0
        subprocess.run([args.gpt_dump, "--data", args.corpus, "--out", prefix, "--precision", args.precision,
                        "--layers", args.layers, "--width", args.width, "--heads", args.heads,
                        "--context", args.context, "--batch", args.batch, "--steps", str(steps), "--lr", args.lr,
                        "--eval-windows", args.eval_windows], check=True)
        index, tensors = load(prefix)
    ok = check_gradients(index, tensors, args.precision)
    ok &= check_training(index, tensors)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
