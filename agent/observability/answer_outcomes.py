"""Counts what became of user turns per call: how the adaptive end of turn closed them,
tentative answers (:mod:`agent.fastpath.tentative_answer`) and turns left to Pipecat's fallback.

``voice_agent_turn_endings_total`` by ``ending`` is the bench's "how each turn ended" on live
calls: a deployment whose turns mostly end on ``waited`` (the 1.3 s bound) has callers or a
recognizer the models do not read well (a noisy line, a language, a voice), which no bench
here measured.

A turn that reaches Pipecat's ``user_turn_stop_timeout`` waited seconds for nothing: the
end-of-turn strategy has a deadline of its own on every path, so it is counted as an error
(``voice_agent_errors_total{kind="turn_fallback"}``); the aggregator logs it as a warning.

The keep-rate of answers started before the turn ended
(``voice_agent_eager_answers_total{outcome="kept"}`` over all outcomes) says whether
``turn.eager_answer`` pays off for a deployment's recognizer, and ``turn.answer_ahead`` for its
callers' pauses: every restarted or withdrawn answer was an LLM request spent for nothing.
"""

from __future__ import annotations

from pipecat.pipeline.worker import PipelineWorker

from agent.fastpath.tentative_answer import EagerOutcome, TentativeAnswerUserAggregator
from agent.observability.metrics import AgentMetrics
from agent.turns.adaptive_stop import AdaptiveUserTurnStopStrategy


def count_turn_outcomes(worker: PipelineWorker, metrics: AgentMetrics) -> None:
    """Count the outcomes of the call's user turns in ``metrics`` (a pipeline without a
    :class:`TentativeAnswerUserAggregator` counts nothing)."""
    for aggregator in _aggregators(worker):

        @aggregator.event_handler("on_eager_answer")
        async def _eager(_aggregator: object, outcome: EagerOutcome) -> None:
            metrics.eager_answers.labels(outcome).inc()

        @aggregator.event_handler("on_false_end_merged")
        async def _merged(_aggregator: object, _text: str) -> None:
            metrics.false_ends_merged.inc()

        @aggregator.event_handler("on_user_turn_stop_timeout")
        async def _fallback(_aggregator: object) -> None:
            metrics.count_error("turn_fallback", "turn")

        for strategy in aggregator.stop_strategies:
            if isinstance(strategy, AdaptiveUserTurnStopStrategy):

                @strategy.event_handler("on_turn_ended")
                async def _ended(_strategy: object, ending: str) -> None:
                    metrics.count_turn_ending(ending)


def _aggregators(worker: PipelineWorker) -> list[TentativeAnswerUserAggregator]:
    found: list[TentativeAnswerUserAggregator] = []
    stack: list[object] = [worker.pipeline]
    while stack:
        node = stack.pop()
        if isinstance(node, TentativeAnswerUserAggregator):
            found.append(node)
        stack.extend(getattr(node, "processors", None) or [])
    return found
