"""The in-process engine's prefix cache: key/value states kept between calls, keyed by token ids.

Multi-turn rollouts continue the whole context so far at every turn, and many prompts share a long
system prompt; :class:`PrefixCache` keeps the key/value states of the sequences the engine
(``factrl.llm.local``) prefilled and decoded, bounded in bytes (least recently used first out), and
finds the entry sharing the longest prefix with a new prompt, so the engine runs the model only
over the tokens after it.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import torch


@dataclass
class PrefixEntry:
    """The key/value states of one token sequence: per layer ``(keys, values)``, each
    ``[num_kv_heads, len(ids), head_dim]``."""

    ids: torch.Tensor  # [T] int64
    kv: list[tuple[torch.Tensor, torch.Tensor]]
    nbytes: int


class PrefixCache:
    """A byte-bounded LRU store of key/value states keyed by token-id sequences.

    The states at position ``t`` depend only on tokens ``0..t``, so an entry serves any sequence
    that shares a prefix with it, not only sequences that extend it: :meth:`longest` returns the
    entry with the longest common prefix and its length. Entries that are a prefix of a newer
    entry are dropped (the newer one serves them), and the least recently used entries are
    evicted once ``max_bytes`` is exceeded.
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self.nbytes = 0
        self._entries: OrderedDict[tuple[int, ...], PrefixEntry] = OrderedDict()
        self._matrix: torch.Tensor | None = None  # [E, max_len] ids, -1 padded; rebuilt lazily
        self._keys: list[tuple[int, ...]] = []  # the entry of each matrix row

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0
        self._matrix, self._keys = None, []

    def _common_lengths(self, ids: torch.Tensor) -> torch.Tensor:
        """``[E]`` length of the common prefix of ``ids`` ``[T]`` with every entry (matrix order)."""
        if self._matrix is None:
            self._keys = list(self._entries)
            width = max(len(k) for k in self._keys)
            self._matrix = torch.full((len(self._keys), width), -1, dtype=torch.long)
            for r, key in enumerate(self._keys):
                self._matrix[r, : len(key)] = self._entries[key].ids
        m = min(self._matrix.shape[1], len(ids))
        same = self._matrix[:, :m] == ids[:m]
        return same.to(torch.int32).cumprod(dim=1).sum(dim=1)

    def longest(self, ids: torch.Tensor) -> tuple[PrefixEntry | None, int]:
        """The entry sharing the longest prefix with ``ids`` ``[T]`` and that length (0: none)."""
        if not self._entries or len(ids) == 0:
            return None, 0
        lengths = self._common_lengths(ids)
        best = int(lengths.argmax())
        n = int(lengths[best])
        if n == 0:
            return None, 0
        key = self._keys[best]
        self._entries.move_to_end(key)
        return self._entries[key], n

    def covers(self, ids: Sequence[int]) -> bool:
        """Whether an entry holds the states of all of ``ids``."""
        return bool(ids) and self.longest(torch.tensor(list(ids)))[1] == len(ids)

    def put(self, ids: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Store the states of ``ids`` (``kv`` as in :class:`PrefixEntry`) unless an entry covers them."""
        key = tuple(ids)
        nbytes = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if not key or nbytes > self.max_bytes:
            return
        t = torch.tensor(key, dtype=torch.long)
        if self._entries:
            lengths = self._common_lengths(t)
            covering = [self._keys[r] for r in (lengths == len(key)).nonzero().flatten().tolist()]
            if covering:  # an existing entry already extends this sequence
                self._entries.move_to_end(covering[0])
                return
            for r in (lengths == torch.tensor([len(k) for k in self._keys])).nonzero().flatten().tolist():
                self._drop(self._keys[r])  # a prefix of the new sequence: the new entry serves it
        self._entries[key] = PrefixEntry(t, kv, nbytes)
        self.nbytes += nbytes
        self._matrix = None
        while self.nbytes > self.max_bytes:
            self._drop(next(iter(self._entries)))

    def _drop(self, key: tuple[int, ...]) -> None:
        self.nbytes -= self._entries.pop(key).nbytes
        self._matrix = None
