"""Precision and device resolution (factrl.hardware): auto picks bf16 only where it is native."""

from __future__ import annotations

import pytest
import torch

from factrl import hardware


@pytest.fixture
def cpu_kind(monkeypatch):
    """Pretend the CPU does (True) or does not (False) compute bf16 natively."""

    def set_kind(native: bool) -> None:
        monkeypatch.setattr(hardware, "cpu_bf16_native", lambda: native)

    return set_kind


def test_auto_is_bf16_only_on_cpus_with_native_bf16(cpu_kind):
    cpu_kind(False)
    assert hardware.resolve_precision("auto", "cpu") == "fp32"
    cpu_kind(True)
    assert hardware.resolve_precision("auto", "cpu") == "bf16"


@pytest.mark.parametrize("native", [False, True])
def test_explicit_precision_is_kept_on_any_cpu(cpu_kind, native):
    cpu_kind(native)
    assert hardware.resolve_precision("bf16", "cpu") == "bf16"
    assert hardware.resolve_precision("fp32", "cpu") == "fp32"


def test_this_machine_is_probed_from_torch():
    """The probe agrees with torch's own CPU feature checks (what oneDNN dispatches on)."""
    expected = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert hardware.cpu_bf16_native() is expected
    record = hardware.hardware_record("auto", "cpu")
    assert record["precision"] == ("bf16" if expected else "fp32")
    assert record["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_bad_names_are_clear_errors():
    with pytest.raises(ValueError, match="precision 'fp16' is not one of"):
        hardware.resolve_precision("fp16", "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            hardware.resolve_device("cuda")
    assert hardware.resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")


def test_autocast_follows_the_resolved_precision(cpu_kind):
    x = torch.randn(2, 3)
    layer = torch.nn.Linear(3, 3)
    cpu_kind(False)
    with hardware.autocast("auto", torch.device("cpu")):
        assert layer(x).dtype == torch.float32
    with hardware.autocast("bf16", torch.device("cpu")):
        assert layer(x).dtype == torch.bfloat16


_FAULTS_PER_STEP = """
import resource, sys, torch
from factrl import hardware
asked_before = hardware.allocator_tuned()  # asking applies nothing
applied = hardware.tune_allocator()
def step():  # a forward pass's pattern: a 64 MiB activation allocated, written and freed
    x = torch.empty(16 << 20, dtype=torch.float32)
    x.fill_(1.0)
    del x
# the steady state: a lean process (factrl.hardware and torch alone) first grows its heap by one
# 64 MiB block a step for ~8 steps (a small allocation pins each freed block), then reuses them
for _ in range(16):
    step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    step()
print(applied, (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 8, asked_before,
      hardware.allocator_tuned())
"""


@pytest.mark.parametrize("tuned", [True, False])
def test_tuned_allocator_reuses_freed_tensor_memory(tuned, repo_root):
    """With glibc's defaults every freed 64 MiB tensor goes back to the kernel and the next one
    faults in (and zeroes) 16k fresh pages; tuned, the pages stay in the process and are reused."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(repo_root / "src"), hardware.ALLOCATOR_ENV: "1" if tuned else "0"}
    out = subprocess.run([sys.executable, "-c", _FAULTS_PER_STEP], env=env, capture_output=True, text=True,
                         timeout=120, check=True).stdout.split()
    applied, faults = out[0] == "True", float(out[1])
    pages = (64 << 20) // 4096
    assert applied is tuned
    assert out[2:] == ["False", str(tuned)]  # hardware records say what ran, not what asking would do
    if tuned:  # 0 on most runs; 2048 on some (an 8 MiB span re-faulted): still 8x fewer
        assert faults < pages / 4, faults
    else:
        assert faults > pages / 2, faults
