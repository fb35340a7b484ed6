"""factrl's benchmarks: one module per benchmark, each run from the repository root as
``python -m bench.<name>`` and writing bench/results/<name>.json with a ``measured`` block
(:mod:`bench._measured`). They import factrl (installed, or ``src/`` on ``PYTHONPATH``) and the shared
test support in :mod:`factrl.testing`, never the tests; their own tests are bench/tests/."""
