.PHONY: bench bench-gpu

# The CPU benchmark set (tables + JSON under bench/results/); 10-15 minutes on 2 cores.
bench:
	python -m bench

# The GPU set; needs a CUDA device (skips cleanly without one).
bench-gpu:
	python -m bench --only gpu_suite gpu_engine_overhead
