"""The agents' tests run offline (their SmolLM2 tokenizer and scripted LLM: tests/conftest.py)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # tests never touch the network
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

