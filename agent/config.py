"""One typed settings tree for the whole server.

Sources, later ones winning: defaults below → ``config/<profile>.toml`` → ``VOICE_AGENT_*``
environment variables (nested with ``__``, e.g. ``VOICE_AGENT_STT__URL``). The profile is
``default`` unless ``--profile`` or ``VOICE_AGENT_PROFILE`` names another. A wrong or missing
setting fails at start with :class:`ConfigError`, naming the setting and the fix.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import os
import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from agent.stt.params import RealtimeSTTParams
from agent.stt.protocol import VOXTRAL_MODEL

CONFIG_DIR = Path(__file__).resolve().parent.parent / "config"
ENV_PREFIX = "VOICE_AGENT_"
PROFILES = ("default", "vllm", "sagemaker")
LOCAL_LLM_ALIAS = "smollm2-135m-instruct"
"""The name the local llama.cpp server serves the packaged model under."""


class ConfigError(ValueError):
    """A setting is wrong or missing; the message says which one and how to fix it."""


class _Section(BaseModel):
    model_config = {"extra": "forbid"}


class SageMakerSettings(_Section):
    """Where the Voxtral endpoint lives on SageMaker (credentials come from the AWS chain)."""

    endpoint_name: str = ""
    region: str = ""
    target_variant: str | None = None
    invocation_path: str | None = None
    endpoint_url: str | None = Field(
        default=None, description="Override the runtime URL (tests, VPC endpoints)."
    )


class STTSettings(_Section):
    """The Voxtral realtime STT stage. ``params`` is the service's own tuning dataclass
    (:class:`~agent.stt.params.RealtimeSTTParams`), taken as it is."""

    transport: Literal["websocket", "sagemaker"] = "websocket"
    url: str = "ws://127.0.0.1:8090/v1/realtime"
    model: str = VOXTRAL_MODEL
    api_key: str | None = None
    params: RealtimeSTTParams = RealtimeSTTParams()
    sagemaker: SageMakerSettings = SageMakerSettings()

    @field_validator("url")
    @classmethod
    def _websocket_url(cls, url: str) -> str:
        if not url.startswith(("ws://", "wss://")):
            raise ValueError(
                "must start with ws:// or wss:// (e.g. ws://127.0.0.1:8000/v1/realtime)"
            )
        return url


class ASRServerSettings(_Section):
    """The offline CPU recognizer that speaks vLLM's realtime protocol (default profile)."""

    host: str = "127.0.0.1"
    port: int = Field(default=8090, ge=0, le=65535)
    served_model_name: str = VOXTRAL_MODEL
    decode_interval_s: float = Field(default=0.5, gt=0)
    cpu_threads: int = Field(default=2, ge=1)


class LocalLLMSettings(_Section):
    """The local llama.cpp server ``serve`` starts for ``llm.kind = "local"`` (default profile).

    The figures are sized on 2 shared cores beside the recognizer and Piper
    (bench/local_llm.py, bench/results/local_llm.md).
    """

    host: str = "127.0.0.1"
    port: int = Field(default=8092, ge=0, le=65535)
    n_threads: int = Field(default=1, ge=1, description="Threads generating tokens.")
    n_ctx: int = Field(
        default=2048, ge=256, description="Tokens of context: the system prompt and the call."
    )
    n_batch: int = Field(default=256, ge=8, description="Prompt tokens evaluated per batch.")
    question_slots: int = Field(
        default=0,
        ge=0,
        description="0: the text end-of-turn questions are read on the answers' context, "
        "behind their lock. N: on a context of their own, a sequence of n_ctx tokens for each "
        "of the N calls that asked last (SmolLM2: 23 KB a token, 47 MB a call), so they wait "
        "neither for another call's answer nor for its prompt: in time with four calls, but "
        "with two the answers started later (bench/results/text_model_calls.md).",
    )


class LLMSettings(_Section):
    """The turn handler: an OpenAI-compatible server (``openai``), the packaged small model
    behind llama.cpp's OpenAI-compatible server (``local``), or the echo responder (``echo``).

    Unset, ``kind`` is ``openai`` with a ``base_url`` and ``echo`` without one. With
    ``local``, ``base_url`` and ``model`` point at the local server.
    """

    kind: Literal["openai", "local", "echo"] = "echo"
    base_url: str | None = None
    model: str = ""
    api_key: str = "not-needed"
    system_prompt: str = (
        "You are a helpful voice assistant. Answer in one or two short spoken sentences, "
        "without lists or markdown."
    )
    temperature: float = Field(default=0.7, ge=0, le=2)
    max_tokens: int = Field(default=200, ge=1)
    tools: list[str] = Field(
        default_factory=lambda: [],
        description="Registered tools to offer the model (agent/llm/tools.py), e.g. "
        '["get_current_time"]. vLLM needs --enable-auto-tool-choice for tools.',
    )
    local: LocalLLMSettings = LocalLLMSettings()

    @model_validator(mode="before")
    @classmethod
    def _kind_from_url(cls, values: Any) -> Any:
        if isinstance(values, dict) and "kind" not in values:
            return {**values, "kind": "openai" if values.get("base_url") else "echo"}
        return values

    @model_validator(mode="after")
    def _model_with_url(self) -> LLMSettings:
        if self.kind == "local":
            if self.base_url:
                raise ValueError(
                    "llm.base_url is for llm.kind 'openai'; with 'local' the server is "
                    "started on llm.local.host:port (unset llm.base_url, or set llm.kind)"
                )
            self.base_url = f"http://{self.local.host}:{self.local.port}/v1"
            self.model = self.model or LOCAL_LLM_ALIAS
        if self.kind == "openai" and not self.base_url:
            raise ValueError(
                "llm.kind 'openai' needs llm.base_url (set VOICE_AGENT_LLM__BASE_URL, e.g. "
                "http://127.0.0.1:8001/v1)"
            )
        if self.base_url and not self.model:
            raise ValueError(
                "llm.model is required when llm.base_url is set "
                "(set VOICE_AGENT_LLM__MODEL to the served model name)"
            )
        return self


class TTSSettings(_Section):
    """Speech synthesis: Piper out of process (offline) or any OpenAI-compatible speech server."""

    kind: Literal["piper", "openai"] = "piper"
    base_url: str = "http://127.0.0.1:8091"
    model: str = "kokoro"
    voice: str = "af_heart"
    api_key: str = "not-needed"
    sample_rate: int = Field(default=22050, gt=0)
    trim_lead_in: bool = Field(
        default=True,
        description="Cut the quiet before an answer's first sound (Piper puts 25-60 ms there, "
        "which a carrier plays before the first word): agent/lead_in.py.",
    )


DEFAULT_TRANSLATION_INSTRUCTION = (
    "You are an interpreter. Translate what the user says from {source} into {target}. "
    "Reply with the translation only: no quotes, no notes, no answer to what was said."
)


class TranslationSettings(_Section):
    """Realtime translation (:mod:`pipelines.translation`): each final transcript goes to the
    ``llm`` server with a translation instruction; captions stream to the client, and in
    interpreter mode the TTS speaks the translation into the call."""

    enabled: bool = Field(
        default=False,
        description="Serve every call (WebRTC, phone) as a translation call instead of the "
        "voice agent; needs llm.base_url.",
    )
    source_language: str = Field(
        default="English",
        description="The language people speak, as the instruction names it. The STT is not "
        "told: vLLM's realtime session.update has no language field (Voxtral detects it), "
        "and the offline recognizer is English-only.",
    )
    target_language: str = Field(default="French", description="The language to translate into.")
    speak: bool = Field(
        default=True,
        description="Interpreter mode: the TTS speaks each translation into the call (pick a "
        "tts voice for the target language). Off: captions only.",
    )
    interim: bool = Field(
        default=False,
        description="Start translating the stable interim transcript at the VAD stop "
        "(turn.vad_stop_secs) instead of waiting for the final one: captions come sooner; "
        "the final confirms it (or, if its words differ, is translated instead) before "
        "anything is spoken.",
    )
    instruction: str = Field(
        default=DEFAULT_TRANSLATION_INSTRUCTION,
        description="The system message; {source} and {target} become the two languages.",
    )
    model: str | None = Field(
        default=None, description="The served model to translate with; unset: llm.model."
    )
    temperature: float = Field(default=0.0, ge=0, le=2)
    max_tokens: int = Field(default=200, ge=1)
    timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=120,
        description="Limit for one utterance's whole translation; past it the utterance "
        "gets a translation-error and the call goes on.",
    )

    @field_validator("instruction")
    @classmethod
    def _placeholders(cls, instruction: str) -> str:
        try:
            instruction.format(source="English", target="French")
        except (KeyError, IndexError, ValueError) as exc:
            raise ValueError(
                f"may hold only the placeholders {{source}} and {{target}} ({exc!r}); write "
                "other braces twice: {{ }}"
            ) from None
        return instruction


class IceServerSettings(_Section):
    """A STUN or TURN server for WebRTC calls across networks.

    ``POST /start`` is public, so whatever credentials it hands out, anyone gets: a TURN server
    takes time-limited ones made from ``shared_secret`` (coturn's ``use-auth-secret``), and a
    static password is handed out only when ``static_credentials`` says so.
    """

    urls: str | list[str]
    username: str | None = None
    credential: str | None = None
    shared_secret: str | None = Field(
        default=None,
        description="The TURN server's static-auth-secret (coturn use-auth-secret): each "
        "session gets username '<expiry>:<session id>' and an HMAC-SHA1 password that "
        "expires after credential_ttl_s.",
    )
    credential_ttl_s: float = Field(
        default=3600.0,
        ge=60,
        le=7 * 86400,
        description="How long time-limited TURN credentials are valid: longer than a call, "
        "since the TURN server checks them on each allocation refresh.",
    )
    static_credentials: bool = Field(
        default=False,
        description="Hand username and credential, as they are, to every caller of POST "
        "/start (anyone can then use the TURN server for as long as they are valid).",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_url(cls, value: Any) -> Any:
        return {"urls": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _credentials_are_not_given_away(self) -> IceServerSettings:
        if self.shared_secret and (self.username or self.credential):
            raise ValueError(
                f"ice server {self.urls!r}: set shared_secret or username/credential, not both"
            )
        if self.credential and not self.static_credentials:
            raise ValueError(
                f"ice server {self.urls!r}: credential is a static TURN password that POST "
                "/start would hand to anyone; set shared_secret (the TURN server's "
                "static-auth-secret, coturn use-auth-secret) for time-limited credentials, or "
                "static_credentials = true to hand this one out anyway"
            )
        return self


class TurnSettings(_Section):
    """When a user turn starts and ends (Silero VAD, the words, optionally Smart Turn)."""

    vad_start_secs: float = Field(
        default=0.1,
        gt=0,
        le=2,
        description="The speech the VAD must hear before it reports a start while the bot is "
        "quiet (Pipecat: 0.2). 0.1 hears all 78 one-word commands of the VAD bench on a phone "
        "line, 73 at 0.2 (French 'Oui.' is shorter), with no more false starts on noise or "
        "breathing (bench/results/vad_sensitivity.md). Over the bot: barge_in_secs.",
    )
    barge_in_secs: float = Field(
        default=0.2,
        gt=0,
        le=2,
        description="The unbroken speech the VAD must hear while the bot speaks before it "
        "reports a start and so interrupts the bot (Pipecat's start time): a shorter sound "
        "over the answer does not cut it off (agent/turns/barge_in.py).",
    )
    vad_confidence: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="Silero's speech probability a window needs (Pipecat: 0.7). 0.5 with "
        "vad_min_volume 0.4 and vad_start_secs 0.1 hears 78 of 78 one-word commands on a phone "
        "line, 36 at Pipecat's values, with no more false starts on noise or breathing "
        "(bench/results/vad_sensitivity.md).",
    )
    vad_min_volume: float = Field(
        default=0.4,
        ge=0,
        lt=1,
        description="The volume a window needs, 0-1 over -110..-10 LUFS (Pipecat: 0.6).",
    )
    vad_stop_secs: float = Field(
        default=0.2,
        gt=0,
        le=2,
        description="Quiet before the VAD reports the end of speech, counted in Silero's "
        "whole 32 ms windows (0.2: six, 0.192 s); the STT commits the segment then, so a final "
        "comes sooner with less, but a phrase is cut at more of its gaps, and on a line with "
        "people talking behind the caller a last word may go unheard. Smart Turn is asked on "
        "0.192 s of quiet whatever this is. See README, 'A shorter VAD wait'.",
    )
    vad_foreground_db: float = Field(
        default=6.0,
        ge=0,
        le=30,
        description="On a line where other people talk behind the caller, speech less than "
        "this many dB over the talkers' level and more than this many dB under the caller's own "
        "is not the caller's, so the VAD hears the caller stop (agent/vad/foreground.py); "
        "without it Silero hears the talkers and no turn ends. Acts only while the line's "
        "background, heard while the caller is quiet, is speech to Silero: quiet and hissing "
        "lines decide as stock Silero. 0: off. See bench/results/turn_taking_talkers.md.",
    )
    vad_floor_margin_db: float = Field(
        default=3.0,
        ge=0,
        le=20,
        description="Once the caller speaks, a window within this many dB of the line's noise "
        "floor that Silero is not sure of (under 0.9) is quiet, so the VAD hears the caller stop "
        "where the speech ends rather than where Silero's confidence has decayed (the end of "
        "speech heard 70-94 ms late on a clean phone line, 91-192 ms with hiss 10 dB under the "
        "speech; 34-54 and 27-108 ms with it): every turn's final, and answer, comes that much "
        "sooner (agent/vad/line_floor.py, bench/results/vad_stop.md). Only where the line's "
        "background is silence or steady noise; starts are untouched. 0: off, as stock Silero. "
        "See README, 'The line's floor'.",
    )
    end_of_turn: Literal["silence", "adaptive"] = Field(
        default="adaptive",
        description="'adaptive': end soon after a complete question (complete_wait_s), else "
        "after unfinished_wait_s of quiet; 'silence': after vad_stop_secs plus "
        "user_speech_timeout_s. See bench/results/turn_taking.md.",
    )
    smart_turn: bool = Field(
        default=True,
        description="Ask Smart Turn v3 too: with 'adaptive', a question ends early only if it "
        "agrees; with 'silence', it decides the end of turn (Pipecat's strategy).",
    )
    text_check: Literal["asks", "unfinished"] = Field(
        default="asks",
        description="'adaptive' with Smart Turn: what the words must say for a turn Smart Turn "
        "calls complete to end on the short wait: 'asks' (a question mark in any script, a "
        "one- or two-word command, an English question or request) or 'unfinished' (only "
        "that they do not stop on a word like 'to' or 'und'). See bench/results/turn_taking.md.",
    )
    text_model: bool = Field(
        default=False,
        description="'adaptive' with Smart Turn: also ask a ChatML language model for p(the "
        "user's sentence ends here) on the final words after the conversation so far (LiveKit's "
        "text turn detector, on the model already served: llm.kind 'local', or "
        "text_model_url). On in the default profile. Needs nothing else; on a timeout or "
        "error the turn is decided without it. See bench/results/turn_taking_multilingual.md.",
    )
    text_model_url: str | None = Field(
        default=None,
        description="The OpenAI base URL (http://host:port/v1) of a llama.cpp server with a "
        "ChatML model; unset: the local LLM's server when llm.kind is 'local', else none.",
    )
    text_end_p: float = Field(
        default=0.1,
        ge=0,
        le=1.01,
        description="text_model: Smart Turn complete and p(end) at least this ends a turn whose "
        "words do not ask (a statement) after text_end_wait_s, unless it stops on a word like "
        "'to'; above 1: never.",
    )
    text_end_wait_s: float = Field(
        default=0.8,
        ge=0,
        le=3,
        description="text_model: quiet after the end of speech before a turn text_end_p calls "
        "finished ends (LiveKit's minimum delay): a list item or a clause before a pause reads "
        "as finished as a statement does, and only the quiet tells them apart.",
    )
    text_unfinished_p: float = Field(
        default=0.02,
        ge=0,
        le=1,
        description="text_model: a turn of text_veto_min_words+ words that asks for an answer "
        "without a question mark (a request, a question by its word order, a two-word command) "
        "still waits when p(end) is below this; 0: never.",
    )
    text_question_unfinished_p: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description="text_model: a question the recognizer closed with a question mark "
        "(text_veto_min_words+ words) waits for unfinished_wait_s, not at once, when p(end) is "
        "below this: tiny.en writes 'Can you tell me?' at a pause (p 0.000); 0: the question "
        "mark decides. See bench/results/text_end_probe.md.",
    )
    text_veto_min_words: int = Field(
        default=2,
        ge=1,
        le=10,
        description="text_model: the fewest words the veto reads (one word is too little for "
        "the model: 'Stop' reads 0.000); 3 leaves two-word turns ('Can you.', 'Ich möchte.') to "
        "the words rule, which answers them at once.",
    )
    text_timeout_s: float = Field(
        default=0.35,
        gt=0,
        le=1,
        description="text_model: the longest the model is waited for where the turn could end "
        "on the short wait (the server answers one request at a time); past it the turn is "
        "decided without it. Words that cannot end on the short wait wait for it until the bound.",
    )
    complete_wait_s: float = Field(
        default=0.0, ge=0, le=3, description="'adaptive': quiet before a complete question ends."
    )
    unfinished_wait_s: float = Field(
        default=1.3,
        ge=0,
        le=3,
        description="'adaptive': quiet before any other turn ends; the upper bound of the wait.",
    )
    user_speech_timeout_s: float = Field(
        default=0.0, ge=0, le=5, description="'silence': extra quiet after the VAD stop."
    )

    eager_answer: bool = Field(
        default=False,
        description="Start the LLM on the stable interim transcript when the VAD stops; kept "
        "if the final transcript matches, else restarted on it (see bench/eager_answer.py).",
    )
    answer_ahead: bool = Field(
        default=True,
        description="text_model: start the answer while a turn the models call finished waits "
        "out text_end_wait_s (held until the turn ends, withdrawn if the user goes on), so the "
        "LLM's time to its first words is spent inside the wait.",
    )
    words_over_audio: bool = Field(
        default=True,
        description="text_model: a turn whose words ask for an answer ends after "
        "text_end_wait_s also when Smart Turn hears it unfinished, unless the model's p(end) "
        "is below text_end_p (one word or a question mark needs no model).",
    )
    model_over_audio: bool = Field(
        default=True,
        description="text_model: a turn whose words do not ask (a statement, a request in a "
        "language the words rule does not know) ends after text_end_wait_s also when Smart "
        "Turn hears it unfinished, if the model's p(end) is at least text_end_p; off: the "
        "bound (unfinished_wait_s). See README, 'The model over audio'.",
    )
    paused_turns_wait: bool = Field(
        default=True,
        description="'adaptive': a turn in which the caller already hesitated (paused after "
        "words that stop unfinished, such as a filler, or after a segment with no words) ends "
        "after text_end_wait_s at the soonest, not on the short wait: at the second pause of "
        "'um... what was it... oh right' every signal reads a finished question. Turns that "
        "hesitate and then finish are answered that much later.",
    )
    merge_false_ends: bool = Field(
        default=True,
        description="When the user goes on before any of the answer was heard, cancel it and "
        "send both parts to the LLM as one user message.",
    )

    @model_validator(mode="after")
    def _bound_holds(self) -> TurnSettings:
        for name in ("complete_wait_s", "text_end_wait_s"):
            if getattr(self, name) > self.unfinished_wait_s:
                raise ValueError(
                    f"turn.{name} ({getattr(self, name)}) must not exceed "
                    f"turn.unfinished_wait_s ({self.unfinished_wait_s}), the upper bound"
                )
        return self


class ServerSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=7860, ge=0, le=65535)
    max_calls: int = Field(default=50, ge=1)
    public_url: str | None = None
    ice_servers: list[IceServerSettings] = Field(
        default_factory=lambda: [],
        description='STUN/TURN servers: "stun:host:3478" or {urls, username, credential}.',
    )
    start_local_services: bool = True
    trusted_proxies: list[str] = Field(
        default_factory=lambda: [],
        description="Addresses or networks (CIDR) of the reverse proxies in front: only from "
        "them is X-Forwarded-For believed, so per-source limits see the real client. "
        "Unset, the peer's address is the source.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        le=60,
        description="A connection whose request headers (or WebSocket handshake) are not "
        "complete by then is closed: half-open requests cannot pile up.",
    )
    max_connections: int = Field(
        default=10_000,
        ge=16,
        description="Open connections of all kinds; beyond it new ones get 503 at once.",
    )
    requests_per_source_per_s: float = Field(
        default=5.0,
        gt=0,
        description="WebRTC offers and /start, and telephony webhooks, per client address "
        "(a token bucket; over it: 429).",
    )
    request_burst_per_source: int = Field(default=20, ge=1)

    @field_validator("trusted_proxies")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for entry in value:
            try:
                ipaddress.ip_network(entry.strip(), strict=False)
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an IP address or network (e.g. 10.0.0.0/8, 127.0.0.1)"
                ) from None
        return [entry.strip() for entry in value]

    drain_timeout_s: float = Field(
        default=120.0,
        ge=0,
        description="On SIGTERM, how long calls in progress may go on before they are closed "
        "(1001 going away); give orchestrators a grace period above it.",
    )
    api_token: str | None = Field(
        default=None,
        description="Bearer token for the operator API (GET /calls/{id}: a call's transcript; "
        "POST /calls/outbound); unset, the operator API is off.",
    )


class TwilioSettings(_Section):
    """Twilio: the webhook's signature check, and the REST API for transfer and outbound calls."""

    auth_token: str | None = None
    allow_unsigned: bool = Field(
        default=False,
        description="Take unsigned Twilio webhooks and media streams on a non-loopback "
        "address (anyone who can reach the server can then start calls); without it, "
        "`serve` on such an address needs auth_token.",
    )
    account_sid: str | None = Field(
        default=None,
        description="With auth_token, turns on Twilio's REST API: call transfer and outbound "
        "calls (AC…, from the Twilio console).",
    )
    api_base_url: str = Field(
        default="https://api.twilio.com",
        description="Twilio's REST API (a test points it at a local stand-in).",
    )
    from_number: str | None = Field(
        default=None, description="Caller ID for outbound calls when none is given (E.164)."
    )
    machine_detection: Literal["Enable", "DetectMessageEnd", "none"] = Field(
        default="Enable",
        description="Answering machine detection on outbound calls; the result reaches the "
        "call as attributes['answered_by'].",
    )
    outbound_answer_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="An outbound call holds its slot this long for its media stream to arrive.",
    )

    @property
    def rest_enabled(self) -> bool:
        """Both credentials are set: the REST API can be used."""
        return bool(self.account_sid and self.auth_token)


class TransferSettings(_Section):
    """The ``transfer_call`` tool: the model hands a phone call to a person (Twilio REST)."""

    enabled: bool = False
    destinations: list[str] = Field(
        default_factory=lambda: [],
        description='Where calls may go: E.164 numbers or SIP URIs, e.g. ["+15550100", '
        '"sip:desk@pbx.example.com"]; anything else the model asks for is refused.',
    )
    announcement: str = Field(
        default="Please hold while I transfer you to a colleague.",
        description="What the agent says before handing the call over.",
    )
    whisper: str | None = Field(
        default=None,
        description="Said to the person who answers, before the caller is connected.",
    )

    @field_validator("destinations")
    @classmethod
    def _numbers_or_sip(cls, destinations: list[str]) -> list[str]:
        for destination in destinations:
            sip = destination.lower().startswith(("sip:", "sips:"))
            if not sip and not re.fullmatch(r"\+[1-9][0-9]{6,14}", destination):
                raise ValueError(
                    f"{destination!r} is neither an E.164 number (+15550100) nor a SIP URI "
                    "(sip:desk@pbx.example.com)"
                )
        return destinations

    @model_validator(mode="after")
    def _somewhere_to_go(self) -> TransferSettings:
        if self.enabled and not self.destinations:
            raise ValueError(
                "transfer.enabled needs transfer.destinations (the numbers or SIP URIs the "
                "model may transfer calls to)"
            )
        return self


class DTMFSettings(_Section):
    """Keypresses: the caller's reach the model as text; the model may send its own."""

    enabled: bool = True
    timeout_s: float = Field(
        default=1.5,
        gt=0,
        le=10,
        description="A sequence of keypresses ends after this much quiet (or at '#').",
    )
    send_tool: bool = Field(
        default=False,
        description="Offer the model the send_dtmf tool (to navigate another system's menu).",
    )


class TelnyxSettings(_Section):
    """A second carrier: Telnyx media streams behind a TeXML application."""

    public_key: str | None = Field(
        default=None,
        description="The account's Ed25519 public key, base64 (Mission Control: Keys & "
        "Credentials > Public Key); set, the Telnyx routes are on and every webhook must be "
        "signed with it.",
    )
    signature_tolerance_s: float = Field(
        default=300.0,
        gt=0,
        description="A webhook signed further than this from now (telnyx-timestamp) is refused.",
    )
    stream_secret: str | None = Field(
        default=None,
        description="Signs the single-use stream token the webhook hands Telnyx; unset, a "
        "random one per process (set one shared value when several processes answer).",
    )
    codec: Literal["PCMU", "PCMA"] = Field(
        default="PCMU",
        description="G.711 flavour asked of Telnyx for both directions (8 kHz).",
    )

    @field_validator("public_key")
    @classmethod
    def _ed25519_key(cls, key: str | None) -> str | None:
        if key is None:
            return None
        try:
            raw = base64.b64decode(key, validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) != 32:
            raise ValueError(
                "must be the base64 Ed25519 public key Telnyx shows under Keys & Credentials "
                "(32 bytes once decoded)"
            )
        return key


class ObservabilitySettings(_Section):
    """Per-turn latency: structured log lines, Prometheus at ``/metrics``, optional traces."""

    log_turns: bool = Field(
        default=True, description="Log one structured line per user turn with each stage in ms."
    )
    otel_enabled: bool = Field(
        default=False,
        description="Export OpenTelemetry traces (a span per call, per turn and per stage); "
        "needs the tracing extra: pip install 'voice-agent[tracing]'.",
    )
    log_transcripts: bool = Field(
        default=False,
        description="Debugging only: let log lines quote what callers and the bot said "
        "(Pipecat's debug lines, e.g. 'Generating TTS [...]'). Off: no transcript text in logs.",
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="OTLP/HTTP collector, e.g. http://127.0.0.1:4318 (/v1/traces is added); "
        "unset: the OTEL_EXPORTER_OTLP_* environment, else http://localhost:4318.",
    )

    @field_validator("otlp_endpoint")
    @classmethod
    def _http_endpoint(cls, url: str | None) -> str | None:
        if url is not None and not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https:// (OTLP over HTTP)")
        return url


class RecordsSettings(_Section):
    """Call records: one JSON line per ended call, and optionally a WAV of both sides."""

    directory: Path | None = Field(
        default=None,
        description="Where calls-YYYY-MM-DD.jsonl files (and recordings/) go; unset: no "
        "records on disk (GET /calls/{id} still shows the last calls).",
    )
    recording: bool = Field(
        default=False,
        description="Also record each call, caller left and bot right, as "
        "<directory>/recordings/YYYY-MM-DD/<call id>.wav. Mind consent (README).",
    )

    redact: bool = Field(
        default=False,
        description="Redact card, account and phone numbers, e-mails and IBANs from the "
        "agent's call records (what the caller and the bot said) before they are kept.",
    )

    @field_validator("directory")
    @classmethod
    def _absolute(cls, directory: Path | None) -> Path | None:
        """Relative to where the server starts; kept absolute so records name their WAVs."""
        return None if directory is None else directory.expanduser().absolute()

    @model_validator(mode="after")
    def _recording_needs_directory(self) -> RecordsSettings:
        if self.recording and self.directory is None:
            raise ValueError(
                "records.recording needs records.directory (set "
                "VOICE_AGENT_RECORDS__DIRECTORY to where recordings may go)"
            )
        return self


class AnalyticsSettings(_Section):
    """Contact-centre analytics: listen-only both-tracks streams, transcribed per speaker."""

    enabled: bool = Field(
        default=False,
        description="Serve the analytics webhooks and streams (/analytics/twilio, "
        "/analytics/telnyx) and the live view (/analytics, needs server.api_token).",
    )
    dial: str | None = Field(
        default=None,
        description="Where the analytics webhook connects the caller once the stream has "
        "started (the human agent: an E.164 number or a SIP URI): <Start><Stream "
        'track="both_tracks"/></Start><Dial>dial</Dial>.',
    )
    redact: bool = Field(
        default=True,
        description="Redact card, account and phone numbers, e-mails and IBANs from analytics "
        "transcripts (records, live view, summaries) before they are kept or shown.",
    )
    history: int = Field(
        default=500, ge=1, description="Ended analytics calls kept in memory for search."
    )
    summary_prompt_version: str = Field(
        default="summary-v1",
        description="Recorded beside each summary; change it when you change the prompt.",
    )
    summary_attempts: int = Field(
        default=3, ge=1, le=10, description="Tries per post-call summary (backoff between)."
    )
    summary_workers: int = Field(
        default=2, ge=1, le=32, description="Summaries written at once, off the calls' path."
    )

    @model_validator(mode="after")
    def _dial_when_enabled(self) -> AnalyticsSettings:
        if self.enabled and not self.dial:
            raise ValueError(
                "analytics.enabled needs analytics.dial: the number or SIP URI the webhook "
                "connects callers to (set VOICE_AGENT_ANALYTICS__DIAL)"
            )
        return self


class Settings(BaseSettings):
    """The whole tree. Build it with :func:`load_settings`, not directly."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid"
    )

    profile: str = "default"
    server: ServerSettings = ServerSettings()
    stt: STTSettings = STTSettings()
    asr_server: ASRServerSettings = ASRServerSettings()
    llm: LLMSettings = LLMSettings()
    tts: TTSSettings = TTSSettings()
    turn: TurnSettings = TurnSettings()
    twilio: TwilioSettings = TwilioSettings()
    telnyx: TelnyxSettings = TelnyxSettings()
    transfer: TransferSettings = TransferSettings()
    dtmf: DTMFSettings = DTMFSettings()
    observability: ObservabilitySettings = ObservabilitySettings()
    records: RecordsSettings = RecordsSettings()
    translation: TranslationSettings = TranslationSettings()
    analytics: AnalyticsSettings = AnalyticsSettings()

    @model_validator(mode="after")
    def _translation_needs_llm(self) -> Settings:
        if self.translation.enabled and not self.llm.base_url:
            raise ValueError(
                "translation.enabled needs an LLM to translate with: set llm.base_url and "
                "llm.model (VOICE_AGENT_LLM__BASE_URL, VOICE_AGENT_LLM__MODEL) to an "
                "OpenAI-compatible chat server"
            )
        return self

    @model_validator(mode="after")
    def _sagemaker_needs_endpoint(self) -> Settings:
        age = self.stt.params.max_connection_age_s
        if self.stt.transport == "sagemaker" and age is not None and age >= 30 * 60:
            raise ValueError(
                "stt.params.max_connection_age_s must be under 1800 s with SageMaker, which "
                "caps a stream at about 30 minutes (set it to 1500)"
            )
        if self.stt.transport == "sagemaker":
            missing = [
                name
                for name in ("endpoint_name", "region")
                if not getattr(self.stt.sagemaker, name)
            ]
            if missing:
                raise ValueError(
                    "stt.transport is 'sagemaker' but stt.sagemaker."
                    + " and stt.sagemaker.".join(missing)
                    + " is not set (set VOICE_AGENT_STT__SAGEMAKER__ENDPOINT_NAME and "
                    "VOICE_AGENT_STT__SAGEMAKER__REGION)"
                )
        return self

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Environment beats the profile file, which is passed in as init values.
        return env_settings, init_settings


def load_settings(
    profile: str | None = None,
    *,
    config_dir: Path = CONFIG_DIR,
    overrides: dict[str, Any] | None = None,
) -> Settings:
    """Read ``config/<profile>.toml`` plus ``VOICE_AGENT_*`` overrides into :class:`Settings`.

    Raises:
        ConfigError: unknown profile, unreadable TOML, or an invalid/missing setting.
    """
    profile = profile or os.environ.get(f"{ENV_PREFIX}PROFILE") or "default"
    path = config_dir / f"{profile}.toml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in config_dir.glob("*.toml"))) or "none"
        raise ConfigError(
            f"unknown profile {profile!r}: there is no {path}. Known profiles: {known}."
        )
    try:
        values = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path} is not valid TOML: {exc}. Fix the file.") from exc
    values["profile"] = profile
    _merge(values, overrides or {})
    try:
        return Settings(**values)
    except ValidationError as exc:
        raise ConfigError(_explain(exc, path)) from None


def _merge(into: dict[str, Any], extra: dict[str, Any]) -> None:
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


_PARAM_NAMES = frozenset(field.name for field in fields(RealtimeSTTParams))


def _explain(exc: ValidationError, path: Path) -> str:
    lines = [f"invalid configuration (profile file {path}):"]
    for error in exc.errors():
        loc = [str(part) for part in error["loc"]]
        if loc[-1:] == ["params"] and error["type"] == "value_error":
            knob = str(error["msg"]).removeprefix("Value error, ").split(" ", 1)[0]
            if knob in _PARAM_NAMES:  # RealtimeSTTParams names the knob in its message
                loc.append(knob)
        dotted = ".".join(loc)
        env = ENV_PREFIX + "__".join(part.upper() for part in loc)
        if error["type"] in ("extra_forbidden", "unexpected_keyword_argument"):
            hint = "remove it: there is no such setting (check the spelling)"
        else:
            hint = f"fix it in {path.name} or set {env}"
        lines.append(f"  - {dotted or 'settings'}: {error['msg']}; {hint}")
    return "\n".join(lines)
