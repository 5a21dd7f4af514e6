"""Every shipped method config loads, and fits the data set it names (issue: configs that crash at paper scale).

Each config under ``configs/`` (but the audit configs) is loaded with its method, then its data set is cut as
a run would cut it (split, partition; no training) — the real-size data sets are written in their real file
formats by :mod:`fake_data`. The method defaults and the small shipped configs are cut for seeds 0..9.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_data import write_adult, write_cifar10, write_mnist

from dpaudit._io import read_toml
from dpaudit.training.methods import METHODS, load_method_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"

#: Each method config file and the method it configures.
CONFIG_METHOD = {
    "pate.toml": "pate",
    "fedkt.toml": "fedkt", "fedkt_l1.toml": "fedkt", "fedkt_l2.toml": "fedkt", "fedkt_trees.toml": "fedkt",
    "fedkt_paper_adult.toml": "fedkt", "fedkt_paper_mnist.toml": "fedkt",
    "fredy.toml": "fredy", "fredy_paper_mnist.toml": "fredy", "fredy_paper_cifar10.toml": "fredy",
    "privatekt.toml": "privatekt", "privatekt_ablation_no_buffer.toml": "privatekt",
    "privatekt_ablation_no_selftrain.toml": "privatekt", "privatekt_ablation_uniform.toml": "privatekt",
    "fedmd_ldp.toml": "fedmd-ldp", "fedavg_ldp.toml": "fedavg-ldp", "fedsgd_ldp.toml": "fedsgd-ldp",
    "centrain.toml": "centrain", "centrain_canaries.toml": "centrain", "proxyfl.toml": "proxyfl", "proxyfl_replace.toml": "proxyfl",
}
FILE_DATASETS = {"mnist": write_mnist, "adult": write_adult, "cifar10": write_cifar10}
SLOW_DATASETS = {"cifar10"}  # its format fixes 3 KB a record: 180 MB to write


@pytest.fixture(scope="module")
def data_dirs(tmp_path_factory):
    """Real-size fake data sets, written once per module on first use."""
    root = tmp_path_factory.mktemp("real_size")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = FILE_DATASETS[name](root / name)
        return made[name]

    return get


def _load(path: Path, data_dirs=None):
    method = CONFIG_METHOD[path.name]
    cfg = load_method_config(method, path)
    if cfg.dataset in FILE_DATASETS and data_dirs is not None:
        cfg = load_method_config(method, path, data_dir=data_dirs(cfg.dataset))
    return cfg


def test_every_config_file_has_a_home():
    """Each file under configs/ is an audit config or a method config this test knows, in the table dialect."""
    for p in sorted(CONFIGS.glob("*.toml")):
        raw = read_toml(p)
        if p.name.startswith("audit_"):
            assert "models" in raw, p.name
            continue
        assert p.name in CONFIG_METHOD, p.name
        assert set(raw) <= {"data", "model", "method", "run", "canaries"} and all(isinstance(v, dict) for v in raw.values()), p.name
        assert CONFIG_METHOD[p.name] in METHODS


def _params(name: str):
    marks = []
    if name in ("fredy_paper_cifar10.toml",):
        marks.append(pytest.mark.slow)
    return pytest.param(CONFIGS / name, id=name, marks=marks)


@pytest.mark.parametrize("path", [_params(n) for n in sorted(CONFIG_METHOD)])
def test_config_fits_its_data_set_at_real_size(path, data_dirs):
    cfg = _load(path, data_dirs)
    cfg.prepare_data(0)
    if cfg.canaries is not None:   # the planted canaries fit the data too
        cfg.check_canaries_fit(0)


SMALL = sorted(n for n in CONFIG_METHOD if "paper" not in n and read_toml(CONFIGS / n).get("data", {}).get("name", "digits")
               in ("digits", "breast_cancer"))


@pytest.mark.parametrize("seed", range(10))
def test_defaults_fit_for_every_seed(seed):
    """Every method's defaults (what ``dpaudit train METHOD`` runs) and the small shipped configs cut cleanly
    for seeds 0..9 (ProxyFL's digits default used to fail for seed 1: major_class shortfall)."""
    for name in METHODS:
        load_method_config(name).prepare_data(seed)
    for name in SMALL:
        load_method_config(CONFIG_METHOD[name], CONFIGS / name).prepare_data(seed)
