"""The fixtures the benchmarks' tests share with tests/, from factrl.testing (defined once)."""

from factrl.testing.fixtures import repo_root, shared_data  # noqa: F401  (pytest finds fixtures by name)
