"""Audit an Opacus training run end to end, from Python (about a minute on 2 cores):

1. train a small CNN on scikit-learn's digits with Opacus's ``PrivacyEngine`` at epsilon 4, with ``CANARIES``
   mislabeled canary records each put into the training set by its own fair coin;
2. make a release bundle of the trained model (weights in safetensors, members / non-members, Opacus's accounting);
3. attack it (loss threshold: an *estimate*, one model);
4. certify a lower bound on its epsilon from the canaries (one-run audit, Steinke, Nasr & Jagielski 2023: the
   coins make it *certified* at 95% confidence), written as ``canary_audit.json``;
5. write the report (``report.html``, ``report.md``, ``report.json``) with ``dpaudit.audit``.

    python examples/python/audit_opacus_run.py [OUT]      # default OUT: runs/python_opacus
"""

import importlib.util
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from opacus import PrivacyEngine
from safetensors.torch import save_file
from sklearn.datasets import load_digits

import dpaudit
from dpaudit._io import write_json
from dpaudit.attacks.canary import loss_scores, one_run_certified
from dpaudit.integrations.opacus import read_opacus

CNN = Path(__file__).resolve().parents[1] / "opacus_digits" / "digits_cnn.py"
EPSILON, DELTA, EPOCHS, CANARIES = 4.0, 1e-5, 15, 200


def build_cnn() -> torch.nn.Module:
    spec = importlib.util.spec_from_file_location("digits_cnn", CNN)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build()


def train(X, y, members, canary_X, canary_y, included, seed=0):
    """DP-SGD with Opacus on the members plus the included canaries; returns the model and the engine."""
    torch.manual_seed(seed)
    Xt = np.concatenate([X[members], canary_X[included]])
    yt = np.concatenate([y[members], canary_y[included]])
    data = torch.utils.data.TensorDataset(torch.from_numpy(Xt), torch.from_numpy(yt))
    net, engine = build_cnn(), PrivacyEngine(accountant="rdp")
    opt = torch.optim.SGD(net.parameters(), lr=0.5, momentum=0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # Opacus's secure-RNG notice
        model, opt, loader = engine.make_private_with_epsilon(
            module=net, optimizer=opt, data_loader=torch.utils.data.DataLoader(data, batch_size=64),
            target_epsilon=EPSILON, target_delta=DELTA, epochs=EPOCHS, max_grad_norm=1.0)   # Poisson sampling
        for _ in range(EPOCHS):
            for xb, yb in loader:
                if len(xb):
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(model(xb), yb).backward()
                    opt.step()
    return net.eval(), engine, loader


def main(out: str | Path = "runs/python_opacus") -> dict:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    X, y = load_digits(return_X_y=True)
    X = (X / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    rng = np.random.default_rng(0)
    perm = rng.permutation(len(y))
    members, nonmembers, pool = np.sort(perm[:800]), np.sort(perm[800:1200]), perm[1200:1200 + CANARIES]
    canary_X, canary_y = X[pool], (y[pool] + rng.integers(1, 10, CANARIES)) % 10       # mislabeled canaries
    included = rng.random(CANARIES) < 0.5                                               # one fair coin each

    t0 = time.perf_counter()
    net, engine, loader = train(X, y, members, canary_X, canary_y, included)
    save_file({k: v.detach().contiguous() for k, v in net.state_dict().items()}, str(out / "weights.safetensors"))
    np.savez(out / "data.npz", X=X, y=y)
    np.save(out / "members.npy", members)
    np.save(out / "nonmembers.npy", nonmembers)

    release = dpaudit.release.make(
        out / "release", model=out / "weights.safetensors", factory=f"{CNN}:build", data=out / "data.npz",
        members=out / "members.npy", nonmembers=out / "nonmembers.npy", opacus=read_opacus(engine, data_loader=loader),
        claim=[f"epsilon={EPSILON:g}", f"delta={DELTA:g}", "granularity=record"], overwrite=True)
    accounted = release.meta["statement"]["epsilon"]
    attack = dpaudit.attack(release, dpaudit.Threshold(), out=out / "attack")

    with torch.no_grad():
        probs = torch.softmax(net(torch.from_numpy(canary_X)), 1).numpy()
    bound = one_run_certified(loss_scores(probs[None], canary_y)[0], included, delta=DELTA, confidence=0.95)
    audit = dpaudit.CanaryAuditResult(
        bound, accounted, {"kind": "opacus DP-SGD", "epsilon": EPSILON}, {"canary": "mislabeled", "canaries": CANARIES,
                                                                      "target": str(out / "release")},
        time.perf_counter() - t0, ("black-box canaries scored by their loss under the released model",))
    write_json(out / "canary_audit.json", dpaudit.to_dict(audit))

    # the release names our model factory; the audit runs it only because the config names the same code
    (out / "audit.toml").write_text('title = "Opacus DP-SGD CNN on digits"\nseed = 0\ndelta = 1e-5\n\n'
                                    f'[[models]]\nname = "opacus-cnn"\nrelease = "release"\nfactory = "{CNN}:build"\n\n'
                                    '[[attacks]]\nkind = "threshold"\n')
    report = dpaudit.audit(out / "audit.toml", out / "report")

    b = attack.attack.bound
    print(f"accounted epsilon (headline): {accounted:.3f} at delta {DELTA:g}")
    print(f"threshold attack: AUC {attack.attack.metrics.auc:.3f}, empirical epsilon ≈ {b.epsilon:.2f} ({b.kind})")
    print(audit.summary())
    print(f"report: {out / 'report' / 'report.html'}")
    return {"accounted": accounted, "attack": attack, "canary_audit": audit, "report": report}


if __name__ == "__main__":
    main(*sys.argv[1:])
