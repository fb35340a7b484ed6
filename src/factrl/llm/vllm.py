"""``factrl serve-agent CHECKPOINT``: a trained agent behind vLLM's OpenAI-compatible server.

Prints the ``vllm serve`` command, then runs it (``--dry-run``: print only). The model is served
under its checkpoint path as name, so a client that names it (``openai:PATH@http://host:port/v1``,
see ``factrl.llm.backends``) loads the same tokenizer and drives it token by token, exactly as the
in-process engine would. ``--generation-config vllm`` keeps the checkpoint's own sampling defaults
(Qwen3 ships top-k 20) out of the way: every request says how it samples.

vLLM is an optional extra for GPU machines (``pip install 'factrl[gpu]'``); it is never needed on CPU,
where ``factrl serve-llm`` serves the same API.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from factrl.servers import LOOPBACK

VLLM = "vllm"


def served_name(checkpoint: str) -> str:
    """The name a checkpoint is served under: its absolute path when it is a local directory (so
    clients find its tokenizer), else the hub id as given."""
    path = Path(checkpoint).expanduser()
    return str(path.resolve()) if path.is_dir() else checkpoint


def serve_agent_command(checkpoint: str, *, host: str = LOOPBACK, port: int = 8001, tensor_parallel_size: int = 1,
                        max_model_len: int | None = None, gpu_memory_utilization: float | None = None,
                        extra: Sequence[str] = ()) -> list[str]:
    """The ``vllm serve`` command serving ``checkpoint`` (see the module docstring)."""
    name = served_name(checkpoint)
    cmd = [VLLM, "serve", name, "--served-model-name", name, "--host", host, "--port", str(port),
           "--tensor-parallel-size", str(tensor_parallel_size), "--generation-config", "vllm"]
    if max_model_len:
        cmd += ["--max-model-len", str(max_model_len)]
    if gpu_memory_utilization:
        cmd += ["--gpu-memory-utilization", str(gpu_memory_utilization)]
    return cmd + list(extra)


def base_url(host: str, port: int) -> str:
    """The ``/v1`` base URL of a server listening on ``host:port``."""
    from factrl.servers import reachable_host

    return f"http://{reachable_host(host)}:{port}/v1"


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``factrl serve-agent``."""
    ap = argparse.ArgumentParser(prog="factrl serve-agent", description=__doc__.splitlines()[0])
    ap.add_argument("checkpoint",
                    help="a Hugging Face model directory (models/reason_<r>, models/search_<r>) or a hub id")
    ap.add_argument("--host", default=LOOPBACK, help="bind address (loopback unless told otherwise)")
    ap.add_argument("--port", type=int, default=8001)
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    ap.add_argument("--max-model-len", type=int, default=None, help="context length (the paper's 8192)")
    ap.add_argument("--gpu-memory-utilization", type=float, default=None)
    ap.add_argument("--dry-run", action="store_true", help="print the command only")
    args, extra = ap.parse_known_args(argv)
    cmd = serve_agent_command(args.checkpoint, host=args.host, port=args.port,
                              tensor_parallel_size=args.tensor_parallel_size, max_model_len=args.max_model_len,
                              gpu_memory_utilization=args.gpu_memory_utilization, extra=extra)
    print(shlex.join(cmd), flush=True)
    print(f"# clients: openai:{served_name(args.checkpoint)}@{base_url(args.host, args.port)}", flush=True)
    if args.dry_run:
        return 0
    if shutil.which(VLLM) is None:
        print("factrl serve-agent: vLLM is not installed here; on a GPU machine run "
              "`pip install 'factrl[gpu]'` (on CPU, `factrl serve-llm --model CHECKPOINT` serves the same API)",
              file=sys.stderr)
        return 2
    os.execvp(cmd[0], cmd)  # the server replaces this process: signals reach vLLM directly
    return 0  # not reached
