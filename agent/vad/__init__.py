"""One batched Silero VAD model for the whole process (the analyzer that uses it lives in
:mod:`agent.fastpath.shared_silero`, beside the Pipecat code it mirrors)."""

from agent.vad.batcher import BatcherStats, SileroBatcher, SileroStream, shared_batcher

__all__ = ["BatcherStats", "SileroBatcher", "SileroStream", "shared_batcher"]
