"""Benchmarks of ephemera, run from the repository root: `python -m bench.api` (the API server
on each store against raw etcd). `bench.common` holds what every benchmark shares."""
