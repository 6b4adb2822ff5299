"""Per-backend worker processes; each module is run as ``python -m benchmarks.backends.X``."""
