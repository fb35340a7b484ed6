"""bench/learning_hard.py's report: the issue's keys, the paired gain over the same claims, the goals,
and accuracy by claim variant."""

from __future__ import annotations

import pytest

from bench import learning_hard as lh


def _preds(dataset: str, system: str, right: list[bool]) -> list[dict]:
    return [{"dataset": dataset, "system": system, "claim_id": f"c{i}", "num_hops": 2 + i % 3, "label": "SUPPORTS",
             "verdict": "SUPPORTS" if ok else "REFUTES"} for i, ok in enumerate(right)]


def _run(warm: int, trained: int, n: int = 90, uniform: float = 0.4) -> dict:
    preds = (_preds("demo", "HARIS (warm)", [i < warm for i in range(n)])
             + _preds("demo", "HARIS (trained)", [i < trained for i in range(n)])
             + _preds("demo", "HARIS (base)", [i % 2 == 0 for i in range(n)])
             + _preds("demo", "RAG", [i % 2 == 1 for i in range(n)]))
    for dataset in ("heldout_wording", "unseen_world", "clean_world"):
        preds += _preds(dataset, "HARIS (trained)", [i < trained for i in range(n)])
    return {"predictions": preds, "reason_metrics": [[{"step": 1.0, "uniform_group_rate": uniform}]]}


def test_report_keys_paired_gain_and_goals():
    runs = [_run(60, 81), _run(63, 84), _run(57, 78)]
    result = lh.report(runs, {"no_dynamic_sampling": _run(60, 70)})
    assert set(result["accuracy"]) == {"haris_base", "haris_warm", "haris_trained", "rag"}
    for cells in result["accuracy"].values():
        assert set(cells) == {"2hop", "3hop", "4hop", "pooled"}
        assert {"mean", "spread", "ci95"} <= set(cells["pooled"])
    assert result["accuracy"]["haris_trained"]["pooled"]["mean"] == pytest.approx(81 / 90)
    assert result["accuracy"]["haris_warm"]["pooled"]["spread"] == pytest.approx(6 / 90)
    assert result["accuracy"]["rag"]["pooled"]["spread"] == 0  # once, not per seed
    # 21 claims per seed turned right, none turned wrong: the paired interval sits above 0
    assert result["gain"]["mean"] == pytest.approx(21 / 90) and result["gain"]["ci95"][0] > 0.15
    assert result["gain"]["n"] == 270
    assert result["heldout_wording"]["pooled"] == pytest.approx(81 / 90)
    assert result["ablations"]["no_dynamic_sampling"]["pooled"] == pytest.approx(70 / 90)
    goals = result["goals"]
    assert goals["warm_pooled<=0.80"] and goals["gain>=0.10_ci_above_0"] and goals["trained_pooled>=0.80"]
    assert goals["trained>=rag+0.20"] and goals["uniform_group_rate<=0.5"]
    assert not goals["clean_world>=0.95"]  # 0.9: below the bar
    flat = lh.report([_run(80, 80)], {})
    assert flat["gain"]["mean"] == 0 and not flat["goals"]["gain>=0.10_ci_above_0"]


def test_variant_accuracy_groups_claims_by_kind():
    from factrl.data.params import WorldDifficulty, WorldParams
    from factrl.data.world_claims import generate_claims_with_variants

    world = WorldParams(seed=5, num_passages=400, num_claims=40, hops=(2, 3),
                        difficulty=WorldDifficulty(homonyms=0.3, wordings=2, near_miss=0.5))
    claims, variants = generate_claims_with_variants(world)
    preds = [{"dataset": "demo", "system": "S", "claim_id": c["id"], "label": c["label"],
              "verdict": "SUPPORTS"} for c in claims.to_pylist()]
    cells = lh.variant_accuracy(preds, world)["S"]
    near = sum(v["near_miss"] for v in variants)
    assert cells["near_miss"] == {"accuracy": 0.0, "n": near}  # every near miss is a refutation
    assert cells["supports"]["accuracy"] == 1.0
    assert cells["wording_0"]["n"] + cells.get("wording_1", {"n": 0})["n"] == 40
