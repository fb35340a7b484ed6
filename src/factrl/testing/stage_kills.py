"""SIGKILL a DVC stage at a point drawn from its own progress, rerun it, compare its outputs (issue 41).

Shared by the kill tests (tests/stages/test_kills.py) and bench/reliability_kills.py.

A stage's progress is what it prints: ``dvc repro -s STAGE`` runs in its own process group with
stdout and stderr on one pipe (``PYTHONUNBUFFERED``), and every line the stage's command prints is a
progress event, timestamped. An uninterrupted reference run gives the stage's lines; a kill point is
one of them drawn in the first or the last third (``early`` / ``late``), and the killed run is
SIGKILLed (the whole process group: DVC and the stage, as a crash or the OOM killer would) the
moment that line appears. A stage printing fewer than ``MIN_LINES`` lines is killed at a time drawn
in the same third of its reference duration instead (the record says which). Then ``dvc repro -s
STAGE`` again, to the end: its outputs are hashed (sha256 per file) and compared with the reference's.

Before each trial the stage's outputs, persisted ones included, are deleted, its dvc.lock entry is
removed (as if it never ran: DVC would otherwise check the reference's outputs out of its cache) and
``FACTRL_CACHE`` points at a fresh directory, so the trial starts from nothing the reference left
behind and whatever it resumes from is what its own killed run wrote. ``--no-run-cache`` keeps DVC
from restoring a run it has seen.

:func:`kill_stage` is one stage's reference and trials; :func:`kill_flow` kills a Prefect flow run
(``flows.pipeline``) mid-stage and :func:`lock_consistent` checks dvc.lock after it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

MIN_LINES = 6
# DVC's lines that open and close the stage's command; what the command prints between them (less
# DVC's own warnings, printed by its import-closure checks) is the stage's progress.
_CMD_START = re.compile(r"^> ")
_CMD_END = re.compile(r"^(Updating lock file|Generating lock file|ERROR: failed to reproduce)")
_DVC_LINE = re.compile(r"^(WARNING: '.*' is empty\.|\s*$)")
# What a stage prints when it picks up a killed run's work (index chunks, synthesis batches, trainer
# checkpoints, debate phases).
_RESUME_LINE = re.compile(r"resum", re.IGNORECASE)
_RESUMED_KEY = re.compile(r"resumed|resumed_from|batches_resumed|\w+_resumed")


@dataclass
class Run:
    """One ``dvc repro -s`` run: its return code, wall time, when the stage's command started and
    ended (seconds from the start; None if it never did) and every line as (seconds, text, in_cmd)."""

    returncode: int | None
    seconds: float
    cmd_start: float | None = None
    cmd_end: float | None = None
    lines: list[tuple[float, str, bool]] = field(default_factory=list)
    killed_at: str | None = None

    @property
    def stage_lines(self) -> list[tuple[float, str]]:
        """The stage command's own lines: its progress."""
        return [(t, s) for t, s, in_cmd in self.lines if in_cmd and not _DVC_LINE.match(s)]

    @property
    def cmd_seconds(self) -> float:
        return round((self.cmd_end or self.seconds) - (self.cmd_start or 0.0), 2)


def stage_env(repo: Path, cache: Path) -> dict:
    """The environment of a stage run in ``repo``: its own code first, a trial's own cache."""
    return {**os.environ, "PYTHONUNBUFFERED": "1", "FACTRL_CACHE": str(cache), "DVC_NO_ANALYTICS": "1",
            "PYTHONPATH": os.pathsep.join([str(repo / "src"), str(repo)])}


def repro(repo: Path, stage: str, cache: Path, *, kill_line: int | None = None, kill_after_s: float | None = None,
          timeout: float = 3600, log: Path | None = None) -> Run:
    """``dvc repro -s --no-run-cache stage`` in ``repo`` (the stage really runs: DVC's run cache would
    restore a deleted output instead); SIGKILL its process group when the stage prints its
    ``kill_line``-th line (0-based) or ``kill_after_s`` seconds after its command started."""
    env = stage_env(repo, cache)
    proc = subprocess.Popen([sys.executable, "-m", "dvc", "repro", "-s", "--no-run-cache", stage], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)
    run = Run(None, 0.0)
    t0 = time.monotonic()
    kill = threading.Event()

    def read() -> None:
        seen = 0
        for text in proc.stdout:
            text, now = text.rstrip("\n"), round(time.monotonic() - t0, 3)
            if run.cmd_start is None and _CMD_START.match(text):
                run.cmd_start = now
            elif run.cmd_start is not None and run.cmd_end is None and _CMD_END.match(text):
                run.cmd_end = now
            in_cmd = run.cmd_start is not None and run.cmd_end is None and not _CMD_START.match(text)
            run.lines.append((now, text, in_cmd))
            if log is not None:
                with log.open("a", encoding="utf-8") as f:
                    f.write(f"{now:8.2f} {'|' if in_cmd else ' '} {text}\n")
            if not in_cmd or _DVC_LINE.match(text):
                continue
            if kill_line is not None and seen == kill_line and not kill.is_set():
                run.killed_at = f"line {kill_line}: {text[:120]}"
                kill.set()
            seen += 1

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None and not kill.is_set() and time.monotonic() - t0 < timeout:
        if kill_after_s is not None and run.cmd_start is not None and time.monotonic() - t0 - run.cmd_start >= kill_after_s:
            run.killed_at = f"{kill_after_s:.1f} s into the command"
            kill.set()
            break
        time.sleep(0.02)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        if not kill.is_set():
            proc.wait()
            raise TimeoutError(f"dvc repro -s {stage} ran past {timeout} s")
    proc.wait()
    reader.join(timeout=10)
    run.returncode = proc.returncode
    run.seconds = round(time.monotonic() - t0, 2)
    return run


def stage_outs(repo: Path, stage: str) -> list[str]:
    """Paths (relative to ``repo``) of every output of ``stage``: outs, metrics, plots, persisted ones."""
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        (found,) = [s for s in dvc.index.stages if s.name == stage]
        return sorted(str(Path(o.fs_path).relative_to(repo.resolve())) for o in found.outs)


def file_hashes(repo: Path, paths: list[str]) -> dict[str, str]:
    """sha256 of every file under ``paths`` (relative names); temp files of atomic writes included:
    one left behind is a finding."""
    out = {}
    for rel in paths:
        root = repo / rel
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []
        for p in files:
            out[str(p.relative_to(repo))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def clear_outputs(repo: Path, paths: list[str]) -> None:
    for rel in paths:
        p = repo / rel
        if p.is_dir():
            shutil.rmtree(p)
        elif p.exists():
            p.unlink()


def kill_points(reference: Run, rng: random.Random) -> dict[str, dict]:
    """One kill point in the first third and one in the last third of the reference's progress."""
    lines = reference.stage_lines
    n = len(lines)
    if n >= MIN_LINES:
        early = rng.randint(0, n // 3 - 1)
        late = rng.randint(-(-2 * n // 3), n - 2)  # never the last line: the work is done by then
        return {"early": {"line": early, "of_lines": n}, "late": {"line": late, "of_lines": n}}
    # too few lines: a time in the same third of the reference command's duration
    return {"early": {"after_s": round(reference.cmd_seconds * rng.uniform(0.1, 0.33), 2), "of_s": reference.cmd_seconds},
            "late": {"after_s": round(reference.cmd_seconds * rng.uniform(0.67, 0.9), 2), "of_s": reference.cmd_seconds}}


def resumed_in_outputs(repo: Path, outs: list[str]) -> bool:
    """Whether a JSON output says the run resumed (``resumed: true``, ``batches_resumed > 0``,
    ``resumed_from: <step>``). Only those keys count (a tokenizer's vocabulary has a ``resumed`` entry)."""

    def found(obj) -> bool:
        if isinstance(obj, dict):
            return any((_RESUMED_KEY.fullmatch(str(k)) and v and not isinstance(v, (dict, list))) or found(v)
                       for k, v in obj.items())
        return isinstance(obj, list) and any(found(v) for v in obj)

    files = [p for rel in outs for p in ([repo / rel] if (repo / rel).is_file() else (repo / rel).rglob("*.json"))
             if p.suffix == ".json" and p.is_file() and not p.name.startswith(("tokenizer", "vocab"))]
    return any(found(json.loads(p.read_text())) for p in files)


def forget(repo: Path, stage: str, outs: list[str]) -> None:
    """Make ``stage`` never run: its outputs deleted, its entry gone from dvc.lock (else DVC would
    check the reference's outputs out of its cache instead of running the stage)."""
    clear_outputs(repo, outs)
    lock_file = repo / "dvc.lock"
    if lock_file.exists():
        lock = yaml.safe_load(lock_file.read_text()) or {}
        if lock.get("stages", {}).pop(stage, None) is not None:
            lock_file.write_text(yaml.safe_dump(lock, sort_keys=False))


def trial(repo: Path, stage: str, outs: list[str], point: dict, cache: Path, log: Path | None = None) -> dict:
    """Forget the stage, run it killed at ``point``, rerun it to the end; the record."""
    forget(repo, stage, outs)
    shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True)
    killed = repro(repo, stage, cache, kill_line=point.get("line"), kill_after_s=point.get("after_s"), log=log)
    left = file_hashes(repo, outs)
    state = sorted(str(p.relative_to(cache)) for p in cache.rglob("*") if p.is_file())
    rerun = repro(repo, stage, cache, log=log)
    if rerun.returncode != 0:
        tail = "\n".join(s for _, s, _ in rerun.lines[-30:])
        raise RuntimeError(f"rerun of {stage} after a kill at {point} failed:\n{tail}")
    return {"point": point, "killed_at": killed.killed_at, "killed_returncode": killed.returncode,
            "killed_seconds": killed.seconds, "completed_before_kill": killed.returncode == 0,
            "files_left_by_kill": len(left), "cache_files_left_by_kill": len(state),
            "resumed": any(_RESUME_LINE.search(s) for _, s in rerun.stage_lines) or resumed_in_outputs(repo, outs),
            "resume_lines": [s[:160] for _, s in rerun.stage_lines if _RESUME_LINE.search(s)][:3],
            "rerun_seconds": rerun.seconds, "hashes": file_hashes(repo, outs)}


# Keys of a JSON output that hold a duration or a clock reading: they differ between any two runs.
# durations, clock readings and the machine's own measurements of the run (debate's `peak_rss_mib`
# differs between two uninterrupted runs)
_TIMING_KEY = re.compile(r"(seconds|_s|_ms|time|wall|elapsed|started|finished|date|timestamp|rss_mib|rss_gib)$",
                         re.IGNORECASE)
# the calls a rerun's LLM cache answered instead of the backend (run history, but not a sign of a resume)
_CACHE_COUNTER_KEY = re.compile(r"cache_hits|cache_misses|calls")
# JSON / CSV outputs compare "equal" when they differ only in these keys (durations, clock readings) or
# in the record of the run's own history, whether and where it resumed (_RESUMED_KEY, matched whole)
# and what its cache answered (_CACHE_COUNTER_KEY, matched whole):
# warmup's summary says `resumed_from: 1` after a kill and null otherwise, the weights being the same;
# a rerun answers from the LLM cache what the killed run paid for, so its call counters (debate's
# `calls`, `cache_hits`) differ by design


def _run_history_key(key) -> bool:
    return bool(_TIMING_KEY.search(str(key)) or _RESUMED_KEY.fullmatch(str(key))
                or _CACHE_COUNTER_KEY.fullmatch(str(key)))


def without_timings(obj):
    """``obj`` (parsed JSON) less every timing and resume-record key, at any depth."""
    if isinstance(obj, dict):
        return {k: without_timings(v) for k, v in obj.items() if not _run_history_key(k)}
    if isinstance(obj, list):
        return [without_timings(v) for v in obj]
    return obj


def timing_free(path: Path):
    """A JSON, CSV or TSV output less its timing keys / columns (:func:`without_timings`); a DVCLive
    curve file (``plots/metrics/step_time.tsv``: step and one column) of a timing keeps its steps."""
    if path.suffix == ".json":
        return without_timings(json.loads(path.read_text()))
    import csv

    with path.open(newline="") as f:
        return [without_timings(row) for row in csv.DictReader(f, delimiter="\t" if path.suffix == ".tsv" else ",")]


def same_values(a: Path, b: Path) -> bool:
    """Whether two ``torch.save`` files hold the same tensors, arrays and values (their bytes differ
    between two saves of equal objects: two uninterrupted fit_consensus runs do)."""
    import numpy as np
    import torch

    def equal(x, y) -> bool:
        if type(x) is not type(y):
            return False
        if isinstance(x, torch.Tensor):
            return x.dtype == y.dtype and x.shape == y.shape and torch.equal(x, y)
        if isinstance(x, np.ndarray):
            return x.dtype == y.dtype and np.array_equal(x, y)
        if isinstance(x, dict):
            return x.keys() == y.keys() and all(equal(x[k], y[k]) for k in x)
        if isinstance(x, (list, tuple)):
            return len(x) == len(y) and all(equal(u, v) for u, v in zip(x, y))
        return x == y

    return equal(torch.load(a, weights_only=False), torch.load(b, weights_only=False))


def compare(reference: dict[str, str], got: dict[str, str], reference_dir: Path | None = None,
            repo: Path | None = None) -> dict:
    """Which files differ from the reference. ``identical``: none; ``equal``: the only differences are
    timing keys of JSON files or timing columns of CSV and TSV files (DVCLive's curves), ``.pt`` files holding equal values, or
    the keys recording a resume or the calls a rerun's cache answered
    (``resumed``, ``resumed_from``, ``batches_resumed``: the documented seeded-equal case; compared when
    ``reference_dir`` holds a copy of the reference outputs)."""
    differ = sorted(k for k in reference.keys() | got.keys() if reference.get(k) != got.get(k))
    timing_only = []
    if reference_dir is not None and repo is not None:
        for rel in differ:
            a, b = reference_dir / rel, repo / rel
            if a.is_file() and b.is_file() and rel.endswith((".json", ".csv", ".tsv")):
                if timing_free(a) == timing_free(b):
                    timing_only.append(rel)
            elif a.is_file() and b.is_file() and rel.endswith(".pt") and same_values(a, b):
                timing_only.append(rel)  # torch.save's bytes vary between equal saves (fit_consensus)
    return {"identical": not differ, "equal": len(differ) == len(timing_only), "files": len(reference),
            "differ": differ, "differ_in_timings_only": timing_only}


def stages_of(repo: Path) -> list[str]:
    """The pipeline's stage names (``synthesize@1``...) in dependency order, upstream first."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(repo)) as dvc:
        order = reversed(list(nx.topological_sort(dvc.index.graph)))  # edges point to dependencies
        return [stage.name for stage in order if stage.cmd]


def tiny_repo(root: Path, dest: Path) -> Path:
    """A copy of the checkout at ``root`` with the tiny profile applied and no dvc.lock."""
    from factrl.testing.pipeline_repo import make_pipeline_repo

    tiny = yaml.safe_load((root / "profiles" / "tiny.yaml").read_text())
    repo = make_pipeline_repo(root, dest, tiny)
    (repo / "dvc.lock").unlink(missing_ok=True)  # this checkout's lock records another profile's run
    return repo


def kill_stage(repo: Path, stage: str, rng: random.Random, work: Path, trials: bool = True,
               points: tuple[str, ...] = ("early", "late")) -> dict:
    """Reference run, then (``trials``) one trial per kill point of ``points``; the stage's record.
    The reference outputs are back in place (and in dvc.lock) at the end, for the next stages."""
    work.mkdir(parents=True, exist_ok=True)
    outs = stage_outs(repo, stage)
    log = work / f"{stage.replace('@', '_')}.log"
    reference = repro(repo, stage, work / "cache-ref", log=log)
    if reference.returncode != 0:
        tail = "\n".join(s for _, s, _ in reference.lines[-30:])
        raise RuntimeError(f"reference run of {stage} failed:\n{tail}")
    expected = file_hashes(repo, outs)
    saved = work / "saved" / stage.replace("@", "_")
    for rel in outs:  # the reference outputs, restored after the trials for the next stages
        src = repo / rel
        if src.exists():
            (saved / rel).parent.mkdir(parents=True, exist_ok=True)
            (shutil.copytree if src.is_dir() else shutil.copy2)(src, saved / rel)
    record = {"outputs": outs, "reference_seconds": reference.seconds, "reference_command_seconds": reference.cmd_seconds,
              "progress_lines": len(reference.stage_lines), "reference_hashes": expected, "kills": {}}
    drawn = kill_points(reference, rng)
    if not trials:
        record["kills"] = {"not_run": "reference only (--trials): the stage's outputs feed the next stages"}
        return record
    for name in points:
        point = drawn[name]
        got = trial(repo, stage, outs, point, work / f"cache-{name}", log=log)
        got.update(compare(expected, got.pop("hashes"), saved, repo))
        record["kills"][name] = got
        print(f"{stage} {name}: killed at {got['killed_at']}, resumed={got['resumed']}, "
              f"identical={got['identical']} equal={got['equal']} {got['differ'] or ''}", flush=True)
    forget(repo, stage, outs)
    for rel in outs:
        if (saved / rel).exists():
            (shutil.copytree if (saved / rel).is_dir() else shutil.copy2)(saved / rel, repo / rel)
    with_commit = subprocess.run([sys.executable, "-m", "dvc", "commit", "-f", "-q", stage], cwd=repo,
                                 env=stage_env(repo, work / "cache-ref"), capture_output=True, text=True)
    record["reference_restored"] = with_commit.returncode == 0
    return record


def lock_consistent(repo: Path) -> dict:
    """Stages in dvc.lock whose outputs do not match their recorded hashes (must be none)."""
    lock = yaml.safe_load((repo / "dvc.lock").read_text()) if (repo / "dvc.lock").exists() else {}
    locked = sorted((lock or {}).get("stages", {}))
    status = subprocess.run([sys.executable, "-m", "dvc", "status", "--json"], cwd=repo, capture_output=True,
                            text=True, env=stage_env(repo, repo / ".cache"))
    changed = json.loads(status.stdout or "{}")
    half = {}
    for stage in locked:
        bad = [c for c in changed.get(stage, []) if isinstance(c, dict) and "changed outs" in c]
        if bad:
            half[stage] = bad
    return {"stages_in_lock": locked, "half_recorded": half}


def kill_flow(repo: Path, stage: str, after_s: float, work: Path) -> dict:
    """``python -m flows.pipeline`` (targets: index, curriculum, so prepare too) SIGKILLed
    ``after_s`` seconds after it starts ``stage`` (DVC's "Running stage" line, or Prefect's task run)."""
    env = {**stage_env(repo, work / "flow-cache"), "PREFECT_HOME": str(work / "prefect")}
    log = work / "flow.log"
    work.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen([sys.executable, "-c", "from flows.pipeline import pipeline; "
                             "print(pipeline('.', ['index', 'curriculum']))"], cwd=repo, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                            start_new_session=True)
    started = re.compile(rf"Running stage '{re.escape(stage)}'|[Tt]ask run '{re.escape(stage)}")
    t0, seen = time.monotonic(), {}

    def read() -> None:
        with log.open("w", encoding="utf-8") as f:
            for text in proc.stdout:
                f.write(f"{time.monotonic() - t0:8.2f} {text}")
                if "at" not in seen and started.search(text):
                    seen["at"] = time.monotonic()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while proc.poll() is None and ("at" not in seen or time.monotonic() - seen["at"] < after_s):
        time.sleep(0.05)
    killed = proc.poll() is None
    if killed:
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=10)
    return {"stage": stage, "after_s": after_s, "killed": killed, "stage_started": "at" in seen,
            "returncode": proc.returncode, "seconds": round(time.monotonic() - t0, 1), **lock_consistent(repo)}
