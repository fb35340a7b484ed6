"""Shared pieces of the property-based bad-input tests (hypothesis): JSON-ish values of every type,
and a count of the cases each parser was tried on.

``tried(name)`` counts one case for parser ``name``; when ``FACTRL_FUZZ_COUNTS`` names a file, the
counts are added to it (JSON) at exit, which is how bench/reliability.py reports ``fuzz``.
"""

from __future__ import annotations

import atexit
import collections
import json
import os
from pathlib import Path

from hypothesis import strategies as st

COUNTS: collections.Counter[str] = collections.Counter()

# every JSON value a malformed file may hold where a string or a number belongs
scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=40), st.sampled_from(["", " ", "\n", "SUPPORTS", "REFUTES", "NEI", "1"]))
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                           max_leaves=8)


def tried(name: str) -> None:
    COUNTS[name] += 1


@atexit.register
def _write_counts() -> None:
    path = os.environ.get("FACTRL_FUZZ_COUNTS")
    if not path or not COUNTS:
        return
    file = Path(path)
    old = json.loads(file.read_text()) if file.is_file() else {}
    for name, n in COUNTS.items():
        old[name] = old.get(name, 0) + n
    file.write_text(json.dumps(old, indent=2, sort_keys=True))
