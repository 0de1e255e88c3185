"""The server's Prometheus metrics: per-turn latency, calls, STT reconnects, errors.

One :class:`AgentMetrics` per server (``create_app`` builds it, so one per process in
production) owns its own ``CollectorRegistry``: two apps in one process (tests) never clash
over metric names. The call counts are not kept twice: a collector reads them from the
:class:`~agent.calls.CallRegistry` at scrape time.

Names (all seconds are measured from the end of the user's speech, see
:mod:`agent.observability.turn_latency`)::

    voice_agent_turn_stage_seconds{stage}   histogram: vad_stop, stt_final, llm_first_token,
                                            tts_first_audio, first_audio_out
    voice_agent_turn_seconds                histogram: end of speech -> first audio sent
    voice_agent_turns_total{complete}       counter: turns closed, answered or not
    voice_agent_active_calls                gauge
    voice_agent_max_calls                   gauge
    voice_agent_calls_{started,ended,refused}_total
    voice_agent_stt_reconnects_total        counter: STT connections after a lost one
    voice_agent_errors_total{kind,category} counter: ErrorFrames (kind: the processor class)
    voice_agent_eager_answers_total{outcome} counter: answers started before the turn ended
                                            (eager, ahead): kept, restarted, withdrawn
    voice_agent_false_ends_merged_total     counter: turns taken back unheard, merged with
                                            the words that followed
    voice_agent_smart_turn_inferences_total counter: Smart Turn verdicts the process's shared
                                            model gave (all calls; 50-110 ms of a core each)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agent.calls import CallRegistry
from agent.turns.adaptive_stop import TURN_ENDINGS
from agent.turns.smart_turn_batcher import STATS as SMART_TURN_STATS
from agent.turns.smart_turn_batcher import SmartTurnStats

STAGES: Final = ("vad_stop", "stt_final", "llm_first_token", "tts_first_audio", "first_audio_out")
"""The turn's stages in the order they happen, each timed from the end of user speech."""

LATENCY_BUCKETS: Final = (
    0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 3.0, 5.0, 10.0,
)  # fmt: skip
"""Seconds: fine around the 0.2-1 s a voice turn should take, coarse beyond."""

CONTENT_TYPE: Final = CONTENT_TYPE_LATEST


class AgentMetrics:
    """Every metric the server exports, in a registry of its own.

    Args:
        calls: The registry whose call counts are exported (omit for none).
        process: Also export the process's CPU, memory and file descriptors.
    """

    def __init__(self, *, calls: CallRegistry | None = None, process: bool = True) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.turn_stage_seconds = Histogram(
            "voice_agent_turn_stage_seconds",
            "Seconds from the end of the user's speech to each stage of the bot's answer.",
            ["stage"],
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.turn_seconds = Histogram(
            "voice_agent_turn_seconds",
            "Seconds from the end of the user's speech to the first answer audio sent.",
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.turns = Counter(
            "voice_agent_turns",
            "User turns closed; complete=false when no answer audio went out before the next "
            "turn or the end of the call (barge-in, nothing heard, a failure).",
            ["complete"],
            registry=self.registry,
        )
        self.stt_reconnects = Counter(
            "voice_agent_stt_reconnects",
            "STT connections opened again after one was lost or rotated.",
            registry=self.registry,
        )
        self.errors = Counter(
            "voice_agent_errors",
            "Errors reported in call pipelines, by the processor class that reported them.",
            ["kind", "category"],
            registry=self.registry,
        )
        self.eager_answers = Counter(
            "voice_agent_eager_answers",
            "Answers started before the turn ended (an eager end of turn, or ahead of the "
            "model's wait), by outcome: kept (the final transcript matched), restarted (on the "
            "final text), withdrawn (the user went on).",
            ["outcome"],
            registry=self.registry,
        )
        self.false_ends_merged = Counter(
            "voice_agent_false_ends_merged",
            "User turns taken back because the user went on before the answer was heard; "
            "their words went to the LLM with the words that followed, as one message.",
            registry=self.registry,
        )
        self.turn_endings = Counter(
            "voice_agent_turn_endings",
            "User turns the adaptive end of turn closed, by what closed them: complete (the "
            "short wait), finished (the text model's wait), waited (the upper bound), "
            "no_words (every segment came back without words).",
            ["ending"],
            registry=self.registry,
        )
        for ending in TURN_ENDINGS:
            self.turn_endings.labels(_ending_label(ending))
        for outcome in ("kept", "restarted", "withdrawn"):
            self.eager_answers.labels(outcome)
        # Children made up front: a stage shows in /metrics (count 0) before its first turn.
        self._stage_children = {stage: self.turn_stage_seconds.labels(stage) for stage in STAGES}
        self._turns_complete = self.turns.labels("true")
        self._turns_incomplete = self.turns.labels("false")
        self.registry.register(SmartTurnCollector(SMART_TURN_STATS))
        if calls is not None:
            self.registry.register(CallsCollector(calls))
        if process:
            ProcessCollector(registry=self.registry)
            PlatformCollector(registry=self.registry)

    def observe_stage(self, stage: str, seconds: float) -> None:
        """Record one stage of one turn (``stage`` is one of :data:`STAGES`)."""
        self._stage_children[stage].observe(seconds)

    def observe_turn(self, seconds: float | None) -> None:
        """Close one turn: its total when it was answered, ``None`` when it was not."""
        if seconds is None:
            self._turns_incomplete.inc()
        else:
            self._turns_complete.inc()
            self.turn_seconds.observe(seconds)

    def count_turn_ending(self, ending: str) -> None:
        """Count one turn the adaptive end of turn closed (``ending``: one of
        :data:`~agent.turns.adaptive_stop.TURN_ENDINGS`)."""
        self.turn_endings.labels(_ending_label(ending)).inc()

    def count_error(self, kind: str, category: str = "unknown") -> None:
        self.errors.labels(kind, category).inc()

    def exposition(self) -> bytes:
        """The Prometheus text format of everything above (``GET /metrics``)."""
        return generate_latest(self.registry)


class CallsCollector(Collector):
    """Reads the call counts from the call registry whenever Prometheus scrapes."""

    def __init__(self, calls: CallRegistry) -> None:
        self._calls = calls

    def collect(self) -> Iterable[Metric]:
        stats = self._calls.stats
        yield GaugeMetricFamily(
            "voice_agent_active_calls", "Calls running now.", value=stats.active
        )
        yield GaugeMetricFamily(
            "voice_agent_max_calls", "Concurrent calls allowed.", value=stats.max_calls
        )
        yield CounterMetricFamily(
            "voice_agent_calls_started", "Calls accepted since start.", value=stats.started
        )
        yield CounterMetricFamily(
            "voice_agent_calls_ended", "Calls finished since start.", value=stats.ended
        )
        yield CounterMetricFamily(
            "voice_agent_calls_refused",
            "Calls refused at the call limit or while shutting down.",
            value=stats.refused,
        )


class SmartTurnCollector(Collector):
    """Reads the process's Smart Turn counts (one shared model) whenever Prometheus scrapes."""

    def __init__(self, stats: SmartTurnStats) -> None:
        self._stats = stats

    def collect(self) -> Iterable[Metric]:
        yield CounterMetricFamily(
            "voice_agent_smart_turn_inferences",
            "Smart Turn verdicts computed by the process's shared model, all calls together.",
            value=self._stats.inferences,
        )


def _ending_label(ending: str) -> str:
    """A turn ending as a Prometheus label value ("no words" → "no_words")."""
    return ending.replace(" ", "_")
