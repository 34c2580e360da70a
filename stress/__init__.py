"""Benchmarks and stress tools for parallel_autograd (`python -m stress.compare`).

Kept free of heavy imports: submodules import numpy, torch and matplotlib themselves.
"""
