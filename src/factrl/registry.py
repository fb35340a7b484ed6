"""Name -> implementation registries, for every place where factrl chooses by name.

A params key (``loss_agg: token-mean``, ``kl_type: low_var_kl``, ``reward: haris_reasoning``), an
eval system (``rag``) or a CLI word names an entry of a :class:`Registry`; the code looks the name
up instead of branching on it, so adding a choice is one registration next to its implementation
(verl's ``register_adv_est`` / ``register_policy_loss`` in ``trainer/ppo/core_algos.py`` work the
same way). A Registry is a plain dict underneath: iterate it for the known names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")
F = TypeVar("F")


class UnknownName(KeyError, ValueError):  # noqa: N818 - reads as a sentence at the raise site
    """A name that no entry of a registry has (a KeyError, and a ValueError for callers of the
    functions that used to branch on the name); the message lists the registered names."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0])


class Registry(dict[str, T], Generic[T]):
    """Entries by name; ``kind`` names what they are in errors (``"KL estimator"``)."""

    def __init__(self, kind: str, hint: str = "") -> None:
        super().__init__()
        self.kind = kind
        self.hint = hint  # appended to the unknown-name error, e.g. how names may be decorated

    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` as ``name``; a second, different entry under a taken name is an error."""
        if name in self and self[name] is not entry:
            owner = getattr(self[name], "__module__", type(self[name]).__module__)
            raise ValueError(f"{self.kind} {name!r} is already registered by {owner}")
        self[name] = entry
        return entry

    def register(self, name: str, *aliases: str) -> Callable[[F], F]:
        """Decorator registering a function as ``name`` (and each alias)."""

        def deco(fn: F) -> F:
            for n in (name, *aliases):
                self.add(n, fn)  # type: ignore[arg-type]
            return fn

        return deco

    def lookup(self, name: str) -> T:
        """The entry registered as ``name``; :class:`UnknownName` listing the known names otherwise."""
        try:
            return self[name]
        except KeyError:
            raise UnknownName(f"unknown {self.kind} {name!r}; registered: {sorted(self)}{self.hint}") from None
