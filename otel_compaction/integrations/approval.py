"""What a framework's approval point asks a reviewer when a tool call re-issues a side effect
that a compaction removed from the agent's context.

The judgement is `ToolCallRecorder.reissue_of` (the one behind ``compaction.reissue``); the
integrations turn it into their framework's own mechanism: LangChain's human-in-the-loop
``interrupt_on`` (`otel_compaction.integrations.langchain.approval`) and the Agents SDK's
``needs_approval`` (`otel_compaction.integrations.openai_agents.approval`).
"""

from __future__ import annotations

from otel_compaction.reissue import SideEffectRecord, earlier_call

__all__ = ["reissue_question"]


def reissue_question(original: SideEffectRecord) -> str:
    """The question put to the reviewer of a call that repeats `original`: the earlier call,
    when it ran and its outcome.

    Example:
        >>> record = SideEffectRecord(
        ...     "s", 1, "c1", "f", "shell:vcs", "vcs", "Bash", "git push origin main",
        ...     "success", "main -> main", None, False,
        ... )
        >>> print(reissue_question(record))
        otel-compaction: this call repeats Bash `git push origin main` (call c1), which already ran before the last compaction, with outcome success: main -> main. A compaction removed it from the agent's context: approve only if it is to run again.
    """  # noqa: E501
    return (
        f"otel-compaction: this call repeats {earlier_call(original)}. A compaction removed "
        "it from the agent's context: approve only if it is to run again."
    )
