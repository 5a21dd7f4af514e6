"""Account a DP-SGD run from Python: every valid route side by side, the headline the smallest valid one.

The same call as ``dpaudit account --mechanism dpsgd --dataset-size 60000 --batch-size 150 --noise-multiplier 1.3
--epochs 15 --delta 1e-5``; the result is a typed, frozen ``AccountingResult``.

    python examples/python/account_dpsgd.py
"""

import json

import dpaudit


def main() -> dpaudit.AccountingResult:
    r = dpaudit.account("dpsgd", dataset_size=60_000, batch_size=150, noise_multiplier=1.3, epochs=15, delta=1e-5)
    for i, st in enumerate(r.statements):
        print(f"{'*' if i == r.headline else ' '} {st.method:>4}: epsilon = {st.epsilon:.4f} at delta = {st.delta:g}")
    print(f"headline: epsilon = {r.epsilon:.4f} ({r.statement.method}), assuming:")
    for a in r.statement.assumptions:
        print(f"  - {a}")
    print(json.dumps(dpaudit.to_dict(r))[:120], "...")   # the JSON that `dpaudit account --json` prints
    return r


if __name__ == "__main__":
    main()
