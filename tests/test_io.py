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
