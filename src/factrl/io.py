"""File I/O shared by every stage: atomic writes and validated Parquet/JSON reads and writes.

Nothing a stage writes is ever half-written: each writer goes to a temporary file in the same
directory and renames it into place, so a killed run leaves either the old file or the new one. A
write that fails for want of space (a full disk, a quota, a file-size limit) raises
:class:`OutputWriteError` naming the output, and its temporary file is removed.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

# Read once at import (reading it means setting it, which is not thread-safe later on).
_UMASK = os.umask(0o022)
os.umask(_UMASK)


# errno values of "no room": a full disk, a quota, a file over RLIMIT_FSIZE
_NO_SPACE = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


class OutputWriteError(OSError):
    """Writing an output failed; the message names the output and says why (e.g. the disk is full)."""


def _no_space(exc: OSError) -> bool:
    # pyarrow's writers raise OSError without errno set; their message carries the C error text
    text = str(exc)
    return exc.errno in _NO_SPACE or any(os.strerror(e) in text for e in _NO_SPACE)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; rename it onto ``path`` only if the block succeeds."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        try:
            yield tmp_path
        except OSError as exc:
            if not _no_space(exc):
                raise
            raise OutputWriteError(exc.errno or errno.ENOSPC,
                                   f"cannot write {path}: no space left for it ({exc}); nothing was written "
                                   f"there (the old file, if any, is untouched); free space on the disk "
                                   f"holding {path.parent} and rerun") from exc
        if tmp_path.is_file():
            # mkstemp makes the file owner-only; give the result the permissions any new file gets
            tmp_path.chmod(0o666 & ~_UMASK)
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_parquet(table: pa.Table, path: str | Path, schema: pa.Schema | None = None) -> None:
    """Write ``table`` (cast to ``schema`` when given) atomically as Parquet."""
    if schema is not None:
        table = table.select(schema.names).cast(schema)
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp, compression="zstd")


def write_json(obj: Any, path: str | Path) -> None:
    """Write ``obj`` as pretty JSON atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


def write_text(text: str, path: str | Path) -> None:
    """Write ``text`` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def file_digest(path: str | Path) -> str:
    """sha256 of a file's bytes, read in 4 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def model_digest(model_dir: str | Path) -> str:
    """Content hash of a Hugging Face model directory (weights and configs), or the name itself
    for an embedded/hub model."""
    d = Path(model_dir)
    if not d.is_dir():
        return str(model_dir)
    h = hashlib.sha256()
    for f in sorted(p for p in d.rglob("*") if p.is_file() and not p.name.startswith(".")):
        h.update(f.relative_to(d).as_posix().encode())
        h.update(file_digest(f).encode())
    return h.hexdigest()
