"""Temporal as an obligation source: a workflow's pending activities.

An agent on Temporal runs its tools as activities, on whichever worker picks them up; the
workflow's execution knows which are still scheduled, started or retrying, whoever runs them
(``DescribeWorkflowExecution``: ``pending_activities``). The source describes the conversation's
workflow (its id is the conversation id, or what `workflow_id` maps it to) and reads each
pending activity as open work: ``background_task`` ``temporal activity <type>`` by its
activity id, or, with ``activity_ids_are_call_ids``, as the tool call whose id the activity
carries (then it pairs with the transcript's and the ledger's calls of that id). A workflow
that does not exist owes nothing; a closed one has no pending activities.

The client is Temporal's own (``temporalio.client.Client``), connected by the caller;
`TemporalSource.aread` runs on the caller's event loop, `TemporalSource.read` on a loop of its
own.
"""

from __future__ import annotations

from collections.abc import Callable

from temporalio.api.workflowservice.v1 import DescribeWorkflowExecutionResponse
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from otel_compaction.ledger import ObligationKind
from otel_compaction.sources.base import SourceObligation, SourceReading, run_on_own_loop

__all__ = ["TemporalSource"]


class TemporalSource:
    """The activities a conversation's Temporal workflow still has pending.

    Example:
        >>> client = await Client.connect("127.0.0.1:7233")  # doctest: +SKIP
        >>> gate = telemetry.gate(
        ...     "default", sources=[TemporalSource(client, workflow_id=lambda c: f"agent-{c}")]
        ... )  # doctest: +SKIP
    """

    name = "temporal"

    def __init__(
        self,
        client: Client,
        *,
        workflow_id: Callable[[str], str] | None = None,
        activity_ids_are_call_ids: bool = False,
    ) -> None:
        """Describe workflows through `client`.

        Args:
            client: a connected Temporal client (its namespace is the one described).
            workflow_id: the workflow id of a conversation; the conversation id itself when
                None.
            activity_ids_are_call_ids: the agent starts each tool's activity with the tool
                call's id as the activity id: read pending activities as those tool calls.
        """
        self.client = client
        self._workflow_id = workflow_id
        self._kind: ObligationKind = "tool_call" if activity_ids_are_call_ids else "background_task"

    def workflow_id(self, conversation_id: str) -> str:
        """The workflow described for `conversation_id`."""
        return self._workflow_id(conversation_id) if self._workflow_id else conversation_id

    async def aread(self, conversation_id: str) -> SourceReading:
        """Describe the conversation's workflow (its latest run) now."""
        handle = self.client.get_workflow_handle(self.workflow_id(conversation_id))
        try:
            description = await handle.describe()
        except RPCError as error:
            if error.status == RPCStatusCode.NOT_FOUND:
                return SourceReading(self.name, conversation_id)
            raise
        return self.reading(conversation_id, description.raw_description)

    def read(self, conversation_id: str) -> SourceReading:
        """`aread` on an event loop of its own."""
        return run_on_own_loop(lambda: self.aread(conversation_id))

    def reading(
        self, conversation_id: str, description: DescribeWorkflowExecutionResponse
    ) -> SourceReading:
        """The reading of one ``DescribeWorkflowExecution`` answer."""
        pending: list[SourceObligation] = []
        for activity in description.pending_activities:
            started = activity.scheduled_time if activity.HasField("scheduled_time") else None
            name = activity.activity_type.name
            pending.append(
                SourceObligation(
                    self._kind,
                    activity.activity_id,
                    name if self._kind == "tool_call" else f"temporal activity {name}",
                    "pending activity",
                    started.ToNanoseconds() if started is not None else None,
                )
            )
        return SourceReading(self.name, conversation_id, pending=tuple(pending))
