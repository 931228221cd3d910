"""One module per CLI command; rlgraph/cli.py imports them lazily."""
