"""Counts what became of tentative answers (:mod:`agent.fastpath.tentative_answer`) per call.

The keep-rate of eager answers (``voice_agent_eager_answers_total{outcome="kept"}`` over all
outcomes) says whether ``turn.eager_answer`` pays off for a deployment's recognizer: every
restarted or withdrawn answer was an LLM request spent for nothing.
"""

from __future__ import annotations

from pipecat.pipeline.worker import PipelineWorker

from agent.fastpath.tentative_answer import EagerOutcome, TentativeAnswerUserAggregator
from agent.observability.metrics import AgentMetrics


def count_answer_outcomes(worker: PipelineWorker, metrics: AgentMetrics) -> None:
    """Count the outcomes of the call's tentative answers in ``metrics`` (a pipeline without
    a :class:`TentativeAnswerUserAggregator` counts nothing)."""
    for aggregator in _aggregators(worker):

        @aggregator.event_handler("on_eager_answer")
        async def _eager(_aggregator: object, outcome: EagerOutcome) -> None:
            metrics.eager_answers.labels(outcome).inc()

        @aggregator.event_handler("on_false_end_merged")
        async def _merged(_aggregator: object, _text: str) -> None:
            metrics.false_ends_merged.inc()


def _aggregators(worker: PipelineWorker) -> list[TentativeAnswerUserAggregator]:
    found: list[TentativeAnswerUserAggregator] = []
    stack: list[object] = [worker.pipeline]
    while stack:
        node = stack.pop()
        if isinstance(node, TentativeAnswerUserAggregator):
            found.append(node)
        stack.extend(getattr(node, "processors", None) or [])
    return found
