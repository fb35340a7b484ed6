"""Where torch runs and in which precision: the ``device`` and ``precision`` settings, resolved once.

``precision`` is ``auto`` (the default), ``bf16`` or ``fp32``. ``auto`` picks bf16 only where the
hardware computes it natively and fp32 elsewhere:

- a CUDA device that supports bf16 (Ampere and newer) -> bf16;
- a CPU with AVX512-BF16 or AMX tiles -> bf16 (2-core AVX512-BF16 machines run bf16 GEMMs at
  ~350-400 GFLOPS);
- any other CPU (AVX2 only: bf16 is emulated, measured at 5.4 GFLOPS against 24.7 in fp32 on a
  2-core AMD EPYC, which made a GRPO step several times slower) -> fp32.

``device`` is ``auto`` (CUDA when present, else CPU), ``cpu``, ``cuda`` or ``cuda:N``. Every params
section that loads a model has one (``train.search.device`` for the policy, its engine, trainer and
reference model; ``synthesize.teacher.device``, ``evaluate.device``, ``index.device`` ...); a CUDA
device asked for on a machine without one is an error naming that key. The CPU path never touches
CUDA code: ``auto`` only asks ``torch.cuda.is_available()``.

Every run records what was chosen and why (:func:`hardware_record`), so a timing always says which
kind of CPU it came from.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Literal

import torch

from factrl.devices import DEVICE_PATTERN  # the names a device setting may hold (checked when params load)

Precision = Literal["auto", "bf16", "fp32"]
PRECISIONS: tuple[str, ...] = ("auto", "bf16", "fp32")
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


def _cpuinfo_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


@functools.cache
def cpu_bf16_native() -> bool:
    """True when this CPU computes bf16 matrix products in hardware (AVX512-BF16 or AMX).

    Asks torch's own CPU feature probe (the one oneDNN dispatches on) and falls back to the
    kernel's CPU flags where that probe is missing.
    """
    probes = [getattr(torch.cpu, name, None) for name in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    if all(p is not None for p in probes):
        return any(p() for p in probes)
    flags = _cpuinfo_flags()
    return bool(flags & {"avx512_bf16", "amx_bf16"})


def resolve_device(device: str | torch.device = "auto", key: str = "device") -> torch.device:
    """``auto`` -> ``cuda`` when a CUDA device is visible, else ``cpu``; other names as given.

    Raises ``ValueError`` naming ``key`` (the params key the name came from, e.g.
    ``train.search.device``) for a malformed name, or for a CUDA device this machine does not have
    (a clear error instead of torch's, deep in a forward pass).
    """
    if isinstance(device, torch.device):
        device = str(device)
    if not DEVICE_PATTERN.fullmatch(device):
        raise ValueError(f"{key}: {device!r} is not a device; use auto, cpu, cuda or cuda:N")
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(device)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"{key}: {device!r}, but no CUDA device is visible on this machine (use auto or cpu)")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise ValueError(f"{key}: {device!r}, but this machine has {torch.cuda.device_count()} CUDA device(s)")
    return dev


def resolve_precision(precision: str = "auto", device: str | torch.device = "cpu") -> str:
    """``bf16`` or ``fp32`` for ``precision`` on ``device`` (``auto``: bf16 only where native)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision {precision!r} is not one of {list(PRECISIONS)}")
    if precision != "auto":
        return precision
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    if dev.type == "cuda":
        return "bf16" if torch.cuda.is_bf16_supported() else "fp32"
    return "bf16" if cpu_bf16_native() else "fp32"


def use_bf16(precision: str = "auto", device: str | torch.device = "cpu") -> bool:
    """Whether ``precision`` resolves to bf16 on ``device``."""
    return resolve_precision(precision, device) == "bf16"


def autocast(precision: str, device: torch.device):
    """A bf16 autocast context on ``device``'s type when ``precision`` is bf16, else a no-op."""
    if resolve_precision(precision, device) == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def hardware_record(precision: str = "auto", device: str | torch.device = "cpu") -> dict[str, str | bool | int]:
    """What a run's results should carry about the machine: the resolved device and precision,
    the requested precision, torch's CPU capability (``AVX2``, ``AVX512``, ...), whether bf16 is
    native here, and the thread count."""
    dev = device if isinstance(device, torch.device) else resolve_device(device)
    return {
        "device": str(dev),
        "precision": resolve_precision(precision, dev),
        "precision_requested": precision,
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_bf16_native": cpu_bf16_native(),
        "torch_threads": torch.get_num_threads(),
        "malloc_tuned": allocator_tuned(),
    }


# glibc's mallopt parameters (malloc.h) and what tune_allocator sets them to
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_ALLOCATOR_SETTINGS = {_M_MMAP_THRESHOLD: 1 << 30, _M_TRIM_THRESHOLD: (1 << 31) - 1, _M_TOP_PAD: 1 << 28}
ALLOCATOR_ENV = "FACTRL_MALLOC_TUNING"  # 0 leaves glibc's defaults (bench/allocator.py compares both)


@functools.cache
def tune_allocator() -> bool:
    """Keep freed tensor memory in the process instead of handing it back to the kernel (glibc only).

    By default glibc serves every allocation over 32 MiB with its own ``mmap`` and unmaps it when
    freed, and trims the heap whenever its free top exceeds 128 KiB. A forward pass allocates and
    frees the same large activations every step, so each step faults in (and the kernel zeroes)
    fresh pages again: ``make demo`` took 46 million minor page faults. Serving those from the heap
    and never trimming it makes the pages reusable: on 2 AMX cores, 3.7x fewer minor faults in a
    warm-start step and 2.3x fewer in decoding, peak memory +4% and +0.3%; the wall time moved
    within the VM's run-to-run spread (step 1.05x, decode 0.93x; ``bench/results/allocator.json``).
    ``make demo`` went from 46 to 13 million faults, its peak RSS from 12.3 to 15.7 GB.

    Called once per process where models load (:func:`factrl.llm.models.load_model_and_tokenizer`);
    returns whether the settings were applied (not on a non-glibc C library, nor with
    ``FACTRL_MALLOC_TUNING=0``).
    """
    import ctypes
    import os

    if os.environ.get(ALLOCATOR_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.gnu_get_libc_version  # noqa: B018 (glibc's own symbol: mallopt's parameters are glibc's)
    except (OSError, AttributeError):
        return False
    return all(libc.mallopt(param, value) == 1 for param, value in _ALLOCATOR_SETTINGS.items())


def allocator_tuned() -> bool:
    """Whether :func:`tune_allocator` has run in this process and applied its settings (asking does
    not apply them: a hardware record of a process that loaded no model says False)."""
    return tune_allocator.cache_info().currsize > 0 and tune_allocator()


def module_bytes(module: torch.nn.Module | None) -> int:
    """Bytes held by ``module``'s parameters and buffers (0 for None)."""
    if module is None:
        return 0
    tensors = [*module.parameters(), *module.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)


def peak_rss_mib() -> float:
    """This process's peak resident memory so far, in MiB (Linux reports ``ru_maxrss`` in KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
