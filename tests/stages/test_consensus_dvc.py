"""The SC-MAKS stages in the DVC graph: a fit_consensus param edit reruns only fit_consensus (and,
downstream, evaluate); a debate edit reruns the debate and what reads it. Stand-in outputs are
committed first (see test_train_dvc.py), then ``reproduce(dry=True)`` shows what DVC would run."""

from __future__ import annotations

from factrl.testing.pipeline_repo import edit_params
from tests.stages.test_train_dvc import _downstream, _dry, committed_repo  # noqa: F401 - the fixture


def test_fit_consensus_edit_reruns_only_fit_consensus_and_evaluate(committed_repo):  # noqa: F811
    edit_params(committed_repo, {"fit_consensus": {"aggregator": {"entropy_coef": 0.05}}})
    changed = _dry(committed_repo)
    assert changed == ["fit_consensus"]
    assert _downstream(committed_repo, changed) == {"evaluate"}


def test_consensus_ablation_is_a_fit_consensus_edit(committed_repo):  # noqa: F811
    edit_params(committed_repo, {"fit_consensus": {"ablations": ["uniform_vote"]}})
    assert _dry(committed_repo) == ["fit_consensus"]


def test_debate_edit_reruns_the_debate_and_what_reads_it(committed_repo):  # noqa: F811
    edit_params(committed_repo, {"debate": {"rounds": 3}})
    changed = _dry(committed_repo)
    assert changed == ["debate"]
    assert _downstream(committed_repo, changed) == {"fit_consensus", "evaluate"}
