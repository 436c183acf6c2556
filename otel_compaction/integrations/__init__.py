"""Guards for agent frameworks' own compactors and tool runtimes, one module per framework.

Each module imports its framework lazily; importing this package never requires one.
"""
