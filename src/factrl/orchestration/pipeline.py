"""`dvc repro` as a Prefect flow: one Prefect task per DVC stage, in DVC's topological order.

Run it in a checkout (``factrl pipeline``, ``python -m flows.pipeline``): it reads ``dvc.yaml`` and
``params.yaml`` there.

DVC stays the single source of the DAG and of the cache: the flow asks DVC for the stage order and
reproduces each stage with ``single_item=True`` (DVC itself skips an unchanged stage), so the UI
shows which stages ran and which were skipped. Prefect result persistence stays off.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_markdown_artifact, create_table_artifact

from factrl.config import PARAMS_FILE, load_section, params_section
from factrl.tables import markdown_table


@params_section("pipeline")
@dataclass(frozen=True)
class PipelineParams:
    """The Prefect flow and deployment that run ``dvc repro``.

    deployment_name: name of the served deployment.
    cron: schedule of the deployment (standard 5-field cron; empty string = no schedule).
    timezone: timezone of the cron schedule.
    targets: stages to reproduce (empty = the whole pipeline).
    """

    deployment_name: str = "factrl-nightly"
    cron: str = "0 2 * * *"
    timezone: str = "UTC"
    targets: tuple[str, ...] = ()


def stage_order(repo_root: str | Path = ".") -> list[str]:
    """Addresses of the pipeline's stages in dependency order (upstream first)."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(repo_root)) as repo:
        graph = repo.index.graph  # edges point from a stage to the stages it depends on
        order = list(reversed(list(nx.topological_sort(graph))))
        return [stage.addressing for stage in order if stage.cmd]


@task(name="dvc-stage", task_run_name="{stage}", persist_result=False, retries=0)
def reproduce_stage(stage: str, repo_root: str) -> bool:
    """Reproduce one stage; returns whether it actually ran (False = up to date, skipped)."""
    from dvc.repo import Repo

    with Repo(repo_root) as repo:
        ran = repo.reproduce(stage, single_item=True)
    get_run_logger().info("%s: %s", stage, "ran" if ran else "up to date")
    return bool(ran)


@flow(name="factrl-pipeline", persist_result=False, log_prints=True)
def pipeline(repo_root: str = ".", targets: list[str] | None = None) -> dict[str, bool]:
    """Reproduce the pipeline (or ``targets`` and their upstream) stage by stage."""
    repo_root = str(Path(repo_root).resolve())
    order = stage_order(repo_root)
    if targets:
        wanted = _with_upstream(repo_root, targets)
        order = [s for s in order if s in wanted]
    results = {}
    for stage in order:
        results[stage] = reproduce_stage(stage, repo_root)
    _publish_metrics(repo_root, results)
    return results


def _with_upstream(repo_root: str, targets: list[str]) -> set[str]:
    import networkx as nx
    from dvc.repo import Repo

    with Repo(repo_root) as repo:
        graph = repo.index.graph
        by_name = {s.addressing: s for s in graph.nodes}
        wanted = set()
        for target in targets:
            if target not in by_name:
                raise ValueError(f"unknown stage {target!r}; known: {sorted(by_name)}")
            wanted |= {s.addressing for s in nx.descendants(graph, by_name[target])} | {target}
        return wanted


def _publish_metrics(repo_root: str, results: dict[str, bool]) -> None:
    """Show the run's stage table and DVC metrics as a Prefect markdown artifact."""
    from dvc.repo import Repo

    lines = [markdown_table(["stage", "ran"], [[s, "yes" if r else "skipped"] for s, r in results.items()])]
    with Repo(repo_root) as repo:
        metrics = repo.metrics.show()
    eval_rows = _eval_table(Path(repo_root) / EVAL_METRICS)
    if eval_rows:
        # the evaluation first: the full metrics dump below may be cut to fit the artifact
        header = list(eval_rows[0])
        lines += ["", "## Evaluation (metrics/eval.json)", "",
                  markdown_table(header, [[str(r[k]) for k in header] for r in eval_rows])]
    lines += ["", "```json", json.dumps(metrics.get("", {}).get("data", {}), indent=1, default=str)[:20000], "```"]
    create_markdown_artifact(key="factrl-pipeline-run", markdown="\n".join(lines), description="dvc repro")
    if eval_rows:
        create_table_artifact(key="factrl-eval", table=eval_rows,
                              description="evaluate: accuracy / weighted F1 (percent) per dataset, hop and system")


EVAL_METRICS = "metrics/eval.json"


def _eval_table(path: Path) -> list[dict]:
    """metrics/eval.json as table rows (percent), or [] when the evaluate stage has not run."""
    if not path.exists():
        return []
    from factrl.eval.report import table_rows

    return table_rows(json.loads(path.read_text(encoding="utf-8")))


def main(params_file: str | None = None) -> None:
    from factrl.checkout import require_checkout

    require_checkout("factrl pipeline", "dvc.yaml")
    params: PipelineParams = load_section(PipelineParams, params_file or PARAMS_FILE)
    os.environ.setdefault("DVC_NO_ANALYTICS", "1")
    print(pipeline(".", list(params.targets) or None))


if __name__ == "__main__":
    main()
