"""The fast path: every place we replace a Pipecat internal, in one wing.

Each module names the upstream class or function it mirrors and the Pipecat version it was
checked against; beside each, under ``tests/agent/fastpath/``, an equivalence test runs it
against Pipecat's stock behaviour. ``test_pipecat_version.py`` fails, naming this wing, as soon
as the installed Pipecat differs from :data:`CHECKED_AGAINST`: re-read the mirrored upstream
code, rerun the equivalence tests, then move the pin.

Each replacement is here because a bench showed its cost (``bench/capacity.py``, ``bench/vad.py``):

- :mod:`~agent.fastpath.inline_observers`: our observers called inline, not through one
  queue and task each (``WorkerObserver``'s ``_observer``, ``_proxies``, ``_frames_pushed``).
- :mod:`~agent.fastpath.idle_watch`: the idle timeout as one timer (``PipelineWorker``'s idle
  monitor).
- :mod:`~agent.fastpath.inline_vad` and :mod:`~agent.fastpath.vad_hosting_transport`: the VAD
  runs inside the input transport (``VADProcessor``; ``push_audio_frame``,
  ``_create_audio_task``, ``_input``).
- :mod:`~agent.fastpath.twilio_serializer`: 60 ms input frames on phone calls
  (``TwilioFrameSerializer``'s private resampler fields).
- :mod:`~agent.fastpath.telnyx_serializer`: the same for Telnyx calls
  (``TelnyxFrameSerializer``'s private resampler fields); both read their messages with
  :mod:`~agent.fastpath.media_stream_reader`.
- :mod:`~agent.fastpath.speech_gate`: an analytics track's VAD decisions made inline, with
  no pipeline stage, so only speech reaches the track's STT pipeline (``VADController``).
- :mod:`~agent.fastpath.shared_silero`: one batched Silero model per process
  (``VADAnalyzer._run_analyzer``, ``SileroVADAnalyzer``).
- :mod:`~agent.fastpath.shared_smart_turn`: one Smart Turn v3 model per process, its verdicts
  batched across calls, optionally keeping the turn's audio after a COMPLETE verdict (for the
  adaptive end of turn) (``BaseSmartTurn``, ``LocalSmartTurnAnalyzerV3``).
- :mod:`~agent.fastpath.tentative_answer`: an answer stays tentative until heard: started on
  an eager end of turn and kept or restarted on the final transcript, and taken back with its
  turn when the user goes on before hearing it (extends ``LLMUserAggregator``'s turn hooks).
- :mod:`~agent.fastpath.audio_jitter`: a WebRTC call's audio leaves aiortc's jitter buffer
  when the next packet arrives, not four packets later (``RTCRtpReceiver``'s private jitter
  buffer; ``bench/results/webrtc_jitter.md``).

One more replacement lives outside this wing on purpose: the STT plugin must import nothing
else of ours, so its SageMaker channel keeps its own subclass of the SDK's CRT transport
(``agent.stt.sagemaker._CRTTransport``, pinned the same way in
:data:`agent.stt.sagemaker.CHECKED_AGAINST`).
"""

CHECKED_AGAINST = {"pipecat-ai": "1.14.0", "aiortc": "1.16.0"}
"""The distributions (and versions) whose internals this wing mirrors."""
