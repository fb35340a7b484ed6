"""`dvc repro` as a Prefect flow: ``python -m flows.pipeline`` (or ``factrl pipeline``) in a checkout.

The flow is :func:`factrl.orchestration.pipeline.pipeline`; this entry point only runs it with the
params' ``pipeline`` section.
"""

from __future__ import annotations

from factrl.orchestration.pipeline import main, pipeline

__all__ = ["main", "pipeline"]

if __name__ == "__main__":
    main()
