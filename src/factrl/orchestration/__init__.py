"""Orchestration with Prefect: checkpointed fan-out of LLM-call batches (:mod:`.fanout`), the
teacher's run (:mod:`.teacher`), the debate's claim batches (:mod:`.debate`) and ``dvc repro`` as a
flow (:mod:`.pipeline`). Each module imports Prefect, so only the stages and commands that run them
import these modules (the model-loading code path never does)."""

import os

# A pipeline that runs offline must not ask the network: the temporary Prefect API server a stage
# starts would otherwise send Prefect's start-up telemetry and log `ERROR ... Failed to send
# telemetry` when it cannot. Set before any module here imports Prefect (the server is a subprocess
# that inherits these); a value set by the user, or by the Makefile, wins.
for _key, _value in {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}.items():
    os.environ.setdefault(_key, _value)
