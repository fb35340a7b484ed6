"""factrl.io: atomic writes leave either the old file or the whole new one, with normal permissions."""

import os

import pytest

from factrl.io import atomic_path, write_json


def test_atomic_write_replaces_whole_file_with_umask_permissions(tmp_path):
    target = tmp_path / "out.json"
    write_json({"a": 1}, target)
    umask = os.umask(0)
    os.umask(umask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~umask  # not mkstemp's owner-only 0600
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed mid-write")
    assert target.read_text().startswith("{") and list(tmp_path.iterdir()) == [target]


def test_a_write_with_no_room_names_the_output_and_leaves_no_file(tmp_path):
    """RLIMIT_FSIZE makes the write fail as a full disk would (EFBIG): OutputWriteError naming the
    output, the old file untouched, no temporary file left."""
    import subprocess
    import sys

    target = tmp_path / "out.parquet"
    target.write_bytes(b"old")
    code = (
        "import resource, pyarrow as pa\n"
        "from factrl.io import OutputWriteError, write_parquet\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))\n"
        "table = pa.table({'x': [str(i) * 50 for i in range(5000)]})\n"
        "try:\n"
        f"    write_parquet(table, {str(target)!r})\n"
        "except OutputWriteError as exc:\n"
        "    print('ERROR', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert f"cannot write {target}: no space left" in done.stdout, done.stdout + done.stderr
    assert target.read_bytes() == b"old" and list(tmp_path.iterdir()) == [target]
