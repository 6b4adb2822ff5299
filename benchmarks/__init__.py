"""All-reduce benchmarks for pytfcomm and its peers (see benchmarks/README.md)."""
