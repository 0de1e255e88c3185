"""Voice activity detection shared across calls: one Silero model per process, batched."""

from agent.vad.batcher import BatcherStats, SileroBatcher, SileroStream, shared_batcher
from agent.vad.shared_silero import SharedSileroVADAnalyzer

__all__ = [
    "BatcherStats",
    "SharedSileroVADAnalyzer",
    "SileroBatcher",
    "SileroStream",
    "shared_batcher",
]
