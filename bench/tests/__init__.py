"""The benchmarks' own tests (report keys, overrides, pooling): run with the suite (pytest's testpaths)."""
