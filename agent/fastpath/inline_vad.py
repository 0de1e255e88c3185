"""Voice activity detection inside the input transport: no queue hop per audio frame.

Pipecat 1.14 runs VAD as its own pipeline stage (``VADProcessor`` after ``transport.input()``).
Every caller audio frame then crosses two queues and two task switches before it reaches the
STT: the input transport's own audio queue, and the VAD processor's input queue. On a phone
server those hops were the largest item in the profile after the event loop itself
(``bench/capacity.py``), and they buy nothing: the transport's receive task has just decoded
the frame and can hand it on at once.

:class:`InlineVAD` is the VAD processor's behaviour, hosted by an input transport instead: the
same ``VADController``, the same frames (``VADUserStartedSpeakingFrame``,
``VADUserStoppedSpeakingFrame``, periodic ``UserSpeakingFrame``, ``SpeechControlParamsFrame``)
broadcast both ways, the audio pushed downstream first and analysed after, as
``VADProcessor`` does. A transport whose input hosts one says so with
:class:`~agent.transports.traits.HostsVAD`; the pipeline then leaves ``VADProcessor`` out.

Mirrors ``pipecat.processors.audio.vad_processor.VADProcessor`` (Pipecat 1.14.0).
Equivalence: ``tests/agent/fastpath/test_inline_vad.py``.
"""

from __future__ import annotations

from typing import Any

from loguru import logger
from pipecat.audio.vad.vad_analyzer import VADAnalyzer
from pipecat.audio.vad.vad_controller import VADController
from pipecat.frames.frames import (
    Frame,
    InputAudioRawFrame,
    UserSpeakingFrame,
    VADParamsUpdateFrame,
    VADUserStartedSpeakingFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor, FrameProcessorSetup


class InlineVAD:
    """``VADProcessor``'s work for a host processor (an input transport) that owns the audio.

    The host calls :meth:`setup`, :meth:`start`, :meth:`stop` and :meth:`cleanup` from its own
    lifecycle, and :meth:`process_frame` for each audio frame after pushing it on.
    """

    def __init__(
        self,
        host: FrameProcessor,
        analyzer: VADAnalyzer,
        *,
        speech_activity_period: float = 0.2,
        audio_idle_timeout: float = 1.0,
    ) -> None:
        self._host = host
        self._controller = VADController(
            analyzer,
            speech_activity_period=speech_activity_period,
            audio_idle_timeout=audio_idle_timeout,
        )
        controller = self._controller

        @controller.event_handler("on_speech_started")
        async def _started(_controller: VADController) -> None:
            logger.debug(f"{host}: user started speaking")
            await host.broadcast_frame(
                VADUserStartedSpeakingFrame, start_secs=analyzer.params.start_secs
            )

        @controller.event_handler("on_speech_stopped")
        async def _stopped(_controller: VADController) -> None:
            logger.debug(f"{host}: user stopped speaking")
            await host.broadcast_frame(
                VADUserStoppedSpeakingFrame, stop_secs=analyzer.params.stop_secs
            )

        @controller.event_handler("on_speech_activity")
        async def _activity(_controller: VADController) -> None:
            await host.broadcast_frame(UserSpeakingFrame)

        @controller.event_handler("on_push_frame")
        async def _push(
            _controller: VADController, frame: Frame, direction: FrameDirection
        ) -> None:
            await host.push_frame(frame, direction)

        @controller.event_handler("on_broadcast_frame")
        async def _broadcast(
            _controller: VADController, frame_cls: type[Frame], **kwargs: Any
        ) -> None:
            await host.broadcast_frame(frame_cls, **kwargs)

    async def setup(self, setup: FrameProcessorSetup) -> None:
        await self._controller.setup(setup)

    async def start(self) -> None:
        """Announce the VAD params downstream and start the muted-microphone watch."""
        await self._controller.start()

    async def stop(self) -> None:
        await self._controller.stop()

    async def cleanup(self) -> None:
        await self._controller.cleanup()

    async def process_frame(self, frame: InputAudioRawFrame | VADParamsUpdateFrame) -> None:
        await self._controller.process_frame(frame)
