"""Cold start: ``import dpaudit`` and every ``--help`` load none of the heavy libraries (torch, matplotlib, scipy,
scikit-learn, catboost, pydantic, dp_accounting); they load when a command needs them. Each check runs a fresh
interpreter and reads ``sys.modules`` (no timing assertion). The option choices the CLI spells itself (so that its
help loads no attack or audit code) are pinned to the library's tables."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("torch", "matplotlib", "scipy", "sklearn", "catboost", "pydantic", "dp_accounting", "opacus", "pandas", "flwr", "ray", "transformers", "tokenizers")

COMMANDS = ("account", "train", "attack", "audit", "audit-method", "check", "release", "reproduce", "flower")


def _loaded_after(code: str) -> list[str]:
    """The heavy top-level packages in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    probe = (f"import sys, json\n{code}\n"
             f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))))")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_import_dpaudit_loads_no_heavy_library():
    assert _loaded_after("import dpaudit") == []


def test_every_help_loads_no_heavy_library():
    """``dpaudit --help``, every command's ``--help`` and a method's ``dpaudit train NAME --help``, one after another
    in one interpreter; the heavy packages loaded after each (the first non-empty entry names the culprit)."""
    helps = [["--help"], *[[c, "--help"] for c in COMMANDS if c != "audit-method"], ["train", "fredy", "--help"]]
    code = ("import contextlib, io, json, sys\nfrom dpaudit.cli import main\nafter = {}\n"
            f"for args in {helps!r}:\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n            main(args)\n        except SystemExit as e:\n            assert e.code == 0, (args, e.code)\n"
            f"    after[' '.join(args)] = sorted({{m.split('.')[0] for m in sys.modules}} & set({list(HEAVY)!r}))\n"
            "print(json.dumps(after))\n")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    after = json.loads(p.stdout.strip().splitlines()[-1])
    assert len(after) == len(helps) and all(v == [] for v in after.values()), after


def test_audit_method_help_loads_no_torch():
    """``dpaudit audit-method --help`` lists every method's audit parameters, read from the audit functions' signatures
    (so it loads the audit code, scipy included: the one help that does), but no torch; registering the command alone
    loads nothing heavy."""
    assert _loaded_after("import dpaudit.cli") == []
    code = ("import contextlib, io\nfrom dpaudit.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n        main(['audit-method', '--help'])\n    except SystemExit as e:\n        assert e.code == 0\n")
    assert "torch" not in _loaded_after(code)


def test_the_choices_the_cli_spells_are_the_librarys():
    from dpaudit.attacks import ATTACKS
    from dpaudit.attacks.shadow import CLASSIFIERS
    from dpaudit.attacks.threshold import THRESHOLD_KINDS
    from dpaudit.auditing import reproduce
    from dpaudit.cli import attack as attack_cli
    from dpaudit.cli import reproduce as reproduce_cli

    assert (attack_cli.ATTACKS, attack_cli.CLASSIFIERS, attack_cli.THRESHOLD_KINDS) == (ATTACKS, CLASSIFIERS,
                                                                                        THRESHOLD_KINDS)
    assert (reproduce_cli.PAPERS, reproduce_cli.SCALES, reproduce_cli.DEFAULT_OUT, reproduce_cli.COMMITTED_OUT) == (
        reproduce.PAPERS, reproduce.SCALES, reproduce.DEFAULT_OUT, reproduce.COMMITTED_OUT)


def test_audit_method_help_lists_every_methods_parameters(cli):
    from dpaudit.auditing.method_audit import METHOD_RUN_AUDITS

    code, out, _ = cli(["audit-method", "--help"])
    assert code == 0
    for name in METHOD_RUN_AUDITS:
        assert f"{name}: " in out


def test_a_scores_only_bundle_is_made_and_attacked_without_torch(tmp_path):
    """``release make --scores`` and ``attack`` (threshold and LiRA) of a scores-only bundle never import torch: the
    model and trainer modules load only where a model is written, loaded, hooked or trained."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, k = 120, 8
    np.savez(tmp_path / "s.npz", loss_train=rng.exponential(0.5, n), loss_test=rng.exponential(1.0, n),
             reference_loss_train=rng.exponential(0.8, (n, k)), reference_loss_test=rng.exponential(0.8, (n, k)),
             reference_in_train=rng.random((n, k)) < 0.5, reference_in_test=rng.random((n, k)) < 0.5)
    code = ("import contextlib, io\nfrom dpaudit.cli import main\n"
            "for args in (['release', 'make', '--out', 'R', '--scores', 'S', '--claim', 'epsilon=1', '--claim', "
            "'delta=1e-5'], ['attack', 'R', '--attack', 'threshold', '--quiet', '--out', 'A1'], "
            "['attack', 'R', '--attack', 'lira', '--quiet', '--out', 'A2']):\n"
            "    args = [str(T / a) if a in ('R', 'S', 'A1', 'A2') else a for a in args]\n"
            "    with contextlib.redirect_stdout(io.StringIO()):\n"
            "        try:\n            main(args)\n        except SystemExit as e:\n            assert e.code in (0, None), (args, e.code)\n")
    code = code.replace("T / a", f"__import__('pathlib').Path({str(tmp_path)!r}) / {{'S': 's.npz'}}.get(a, a)")
    loaded = _loaded_after(code)
    assert (tmp_path / "A2").is_dir() and "torch" not in loaded, loaded
