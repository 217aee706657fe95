"""A Flower app that measures the deployment engine's own floor (see benchmarks/bench_deployed_floor.py)."""
