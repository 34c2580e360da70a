"""Train an MLP and a small CNN on scikit-learn's 8x8 digits (bundled: no download).

    make example                        # installs scikit-learn into .venv, then runs this
    python examples/train_digits.py --model cnn --epochs 15 --workers 2

A PyTorch-style loop: `pa.nn` modules, `pa.optim.Adam`, `backward_parallel`, seeded so a
run is reproducible (same initial weights, same batch order), in float32 (the default
dtype, as PyTorch's: the images are converted to it). Prints loss and accuracy
per epoch with a progress line, and exits non-zero if the final test accuracy is under
`--target` (95% by default).
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import parallel_autograd as pa
import parallel_autograd.optim as optim
from parallel_autograd import nn
from parallel_autograd.nn import functional as F


def load_digits(seed: int, test_fraction: float = 0.25):
    """(x_train, y_train, x_test, y_test): 1,797 8x8 images scaled to [0, 1], split by a
    seeded permutation."""
    try:
        from sklearn.datasets import load_digits as sk_load
    except ImportError:
        sys.exit("this example needs scikit-learn: pip install '.[examples]' (or make example)")
    d = sk_load()
    x = (d.images / 16.0).astype(np.float32)[:, None, :, :]  # (N, 1, 8, 8), the layers' dtype
    y = d.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(y))
    n_test = int(len(y) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return x[train], y[train], x[test], y[test]


def make_model(kind: str) -> nn.Module:
    """An MLP on the flattened pixels, or a two-conv CNN."""
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(64, 128), nn.ReLU(),
                             nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),    # 16 x 4 x 4
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),   # 32 x 2 x 2
        nn.Flatten(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 10))


def accuracy(model: nn.Module, x: np.ndarray, y: np.ndarray) -> float:
    """Share of `x` classified as `y` (evaluation mode, no graph)."""
    model.eval()
    with pa.no_grad():
        pred = model(pa.tensor(x)).numpy().argmax(axis=1)
    model.train()
    return float((pred == y).mean())


def train(args) -> float:
    """Train, printing one line per epoch; returns the final test accuracy."""
    pa.manual_seed(args.seed)
    x_tr, y_tr, x_te, y_te = load_digits(args.seed)
    model = make_model(args.model)
    opt = optim.Adam(model.parameters(), lr=args.lr)
    engine = pa.Engine(args.workers)
    rng = np.random.default_rng(args.seed + 1)
    batches = (len(y_tr) + args.batch - 1) // args.batch
    print(f"{args.model}: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{len(y_tr)} training and {len(y_te)} test images, {batches} batches per epoch")
    for epoch in range(1, args.epochs + 1):
        t0, total = time.perf_counter(), 0.0
        order = rng.permutation(len(y_tr))
        for b in range(batches):
            idx = order[b * args.batch:(b + 1) * args.batch]
            opt.zero_grad()
            loss = F.cross_entropy(model(pa.tensor(x_tr[idx])), y_tr[idx])
            engine.backward(loss)
            opt.step()
            total += loss.item() * len(idx)
            if args.progress:
                print(f"\r  epoch {epoch}: batch {b + 1}/{batches}", end="", flush=True)
        train_acc, test_acc = accuracy(model, x_tr, y_tr), accuracy(model, x_te, y_te)
        print(f"\repoch {epoch:2d}  loss {total / len(y_tr):.4f}  train {train_acc:.1%}  "
              f"test {test_acc:.1%}  ({time.perf_counter() - t0:.2f} s)")
    engine.close()
    return test_acc


class HelpFormatter(argparse.HelpFormatter):
    """Appends "(default: X)" to an option's help unless it states its default already, or
    the option is a flag or defaults to None (stress/helpformat.py has the same one)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if action.nargs == 0 or action.default is None or "default" in text.lower():
            return text
        return text + " (default: %(default)s)"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="train_digits.py", formatter_class=HelpFormatter,
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("mlp", "cnn"), default="cnn", help="the network")
    p.add_argument("--epochs", type=int, default=20, help="passes over the training set")
    p.add_argument("--batch", type=int, default=64, help="samples per step")
    p.add_argument("--lr", type=float, default=2e-3, help="Adam's learning rate")
    p.add_argument("--workers", type=int, default=None,
                   help="engine threads (default: all cores)")
    p.add_argument("--seed", type=int, default=0, help="seed of the weights and batch order")
    p.add_argument("--target", type=float, default=0.95,
                   help="test accuracy to reach, else the exit status is 1")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no per-batch progress line (the default when not on a terminal)")
    return p


def main(argv=None) -> int:
    args = _parser().parse_args(argv)
    args.progress = args.progress and sys.stdout.isatty()
    acc = train(args)
    ok = acc >= args.target
    print(f"final test accuracy {acc:.1%}: {'reached' if ok else 'BELOW'} the target "
          f"{args.target:.0%}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
