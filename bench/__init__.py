"""Benchmarks of kstorm: ``python -m bench`` (the standard benchmark), serdes, ackers."""
