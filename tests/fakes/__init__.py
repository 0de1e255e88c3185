"""Protocol-faithful stand-ins for what a test machine cannot run, shared by tests and benches.

One job each: ``realtime_peer`` (vLLM's ``/v1/realtime``, strict, with fault knobs),
``chat_server`` (OpenAI chat completions, streamed), ``speech_server`` (OpenAI
``/v1/audio/speech``: a tone or espeak), ``twilio_caller`` (the Twilio side of a Media Stream),
``telnyx_caller`` (Telnyx's signed TeXML webhook and its media stream),
``fault_proxy`` (a WebSocket relay that drops, freezes, delays), ``tcp_fault_proxy`` (a TCP
relay: latency, a bandwidth cap, a freeze, a reset, a half-close), ``sagemaker_runtime`` (the
SageMaker runtime's HTTP/2 bidirectional stream), ``speech`` (test speech: espeak, Piper) and
``serving`` (a free port, an app served in a background thread). They import no pipeline and
not the server: they speak protocols, not our internals.
"""
