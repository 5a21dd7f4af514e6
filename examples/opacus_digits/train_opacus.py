"""Train a small CNN on scikit-learn's digits with real Opacus DP-SGD at a target epsilon, and export what
`dpaudit release make` needs: weights in safetensors, the data, member / non-member indices, the Opacus run.

    python examples/opacus_digits/train_opacus.py --out runs/opacus_digits [--epsilon 4] [--epochs 15] [--shuffle]

``--shuffle`` trains as many people do: Opacus's ``poisson_sampling=False`` keeps the ``DataLoader(shuffle=True)``
batches, while Opacus still accounts Poisson sampling. The script then prints the same run accounted both ways:
Opacus's Poisson figure and dpaudit's shuffled-batch figures (the valid upper bound and Chua et al.'s lower bound).

then (the script prints these commands with your paths):

    dpaudit release make --out runs/opacus_digits/release \\
        --model runs/opacus_digits/weights.safetensors --factory examples/opacus_digits/digits_cnn.py:build \\
        --data runs/opacus_digits/data.npz --members runs/opacus_digits/members.npy \\
        --nonmembers runs/opacus_digits/nonmembers.npy --opacus runs/opacus_digits/opacus.json \\
        --claim epsilon=4 --claim delta=1e-5 --claim granularity=record
    dpaudit audit runs/opacus_digits/audit.toml --out runs/opacus_digits/audit
    dpaudit check runs/opacus_digits/claims.toml
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import warnings
from pathlib import Path

import numpy as np
import torch

HERE = Path(__file__).resolve().parent


def _build():
    spec = importlib.util.spec_from_file_location("digits_cnn", HERE / "digits_cnn.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build()


def main(out: str | Path, *, epsilon: float = 4.0, delta: float = 1e-5, epochs: int = 15, batch_size: int = 64,
         seed: int = 0, shuffle: bool = False) -> dict:
    from opacus import PrivacyEngine
    from safetensors.torch import save_file
    from sklearn.datasets import load_digits

    from dpaudit.integrations.opacus import read_opacus

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    perm = np.random.default_rng(seed).permutation(len(y))
    members, nonmembers = np.sort(perm[:900]), np.sort(perm[900:1400])      # the rest: the attacker's pool
    np.savez(out / "data.npz", X=X, y=y)
    np.save(out / "members.npy", members)
    np.save(out / "nonmembers.npy", nonmembers)

    net = _build()
    train = torch.utils.data.TensorDataset(torch.from_numpy(X[members]), torch.from_numpy(y[members]))
    loader = torch.utils.data.DataLoader(train, batch_size=batch_size, shuffle=True)
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.5)
    engine = PrivacyEngine(accountant="rdp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # Opacus's secure-RNG notice
        model, opt, loader = engine.make_private_with_epsilon(
            module=net, optimizer=opt, data_loader=loader, target_epsilon=epsilon, target_delta=delta, epochs=epochs,
            max_grad_norm=1.0, poisson_sampling=not shuffle)   # Poisson sampling is Opacus's default
        for _ in range(epochs):
            for xb, yb in loader:
                if len(xb) == 0:
                    continue
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(xb), yb).backward()
                opt.step()
    net.eval()                                # make_private trained `net` in place
    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(out / "weights.safetensors"))
    run = read_opacus(engine, data_loader=loader)         # records the sampler the loader uses
    (out / "opacus.json").write_text(json.dumps(run.to_dict(), indent=2))
    accounted = run.account(delta)
    with torch.no_grad():
        acc = float((net(torch.from_numpy(X[nonmembers])).argmax(1).numpy() == y[nonmembers]).mean())
    opacus_eps = float(engine.get_epsilon(delta))

    # the bundle's model is built by your code: name it (dpaudit checks it against the sha256 the release records)
    factory = json.dumps(f"{HERE / 'digits_cnn.py'}:build")
    (out / "audit.toml").write_text(
        'title = "Opacus DP-SGD CNN on digits, audited from outside"\n'
        f'seed = {seed}\ndelta = {delta}\n\n[[models]]\nname = "opacus-cnn"\nrelease = "release"\n'
        f'factory = {factory}\n\n[[attacks]]\nkind = "threshold"\n')
    (out / "claims.toml").write_text(
        f'[[claim]]\nname = "opacus-cnn"\nrelease = "release"\nfactory = {factory}\nepsilon = {epsilon}\n'
        f'delta = {delta}\ngranularity = "example"\nattack = {{ kind = "threshold", confidence = 0.95, seed = 0 }}\n')
    info = {"opacus_epsilon": opacus_eps, "target_epsilon": epsilon, "test_accuracy": acc,
            "noise_multiplier": float(opt.noise_multiplier), "steps": run.steps, "sampling": run.scheme,
            "dpaudit_epsilon": accounted.epsilon, "dpaudit_route": accounted.headline_route}
    if "lower_bound_epsilon" in accounted.facts:
        info["dpaudit_lower_bound_epsilon"] = accounted.facts["lower_bound_epsilon"]
    print(json.dumps(info))
    return info


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="runs/opacus_digits")
    ap.add_argument("--epsilon", type=float, default=4.0)
    ap.add_argument("--epochs", type=int, default=15)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shuffle", action="store_true", help="shuffled fixed-size batches (poisson_sampling=False)")
    a = ap.parse_args()
    info = main(a.out, epsilon=a.epsilon, epochs=a.epochs, seed=a.seed, shuffle=a.shuffle)
    o = a.out
    print(f"\nnext:\n  dpaudit release make --out {o}/release --model {o}/weights.safetensors "
          f"--factory {Path(__file__).parent}/digits_cnn.py:build --data {o}/data.npz --members {o}/members.npy "
          f"--nonmembers {o}/nonmembers.npy --opacus {o}/opacus.json --claim epsilon={a.epsilon} --claim delta=1e-5 "
          f"--claim granularity=record\n  dpaudit audit {o}/audit.toml --out {o}/audit\n  dpaudit check {o}/claims.toml",
          file=sys.stderr)
