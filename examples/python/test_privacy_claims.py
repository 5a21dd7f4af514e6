"""Privacy claims checked in your own test suite: a DP-SGD recipe's accounted epsilon, and a claims file.

    pytest examples/python/test_privacy_claims.py

``assert_epsilon_at_most`` fails with every number and assumption in its message; ``dpaudit.check`` gives each claim
a verdict (HOLDS, UNPROVEN: the accounting cannot show it, REFUTED: certified evidence above it).
"""

import dpaudit
from dpaudit.testing import assert_epsilon_at_most

CLAIMS = """
[[claim]]
name = "dpsgd-digits"
mechanism = "dpsgd"
params = { dataset_size = 1437, batch_size = 64, noise_multiplier = 1.1, epochs = 20 }
epsilon = 6.0
delta = 1e-5
granularity = "example"
"""


def test_dpsgd_recipe_stays_within_its_budget():
    r = dpaudit.account("dpsgd", dataset_size=1437, batch_size=64, noise_multiplier=1.1, epochs=20, delta=1e-5)
    assert_epsilon_at_most(r, 6.0, 1e-5)


def test_claims_file_holds(tmp_path):
    claims = tmp_path / "claims.toml"
    claims.write_text(CLAIMS)
    report = dpaudit.check(claims)
    assert report.verdict == "HOLDS", report.summary()
    assert report.exit_code == 0
