"""Every real transcript compacted through the guarded compactor reads back from the archive
byte for byte: compaction with an archive is reversible."""

from __future__ import annotations

from pathlib import Path

from conftest import Transcript

from otel_compaction import Archive, GuardedCompactor
from otel_compaction.archive import canonical_bytes
from otel_compaction.compactor import char_estimate


def test_compact_then_recall_every_corpus_transcript(
    corpus: list[Transcript], tmp_path: Path
) -> None:
    compacted = 0
    with Archive(tmp_path / "archive.sqlite3") as archive:
        for record in corpus:
            messages = record.messages
            compactor = GuardedCompactor(budget=10**9, archive=archive, token_counter=char_estimate)
            # A budget that the transcript fills exactly: the compactor asks for half of it.
            compactor.budget = max(1, compactor.tokens(messages))
            result = compactor.compact(messages, force=True, critical=False)
            assert result.messages is not messages
            if not result.compacted:
                continue
            compacted += 1
            assert result.span is not None and result.archive_handle is not None, record.label
            start, end = result.span
            original = messages[start:end]
            assert archive.recall_bytes(result.archive_handle) == canonical_bytes(original), (
                record.label
            )
            assert archive.recall(result.archive_handle) == original, record.label
            # The new transcript is the head, one summary naming the handle, and the rest.
            assert result.messages[:start] == messages[:start]
            assert result.messages[start + 1 :] == messages[end:]
            assert result.archive_handle in str(result.messages[start]["content"])
    assert compacted >= 0.95 * len(corpus), f"only {compacted} of {len(corpus)} compacted"
