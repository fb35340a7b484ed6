"""The names a ``device`` setting may hold: ``auto``, ``cpu``, ``cuda`` or ``cuda:N``.

A leaf module (no torch, no factrl import): the params loader (``config``) checks the names when
params load, and ``hardware.resolve_device`` maps them to a torch device where a model loads.
"""

from __future__ import annotations

import re

DEVICE_PATTERN = re.compile(r"auto|cpu|cuda(:[0-9]+)?")
