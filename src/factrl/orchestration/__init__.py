"""Orchestration with Prefect: checkpointed fan-out of LLM-call batches (:mod:`.fanout`), the
teacher's run (:mod:`.teacher`), the debate's claim batches (:mod:`.debate`) and ``dvc repro`` as a
flow (:mod:`.pipeline`). Each module imports Prefect, so only the stages and commands that run them
import these modules (the model-loading code path never does)."""
