"""A GAN on Fashion-MNIST trained as the StyleGAN2 seed trains one, as a PyTorch program on tower.torch.

G and D each have a DistributedOptimizer (Adam with the seed's beta1 0 and beta2 0.99). Every
--r1-every steps, D is regularized by R1, the squared norm of D's gradient with respect to the real
images, weighted by the interval (lazy regularization). autograd computes that gradient
(torch.autograd.grad with create_graph=True) and differentiates it again, so R1 holds for any
discriminator: here two hidden LeakyReLU layers. A third optimizer, D_reg, applies it: it shares
D's Adam state (share=, the seed's D_reg with share=D_opt). As in the seed, D's learning rate is
multiplied by, and its betas raised to the power of, interval / (interval + 1) for the steps R1
takes (beta1 is 0 here, so only beta2 moves).

Every rank takes its share of the same global batch of real images and latents at each step, so a
run gives the same result at any number of ranks, within rounding; --plain runs the same program
in one process without tower (D_reg's torch optimizer given D's state object), the reference, and
--plain --parts N takes each gradient as the mean over N equal parts of the batch, as N ranks do:
the same sums in the same order, so N ranks end on its bits.

  PYTHONPATH=build/python mpirun -np 2 /usr/bin/python3 examples/torch/gan.py --steps 2000
"""
import argparse
import gzip
import os

import numpy as np
import torch
import torch.nn.functional as F

import tower.torch as hvd

LATENT = 64


def fashion_mnist_images(root):
    """The training images as [N, 784] in [-1, 1]."""
    raw = gzip.open(os.path.join(root, "train-images-idx3-ubyte.gz")).read()
    count = int.from_bytes(raw[4:8], "big")
    pixels = np.frombuffer(raw, dtype=np.uint8, offset=16).reshape(count, 28 * 28)
    return torch.from_numpy(pixels.astype(np.float32) / 127.5 - 1.0)


def networks(hidden, seed):
    torch.manual_seed(seed)
    g = torch.nn.Sequential(torch.nn.Linear(LATENT, hidden), torch.nn.LeakyReLU(0.2),
                            torch.nn.Linear(hidden, 28 * 28), torch.nn.Tanh())
    d = torch.nn.Sequential(torch.nn.Linear(28 * 28, hidden), torch.nn.LeakyReLU(0.2),
                            torch.nn.Linear(hidden, hidden // 2), torch.nn.LeakyReLU(0.2),
                            torch.nn.Linear(hidden // 2, 1))
    return g, d


def global_batch(args, step, stream, images):
    """Step `step`'s global batch of latents (stream 0: D's fakes, 1: G's) and of real images: the
    same at any world size."""
    g = torch.Generator().manual_seed(args.seed * 1000003 + step * 4 + stream)
    z = torch.randn(args.batch, LATENT, generator=g)
    real = images[torch.randint(0, images.shape[0], (args.batch,), generator=g)]
    return z, real


def r1_penalty(d, real):
    """R1: the mean over the batch of |dD(x)/dx|^2 at the real images, through autograd."""
    real = real.detach().requires_grad_(True)
    (gradient,) = torch.autograd.grad(d(real).sum(), real, create_graph=True)
    return gradient.square().sum(dim=1).mean()


def backward_over(parts, loss_of, params):
    """Each part's loss backward into the parameters' gradients, then their mean over the parts
    (one part per rank: tower averages the ranks' gradients). Returns the mean loss."""
    total = 0.0
    for part in parts:
        loss = loss_of(part)
        loss.backward()
        total += loss.item()
    if len(parts) > 1:
        for param in params:
            if param.grad is not None:
                param.grad.mul_(1.0 / len(parts))
    return total / len(parts)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--batch", type=int, default=64, help="global: split over the ranks")
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--r1-every", type=int, default=16)
    p.add_argument("--r1-gamma", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--plain", action="store_true", help="plain PyTorch in one process, without tower")
    p.add_argument("--parts", type=int, default=1, help="with --plain: each gradient the mean over this many "
                   "parts of the batch, as that many ranks compute it")
    args = p.parse_args()
    if args.parts != 1 and (not args.plain or args.parts < 1 or args.batch % args.parts):
        raise SystemExit(f"gan: --parts {args.parts} needs --plain and a part count that divides --batch")

    if not args.plain:
        hvd.init()
    torch.set_num_threads(1)
    rank, size = (0, 1) if args.plain else (hvd.rank(), hvd.size())
    if args.batch % size:
        raise SystemExit(f"gan: --batch {args.batch} does not split over {size} ranks")
    per = args.batch // size // args.parts
    # This rank's share of the batch; under --plain --parts, every part in turn.
    mine = [slice(k * per, (k + 1) * per) for k in range(args.parts)] if args.plain else \
        [slice(rank * per, (rank + 1) * per)]
    images = fashion_mnist_images(args.data)
    g, d = networks(args.hidden, args.seed)

    # The seed's lazy regularization: D's rate and betas scaled for the steps R1 takes.
    ratio = args.r1_every / (args.r1_every + 1)
    d_settings = {"lr": args.lr * ratio, "betas": (0.0, 0.99 ** ratio), "eps": 1e-8}
    g_opt = torch.optim.Adam(g.parameters(), lr=args.lr, betas=(0.0, 0.99), eps=1e-8)
    d_opt = torch.optim.Adam(d.parameters(), **d_settings)
    d_reg = torch.optim.Adam(d.parameters(), **d_settings)
    if args.plain:
        d_reg.state = d_opt.state  # one Adam state, stepped by both
    else:
        g_opt = hvd.DistributedOptimizer(g_opt, named_parameters=g.named_parameters(), name="G")
        d_opt = hvd.DistributedOptimizer(d_opt, named_parameters=d.named_parameters(), name="D")
        d_reg = hvd.DistributedOptimizer(d_reg, named_parameters=d.named_parameters(), name="D_reg", share=d_opt)

    totals = {"G": 0.0, "D": 0.0, "R1": 0.0}
    for step in range(args.steps):
        # D: fakes scored low, reals high (the non-saturating logistic loss); G is fixed here.
        g.requires_grad_(False)
        d.requires_grad_(True)
        z, real = global_batch(args, step, 0, images)
        d_opt.zero_grad()
        totals["D"] += backward_over(mine, lambda s: F.softplus(d(g(z[s]))).mean() + F.softplus(-d(real[s])).mean(),
                                     d.parameters())
        d_opt.step()
        if step % args.r1_every == 0:
            d_reg.zero_grad()
            # (the weighted penalty's mean; its report is the penalty's)
            weight = (args.r1_gamma / 2) * args.r1_every
            totals["R1"] += backward_over(mine, lambda s: r1_penalty(d, real[s]) * weight, d.parameters()) / weight
            d_reg.step()
        # G: its fakes scored high by D, which is fixed here (its parameters take no gradient).
        g.requires_grad_(True)
        d.requires_grad_(False)
        z, _ = global_batch(args, step, 1, images)
        g_opt.zero_grad()
        totals["G"] += backward_over(mine, lambda s: F.softplus(-d(g(z[s]))).mean(), g.parameters())
        g_opt.step()
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            mean = totals if args.plain else {k: hvd.allreduce(torch.tensor(v), name=f"loss {k}").item()
                                              for k, v in totals.items()}
            if rank == 0:
                done = (step % args.log_every) + 1
                r1_steps = max(1, sum(1 for s in range(step + 1 - done, step + 1) if s % args.r1_every == 0))
                print(f"gan: step {step + 1}  loss_G {mean['G'] / done:.5f}  loss_D {mean['D'] / done:.5f}  "
                      f"r1 {mean['R1'] / r1_steps:.4f}", flush=True)
            totals = dict.fromkeys(totals, 0.0)
    if rank == 0:
        sums = [sum(p.detach().double().sum().item() for p in net.parameters()) for net in (g, d)]
        print(f"gan: final parameter sums G {sums[0]:.12e} D {sums[1]:.12e}", flush=True)
    if not args.plain:
        hvd.shutdown()


if __name__ == "__main__":
    main()
