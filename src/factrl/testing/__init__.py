"""Test support that the tests (tests/) and the benchmarks (bench/) share: the fault-injecting
OpenAI-compatible server (fault_llm), an app served in a thread (servers), throw-away pipeline
repositories (pipeline_repo), stage kills and full disks (stage_kills, disk_full), Prefect's test
harness (prefect_harness) and the pytest fixtures both suites use (fixtures). No library code imports
it: it is the top of the layer order (docs/design.md)."""
