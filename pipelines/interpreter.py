"""One party's call in an interpreted session: its speech, translated into the other
party's language, spoken into the other party's call; the other party's, into this one.

::

    transport.input()            this party's audio
      → VAD → realtime STT       one final transcript per utterance
      → TranslationProcessor     this party's language → the other party's (captions out)
      → PeerRelay                the translation to speak → queued into the other party's
                                 worker; the other party's translation ← let through here
      → TTS                      speaks the other party's words in this party's language
      → transport.output()

The same stages as :mod:`pipelines.translation` (one direction into the same call); each
direction of the session has its own languages, from the session's two parties
(:mod:`agent.interpreter.sessions`). Nobody is interrupted: the two parties may talk at once,
and each hears the other's translation as it comes.
"""

from __future__ import annotations

from pipecat.pipeline.worker import PipelineWorker
from pipecat.transports.base_transport import BaseTransport

from agent.config import Settings
from agent.interpreter.relay import PeerRelay
from agent.interpreter.sessions import Party
from pipelines.services import tts_service
from pipelines.translation import translation_worker


def build_interpreted_task(
    transport: BaseTransport, settings: Settings, *, call_id: str, party: Party
) -> PipelineWorker:
    """``party``'s worker, known to its session (the other party's relay queues into it)."""
    direction = settings.translation.model_copy(
        update={
            "source_language": party.language,
            "target_language": party.peer.language,
            "speak": True,
        }
    )
    worker = translation_worker(
        transport,
        settings,
        call_id=call_id,
        translation=direction,
        speech=[PeerRelay(party), tts_service(settings.tts)],
        name=f"interpreter-{party.role}",
        about={"party": party.role},
    )
    party.worker = worker
    return worker
