.PHONY: test test-all fast multinode lint verl-suite bench bench-gpu chaos

# The default tier, as CI runs it (slow learning/resume runs left out), in two processes taking whole files.
test:
	python -m pytest -q -n 2 --dist loadfile tests

# Every test, the slow tier included (long learning, resume and failure runs, and end-to-end runs whose ground the
# default tier covers elsewhere; not timed since tests moved there on 2026-11-26).
test-all:
	python -m pytest -q -n 2 --dist loadfile tests -m ""

# Tests that start no Ray cluster and train nothing long: a quick check while editing.
fast:
	python -m pytest -q tests -m "not slow and not ray"

# The multi-node tests alone: each module starts a local Ray cluster of 2-3 nodes (raylets) on this machine.
multinode:
	python -m pytest -q tests -m multinode

lint:
	ruff check .
	ruff format --check .
	python -m mypy

# Upstream verl 0.9.1's own CPU tests run against this package (downloads its wheel).
verl-suite:
	python tests/compat/run_verl_cpu_suite.py

# The CPU benchmark set (tables + JSON under bench/results/); 10-15 minutes on 2 cores.
bench:
	python -m bench

# The GPU set; needs a CUDA device (skips cleanly without one).
bench-gpu:
	python -m bench --only gpu_suite gpu_engine_overhead

# The chaos soak: a self-healing fully-async run on a local 2-node cluster, 10 SIGKILLs per seed (a rollout server,
# the agent-loop worker, a training rank, the rollouter, a reward process, a node's raylet, a kill mid weight sync),
# checked for lost or twice-trained prompts and the replicas' checksums; about 25 minutes per seed on 2 cores.
# Writes bench/results/chaos.{json,md,png}. Its shortened form is tests/chaos (slow tier: make test-all, nightly).
chaos:
	python bench/chaos.py --seeds 0 1 2 --faults 10 --steps 300 --every 28
