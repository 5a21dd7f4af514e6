"""S6 (issue 23): names from configs that become folder names match [A-Za-z0-9][A-Za-z0-9_.-]{0,63}, so a
traversal (``..``, ``../x``, ``/``) or a NUL byte is one clean error and nothing is written outside the run."""

from __future__ import annotations

import pytest

from dpaudit.errors import NAME_PATTERN, ParameterError, check_name

BAD = ["..", ".", "../escape", "a/b", "/abs", "a\x00b", "", " x", "-x", ".hidden", "x" * 65, "naïve", "a b"]


@pytest.mark.parametrize("name", BAD)
def test_bad_names_are_refused_by_the_library(name):
    from dpaudit.auditing.canary_audit import CanaryAuditSpec
    from dpaudit.auditing.method_audit import MethodAuditSpec
    from dpaudit.auditing.runner import ModelRun

    assert not NAME_PATTERN.fullmatch(name)
    for make in (lambda: check_name(name, "name", "test"),
                 lambda: ModelRun(name=name, method="fredy"),
                 lambda: ModelRun(name="ok", method="fredy", extra=("nonprivate",), extra_names=(name,)),
                 lambda: CanaryAuditSpec(name, epsilon=8.0),
                 *([lambda: MethodAuditSpec("fredy", {}, name=name)] if name else [])):   # "": the method's name
        with pytest.raises(ParameterError, match="'name' parameter|'extra_names' parameter"):
            make()


@pytest.mark.parametrize("good", ["a", "fredy-gamma0.05", "dpsgd-eps8-one-run-whitebox", "A_1.b-2", "9" * 64])
def test_good_names_pass(good):
    assert check_name(good, "name", "test") == good


TOML = {
    "method_audits": '[[method_audits]]\nmethod = "fredy"\nname = {name}\n',
    "canary_audits": '[[canary_audits]]\nname = {name}\nepsilon = 8.0\n',
    "models": '[[models]]\nname = {name}\nmethod = "fredy"\n\n[[attacks]]\nkind = "threshold"\n',
}


@pytest.mark.parametrize("table", sorted(TOML))
@pytest.mark.parametrize("name", ['".."', '"../../outside"', '"a\\u0000b"', '"/etc"'])
def test_traversal_and_nul_names_in_audit_configs_via_the_cli(tmp_path, cli, table, name):
    run = tmp_path / "work" / "run"
    run.parent.mkdir()
    cfg = tmp_path / "work" / "audit.toml"
    cfg.write_text(TOML[table].format(name=name))
    code, out, err = cli(["audit", cfg, "--out", run, "--quiet"])
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("[dpaudit")]  # progress lines aside
    assert code == 2 and len(lines) == 1 and lines[0].startswith("dpaudit: error:"), err
    assert "'name' parameter" in lines[0] and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["audit.toml", "work"]     # nothing written anywhere
