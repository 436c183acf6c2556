"""``python -m otel_compaction``: the command-line interface."""

from otel_compaction.cli import main

raise SystemExit(main())
