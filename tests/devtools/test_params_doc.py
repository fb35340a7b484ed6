"""docs/params-reference.md is what the registered section dataclasses say, every key described."""

from __future__ import annotations

from dataclasses import dataclass

from factrl.devtools import params_doc


def test_the_committed_reference_is_current_and_complete(repo_root):
    page, undocumented = params_doc.render()
    assert undocumented == [], "fields no docstring describes (add a `name: meaning` line)"
    assert (repo_root / params_doc.PAGE).read_text(encoding="utf-8") == page, \
        "docs/params-reference.md is stale: python -m factrl.devtools.params_doc --write"
    assert params_doc.main(["--check", "--root", str(repo_root)]) == 0


def test_a_stale_page_fails_the_check(repo_root, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / params_doc.PAGE).write_text((repo_root / params_doc.PAGE).read_text() + "edited by hand\n")
    assert params_doc.main(["--check", "--root", str(tmp_path)]) == 1


def test_field_docs_read_name_lines_and_their_continuations():
    @dataclass(frozen=True)
    class Example:
        """An example.

        alpha: the first
            weight, continued.
        low / high: the bounds.
        """

        alpha: float = 1.0
        low: int = 0
        high: int = 1
        gamma: int = 2

    assert params_doc.field_docs(Example) == {"alpha": "the first weight, continued.", "low": "the bounds.",
                                             "high": "the bounds."}
    undocumented: list[str] = []
    rows, _ = params_doc.table(Example, undocumented)
    assert [u.rsplit(".", 1)[1] for u in undocumented] == ["gamma"] and len(rows) == 2 + 4
