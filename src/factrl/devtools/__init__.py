"""Tools for working on factrl itself (not imported by the pipeline): ``deps`` keeps dvc.yaml's code
dependencies equal to each stage's import closure."""
