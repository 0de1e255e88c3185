"""Each answered turn's latency, sent to a browser client as an RTVI server message.

The playground draws it as a small bar under the bot's reply, so a person sees where the time
of their turn went. It travels the Pipecat way: an ``RTVIServerMessageFrame`` queued into the
call's pipeline, which Pipecat's RTVI observer turns into an RTVI ``server-message``::

    {"label": "rtvi-ai", "type": "server-message",
     "data": {"type": "turn-latency", "turn": 1, "total_ms": 640,
              "stages_ms": {"vad_stop": 200, "stt_final": 320, "llm_first_token": 330,
                            "tts_first_audio": 420, "first_audio_out": 640}}}

Each stage is milliseconds from the end of the user's speech, the same figures as the
``turn_latency`` log line (:mod:`agent.observability.turn_latency`). Only a client that
speaks RTVI gets it: the server attaches this for WebRTC calls, never for a phone call.
"""

from __future__ import annotations

from typing import Any, Final

from pipecat.pipeline.worker import PipelineWorker
from pipecat.processors.frameworks.rtvi import RTVIServerMessageFrame

from agent.observability.turn_latency import TurnTimings

TURN_LATENCY: Final = "turn-latency"
"""The ``data.type`` of the server message."""


def turn_latency_message(turn: TurnTimings) -> dict[str, Any]:
    """The server message's ``data`` for one answered turn."""
    stages = turn.stages_ms()
    return {
        "type": TURN_LATENCY,
        "turn": turn.index,
        "total_ms": stages["first_audio_out"],
        "stages_ms": stages,
    }


class TurnLatencyToClient:
    """``on_answer`` for :class:`~agent.observability.turn_latency.TurnLatencyObserver`: queues
    each answered turn's latency into the call's pipeline for its RTVI client."""

    def __init__(self, worker: PipelineWorker) -> None:
        self._worker = worker

    async def __call__(self, turn: TurnTimings) -> None:
        await self._worker.queue_frame(RTVIServerMessageFrame(data=turn_latency_message(turn)))
