"""TF Privacy AttackInputData's keyword names in the Python scores API (issue 36)."""

from __future__ import annotations

import numpy as np
import pytest

from dpaudit.attacks.scores import compare_scores, scores_attack, scores_audit, synthetic_scores
from dpaudit.errors import ParameterError


def test_attack_input_data_names_work_in_python():
    a = synthetic_scores(300, num_classes=4, kind="logits", leak=2.0, seed=1)
    old = scores_attack(a["logits_train"], a["logits_test"], kind="logits", member_labels=a["labels_train"],
                        nonmember_labels=a["labels_test"])
    new = scores_attack(logits_train=a["logits_train"], logits_test=a["logits_test"], labels_train=a["labels_train"],
                        labels_test=a["labels_test"])
    assert new.attack.metrics.auc == old.attack.metrics.auc and new.attack.bound.epsilon == old.attack.bound.epsilon
    loss = -np.log(np.exp(a["logits_train"][np.arange(300), a["labels_train"]]) / np.exp(a["logits_train"]).sum(1))
    loss0 = -np.log(np.exp(a["logits_test"][np.arange(300), a["labels_test"]]) / np.exp(a["logits_test"]).sum(1))
    r = scores_attack(loss_train=loss, loss_test=loss0)
    assert r.attack.metrics.auc > 0.6 and old.attack.metrics.auc > 0.6
    assert "threshold" in scores_audit(loss_train=loss, loss_test=loss0).reports
    with pytest.raises(ParameterError, match="not both"):
        scores_attack(a["logits_train"], logits_test=a["logits_test"], kind="logits")
    with pytest.raises(ParameterError, match="one kind"):
        scores_attack(logits_train=a["logits_train"], loss_test=loss0)
    with pytest.raises(ParameterError, match="needs both logits_train"):
        compare_scores(logits_train=a["logits_train"], labels_train=a["labels_train"])
    with pytest.raises(ParameterError, match="Got neither"):
        scores_attack()
