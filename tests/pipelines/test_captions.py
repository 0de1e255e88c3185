"""Live captions without Gradio: the missing-extra error, and the caption logic against the
real offline ASR server."""

from __future__ import annotations

import asyncio
import re
import sys
from typing import Any

import numpy as np
import pytest
from openai import AsyncOpenAI
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams

from agent.config import DEFAULT_TRANSLATION_INSTRUCTION
from agent.llm.translation import TranslationSpec, Translator
from agent.stt.audio import StreamConverter, silence
from agent.stt.channels import websocket_channel_factory
from agent.stt.client import TranscriptEvent
from agent.stt.service import VoxtralRealtimeSTTService
from pipelines import captions
from pipelines.captions import CaptionBoard, CaptionSession, to_stt_pcm
from tests.conftest import requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.serving import free_port
from tests.fakes.speech import speech_at, word_error_rate


def test_without_gradio_exits_2_with_the_install_command(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "gradio", None)  # import gradio → ImportError
    assert captions.main([]) == 2
    assert "pip install 'voice-agent[captions]'" in capsys.readouterr().err


def test_board_shows_finals_then_the_interim_line() -> None:
    board = CaptionBoard(max_lines=2)
    for line in ("one", "two", "three"):
        board.show(TranscriptEvent("interim", line[:2]))
        board.show(TranscriptEvent("final", line))
    board.show(TranscriptEvent("interim", "fo"))
    board.show(TranscriptEvent("interim", "four"))
    assert board.render() == "two\nthree\nfour …"


def test_board_shows_the_last_timed_captions_delay_from_the_end_of_speech() -> None:
    board = CaptionBoard()
    assert board.render_delay() == "Caption delay: shown after the first caption"
    board.show(TranscriptEvent("final", "one", vad_wait_s=0.5, stt_s=0.1404))
    board.show(TranscriptEvent("final", "two"))  # not timed: the last timed one stays
    assert board.render_delay() == (
        "Caption delay: 640 ms after the end of speech (VAD wait 500 ms + STT 140 ms)"
    )


def delay_figures(line: str) -> tuple[int, int, int]:
    found = re.fullmatch(
        r"Caption delay: (\d+) ms after the end of speech \(VAD wait (\d+) ms \+ STT (\d+) ms\)",
        line,
    )
    assert found, line
    total, wait, stt = (int(g) for g in found.groups())
    return total, wait, stt


def test_microphone_chunks_become_16k_mono_pcm16() -> None:
    converter = StreamConverter()
    stereo = np.zeros((4800, 2), dtype=np.float32)  # 100 ms at 48 kHz, as a browser sends
    stereo[:, 0] = 0.5
    pcm = to_stt_pcm(48000, stereo, converter) + converter.flush()
    assert abs(len(pcm) // 2 - 1600) <= 16
    mono16 = np.zeros(1600, dtype=np.int16)
    assert len(to_stt_pcm(16000, mono16, StreamConverter())) == 3200


@requires_espeak
async def test_utterances_become_final_captions(asr_server_url: str, asr_model_name: str) -> None:
    service = VoxtralRealtimeSTTService(
        channel_factory=websocket_channel_factory(asr_server_url),
        settings=VoxtralRealtimeSTTService.Settings(model=asr_model_name),
    )
    session = CaptionSession(
        service=service, vad=SileroVADAnalyzer(params=VADParams(stop_secs=0.3))
    )
    sentences = ("please call me back tomorrow morning", "turn on the lights in the kitchen")
    try:
        for count, sentence in enumerate(sentences, 1):
            audio = silence(0.3) + speech_at(sentence, 16000) + silence(0.8)
            for offset in range(0, len(audio), 640):
                await session.feed(audio[offset : offset + 640])
            for _ in range(500):  # the microphone goes on, quiet, until the caption is in
                if len(session.board.finals) >= count:
                    break
                await session.feed(silence(0.02))
                await asyncio.sleep(0.02)
        await session.close()
    finally:
        await session.close()
    assert session.error is None
    assert len(session.board.finals) == 2, session.board.finals
    # The last caption was timed from its VAD stop, which waited the VAD's 0.3 s of silence.
    timed = session.board.last_timed
    assert timed is not None and timed.text == session.board.finals[-1]
    assert timed.vad_wait_s == pytest.approx(0.3) and timed.stt_s is not None
    total, wait, stt = delay_figures(session.board.render_delay())
    assert wait == 300 and stt == round(1000 * timed.stt_s) and total == wait + stt
    for sentence, caption in zip(sentences, session.board.finals, strict=True):
        assert word_error_rate(sentence, caption) <= 0.2, caption


@requires_espeak
async def test_the_pages_microphone_callbacks_turn_browser_audio_into_captions(
    asr_server_url: str, asr_model_name: str
) -> None:
    """What Gradio calls: 48 kHz float stereo chunks every 100 ms, then stop_recording."""

    def make_session() -> CaptionSession:
        service = VoxtralRealtimeSTTService(
            channel_factory=websocket_channel_factory(asr_server_url),
            settings=VoxtralRealtimeSTTService.Settings(model=asr_model_name),
        )
        return CaptionSession(service=service, vad=SileroVADAnalyzer())

    handlers = captions.CaptionHandlers(make_session)
    sentence = "what is the weather like in paris today"
    pcm = silence(0.3, 48_000) + speech_at(sentence, 48_000) + silence(1.0, 48_000)
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
    stereo = np.stack([samples, samples], axis=1)
    state: dict[str, object] = {}
    assert await handlers.on_audio(None, state) == (None, None, {})
    delays = []
    for offset in range(0, len(stereo), 4800):
        _, delay, state = await handlers.on_audio((48_000, stereo[offset : offset + 4800]), state)
        delays.append(delay)
    text, delay, state = await handlers.on_stop(state)
    assert state == {}
    assert text is not None and word_error_rate(sentence, text) <= 0.2, text
    # The page shows the caption's delay, once there is a caption: the VAD's stop wait (its
    # default) and the STT's share.
    assert delays[0] == "Caption delay: shown after the first caption"
    assert delay is not None
    total, wait, stt = delay_figures(delay)
    assert wait == round(1000 * VADParams().stop_secs) and total == wait + stt


# ----------------------------------------------------------------------------- translation


def test_translate_without_an_llm_exits_2_saying_what_to_set(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOICE_AGENT_LLM__KIND", "echo")  # the default profile's is local
    assert captions.main(["--translate"]) == 2
    assert "--translate needs an LLM to translate with: set llm.base_url" in (
        capsys.readouterr().err
    )


def test_board_shows_each_line_with_its_translation_as_it_streams() -> None:
    board = CaptionBoard()
    first = board.show(TranscriptEvent("final", "good morning"))
    second = board.show(TranscriptEvent("final", "thank you"))
    assert first is not None and second is not None
    first.translation, first.translated = "Bonjour.", True
    second.translation = "Merci"
    board.show(TranscriptEvent("interim", "see you"))
    assert board.render() == "good morning\n→ Bonjour.\nthank you\n→ Merci …\nsee you …"
    second.error = "cannot reach the LLM"
    assert board.render().splitlines()[3] == "→ [not translated: cannot reach the LLM]"


FRENCH = {"lights": "lumières", "kitchen": "cuisine", "turn": "allumez", "on": ""}


def french(messages: list[dict[str, Any]]) -> str:
    words = str(messages[-1]["content"]).lower().strip(".").split()
    return " ".join(FRENCH.get(word, word) for word in words if FRENCH.get(word, word))


def make_translating_session(asr_server_url: str, asr_model_name: str, llm_url: str) -> Any:
    def make() -> CaptionSession:
        service = VoxtralRealtimeSTTService(
            channel_factory=websocket_channel_factory(asr_server_url),
            settings=VoxtralRealtimeSTTService.Settings(model=asr_model_name),
        )
        spec = TranslationSpec(
            source_language="English",
            target_language="French",
            instruction=DEFAULT_TRANSLATION_INSTRUCTION,
        )
        translator = Translator(
            AsyncOpenAI(base_url=llm_url, api_key="not-needed"), model="m", spec=spec
        )
        return CaptionSession(service=service, vad=SileroVADAnalyzer(), translator=translator)

    return make


async def speak_into(handlers: captions.CaptionHandlers, sentence: str) -> str | None:
    """What Gradio calls for one recording of ``sentence``: 48 kHz float chunks, then stop."""
    pcm = silence(0.3, 48_000) + speech_at(sentence, 48_000) + silence(1.0, 48_000)
    samples = np.frombuffer(pcm, "<i2").astype(np.float32) / 32768
    state: dict[str, object] = {}
    for offset in range(0, len(samples), 4800):
        _, _, state = await handlers.on_audio((48_000, samples[offset : offset + 4800]), state)
    text, _, _ = await handlers.on_stop(state)
    return text


@requires_espeak
async def test_the_page_shows_each_caption_beside_its_translation(
    asr_server_url: str, asr_model_name: str
) -> None:
    with ChatServer(script=french) as chat:
        handlers = captions.CaptionHandlers(
            make_translating_session(asr_server_url, asr_model_name, chat.base_url)
        )
        text = await speak_into(handlers, "turn on the lights in the kitchen")
    assert text is not None
    source, translation = text.splitlines()
    assert word_error_rate("turn on the lights in the kitchen", source) <= 0.2, source
    assert translation == "→ " + french([{"content": source}])
    assert "lumières" in translation and "cuisine" in translation
    assert [r["messages"][-1]["content"] for r in chat.requests] == [source]


@requires_espeak
async def test_the_page_says_why_a_caption_was_not_translated(
    asr_server_url: str, asr_model_name: str
) -> None:
    nobody = f"http://127.0.0.1:{free_port()}/v1"
    handlers = captions.CaptionHandlers(
        make_translating_session(asr_server_url, asr_model_name, nobody)
    )
    text = await speak_into(handlers, "turn on the lights in the kitchen")
    assert text is not None
    source, translation = text.splitlines()
    assert "lights" in source
    assert translation.startswith(f"→ [not translated: cannot reach the LLM at {nobody}/")
