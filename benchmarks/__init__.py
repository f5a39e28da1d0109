"""Benchmarks; run each as a module from the repository root, e.g. ``python -m benchmarks.executor_vs_hf``."""
