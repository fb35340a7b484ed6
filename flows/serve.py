"""Serve the pipeline flow as a Prefect deployment on the cron schedule from params.

    prefect server start            # UI at http://127.0.0.1:4200
    PREFECT_API_URL=http://127.0.0.1:4200/api python -m flows.serve

The deployment allows one run at a time: two `dvc repro` in one workspace would fight over DVC's lock.
"""

from __future__ import annotations

from pathlib import Path

from factrl.config import load_section
from factrl.orchestration.pipeline import PipelineParams, pipeline


def build_deployment(params: PipelineParams, repo_root: str = "."):
    """The deployment object for ``pipeline`` (schedule, parameters, concurrency limit 1)."""
    from prefect.schedules import Cron

    return pipeline.to_deployment(
        name=params.deployment_name,
        schedule=Cron(params.cron, timezone=params.timezone) if params.cron else None,
        parameters={"repo_root": str(Path(repo_root).resolve()), "targets": list(params.targets) or None},
        concurrency_limit=1,
        description="factrl: dvc repro of the whole pipeline",
    )


def main() -> None:
    from prefect import serve

    params: PipelineParams = load_section(PipelineParams)
    serve(build_deployment(params), pause_on_shutdown=False)


if __name__ == "__main__":
    main()
