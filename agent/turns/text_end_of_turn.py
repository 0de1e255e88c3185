"""The probability that the user's sentence ends here, read from a small language model.

LiveKit's text turn detector asks a language model how likely the chat template's end-of-turn
token is right after the user's words (with the bot's last message before them): a sentence
that goes on ("Can you tell me") makes the model expect a next word, a finished one the end
of the message. The offline profile already serves a ChatML model (SmolLM2-135M-Instruct)
with llama.cpp's OpenAI-compatible server, so this asks that server rather than loading a
second copy of the model into every agent process.

The words are given as spoken (:func:`as_spoken`: lower case, no punctuation), as LiveKit
gives its model: a recognizer closes every fragment it hears before a pause with a full stop
("Book a table."), and after a full stop the model reads the sentence as finished whatever its
words. An untuned chat model has seen user messages with punctuation, so after bare words it
puts its weight on the mark that closes the sentence rather than on ``<|im_end|>`` itself; the
answer is therefore the probability that the next token ends the sentence: a closing mark or
the end of the message (:data:`SENTENCE_ENDS`). On the turn-taking bench's set this tells
"book a table" (0.03) from "book a table for two people" (0.34) and "is the store open today"
(0.81); with the recognizer's marks kept, "Book a table." read 0.08 against the statement's
0.007 (``bench/results/turn_taking_multilingual.md``). Before the words comes the conversation
the answer will have, as the chat template writes it (:func:`chatml_prompt`), so a server that
keeps the call's prompt reads only what is new for each question (``bench/text_model_cost.py``).

What the server gives (llama-cpp-python 0.3, read from its source and checked against the
model's own logits): ``/v1/completions`` with ``logprobs: k`` reports the ``k`` likeliest next
tokens from the raw logits, each under its text; a special token such as ``<|im_end|>`` is
written as ``""``. The end-of-turn tokens (``<|im_end|>``, ``<|endoftext|>``) are kept out of
the one token sampled with ``logit_bias`` (the reported logprobs are taken before the bias):
a sampled end-of-turn token ends the completion before any logprob is written. ``""`` among
the likeliest tokens is then ``<|im_end|>``, the only other special token the model puts
after a user's words being ``<|endoftext|>``, far below; absent, its probability is below
the ``k``-th token's, which this reads as 0 (so does a closing mark below it). The default
profile's server (:mod:`agent.local.llm_app`) writes that same completion from the prompt's last
position alone, so the question's cost does not grow with the call (llama-cpp-python's own
log-softmaxes every position of the conversation for it); with ``llm.local.question_slots`` it
reads it on a context beside the answers', in a sequence per caller: each call sends its own
``user``, the OpenAI field that names an end user. When the user begins to speak, the model is
given the conversation to read (:meth:`TextEndOfTurn.prime`), so the question at the turn's
end reads only the words.

The answer is a hint, never a wait: the client gives up after ``timeout_s`` (a busy machine, or
a server that answers one request at a time, llama-cpp-python's own, while an answer streams)
and any failure reads as "no opinion" (``None``), so the turn is decided as without the model.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import httpx
from loguru import logger

from agent.llm.messages import message_text

END_OF_TURN = "<|im_end|>"
"""The end of a message in the ChatML template (SmolLM2, Qwen): what the model is asked about."""

TOP_LOGPROBS = 20
"""How many likely next tokens the server reports; an ending below them reads as 0."""

SENTENCE_ENDS = ("", ".", "?", "!")
"""The next tokens that end the user's sentence: ``<|im_end|>`` (which the server writes as
``""``) and the closing marks. Not "...": a speaker trails off with it ("um...")."""

_NOT_SPOKEN = re.compile(r"[^\w\s'-]+")

MAX_USER_CHARS = 600
"""How much of the user's words the prompt keeps (their end): a long turn adds prompt tokens,
and time, for nothing the last words do not say."""

PRIME_TIMEOUT_S = 10.0
"""How long :meth:`TextEndOfTurn.prime` waits for its answer: it is read while the user
speaks, and nothing waits for it."""

LATE_IN_A_ROW = 2
"""Timeouts in a row after which a call's questions rest (:class:`TextEndOfTurn`)."""
REST_FOR = 3
"""Questions not asked after :data:`LATE_IN_A_ROW` timeouts, before the model is tried again."""

_FAILURES = (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError)
"""What a server that is down, refuses, or answers no completion raises in the client."""

Conversation = Sequence[tuple[str, str]]
"""The messages before the user's words, as ``(role, text)``: the system prompt first."""


@dataclass(slots=True)
class TextEndOfTurnStats:
    """The process's requests to the model, for benchmarks and the metrics endpoint."""

    answered: int = 0
    failed: int = 0
    timed_out: int = 0
    rested: int = 0
    """Questions not asked: the call's model was resting after answers that came too late."""
    primed: int = 0
    """Conversations read ahead of the user's words (:meth:`TextEndOfTurn.prime`)."""
    seconds: float = 0.0
    """Total time of the answered requests."""


STATS = TextEndOfTurnStats()


def as_spoken(text: str) -> str:
    """``text`` as words only: lower case, marks dropped (but a word's own apostrophe or
    hyphen), in any script; what the model is asked to continue."""
    spoken = _NOT_SPOKEN.sub(" ", text.lower().replace("\u2019", "'"))
    return " ".join(spoken.split())


def chatml_prompt(user_text: str, conversation: Conversation = ()) -> str:
    """The conversation as the chat template writes it for the answer (ChatML, each message
    ``<|im_start|>role\ncontent<|im_end|>\n``, unchanged), then the user's words, open. So a
    server that keeps the call's last prompt reads only what is new: ``agent.local.llm_app``
    keeps each call's question in a sequence of its own, or, with ``question_slots`` 0, on the
    answers' context, whose one kept prompt then serves the question and the answer alike (a
    shorter context here, the bot's last message only, made each next answer read the whole
    conversation again: ``bench/text_model_cost.py``)."""
    turns = [f"<|im_start|>{role}\n{text}{END_OF_TURN}\n" for role, text in conversation]
    turns.append(f"<|im_start|>user\n{user_text.strip()[-MAX_USER_CHARS:]}")
    return "".join(turns)


class TextEndOfTurn:
    """Asks an OpenAI-compatible completions server (llama.cpp's) for p(the user's sentence
    ends here).

    One per call (its connection lives on the call's event loop); :meth:`close` it when the
    call ends.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout_s: float = 0.35,
        api_key: str = "",
        late_in_a_row: int = LATE_IN_A_ROW,
        rest_for: int = REST_FOR,
    ) -> None:
        """
        Args:
            base_url: The server's OpenAI base URL, ``http://host:port/v1``.
            model: The model name the server answers to.
            timeout_s: The longest a request may take; past it the answer is ``None``.
            api_key: Sent as a bearer token when set.
            late_in_a_row: After this many timeouts in a row, the next ``rest_for`` questions
                are not asked (``None`` at once) before the model is tried again. A question
                that times out costs the turn its wait and the server the request, for no
                answer, and once a call's conversation has grown the next one is late too
                (``bench/text_model_calls.py``).
            rest_for: See ``late_in_a_row``; 0 asks every time.
        """
        if timeout_s <= 0:
            raise ValueError(f"timeout_s ({timeout_s}) must be positive")
        if late_in_a_row < 1 or rest_for < 0:
            raise ValueError(
                f"late_in_a_row ({late_in_a_row}) must be at least 1, rest_for ({rest_for}) at "
                "least 0"
            )
        self._late_in_a_row = late_in_a_row
        self._rest_for = rest_for
        self._late = 0
        self._resting = 0
        self._url = base_url.rstrip("/") + "/completions"
        self._tokenize_url = base_url.rstrip("/").removesuffix("/v1") + "/extras/tokenize"
        self._model = model
        self._caller = f"call-{uuid.uuid4().hex[:12]}"
        """The request's ``user``: the server keeps each caller's prompt apart
        (:mod:`agent.local.question_slots`), so calls do not evict each other's."""
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._verify = base_url.startswith("https:")  # no CA bundle to load for plain HTTP
        self._http: httpx.AsyncClient | None = None  # made on first use, on the call's loop
        self._banned: dict[str, float] | None = None
        self._primed = ""

    @property
    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(
                headers=self._headers, timeout=httpx.Timeout(self.timeout_s), verify=self._verify
            )
        return self._http

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def probability(
        self, user_text: str, conversation: Conversation = (), timeout_s: float | None = None
    ) -> float | None:
        """p(the user's sentence ends after ``user_text``, the conversation so far before it),
        or ``None`` when the server did not answer in time or answered something else (logged;
        counted in :data:`STATS`). ``timeout_s``: this question's limit, where its answer is
        worth waiting for longer than the client's ``timeout_s`` (never shorter)."""
        spoken = as_spoken(user_text)
        if not spoken:
            return None
        if self._resting:
            self._resting -= 1
            STATS.rested += 1
            logger.debug("text end of turn: not asked (its last answers came too late)")
            return None
        limit_s = max(self.timeout_s, timeout_s or 0.0)
        started = time.perf_counter()
        try:
            async with asyncio.timeout(limit_s):
                p = await self._ask(chatml_prompt(spoken, conversation), limit_s)
        except TimeoutError:
            STATS.timed_out += 1
            self._late += 1
            rest = ""
            if self._late >= self._late_in_a_row and self._rest_for:
                self._late, self._resting = 0, self._rest_for
                rest = f"; not asked for the next {self._rest_for} turns that need it"
            logger.warning(f"text end of turn: no answer in {limit_s:.2f} s; not used{rest}")
            return None
        except _FAILURES as error:
            STATS.failed += 1
            logger.warning(f"text end of turn: {type(error).__name__}: {error}; not used")
            return None
        seconds = time.perf_counter() - started
        self._late = 0
        STATS.answered += 1
        STATS.seconds += seconds
        logger.debug(f"text end of turn: p={p:.3f} in {1000 * seconds:.0f} ms")
        return p

    async def prime(self, conversation: Conversation) -> None:
        """Have the server read ``conversation`` before the user's words are known (call it
        when the user begins to speak), so the question at the turn's end reads only the words.

        A server that keeps the call's prompt apart from the answers' (``agent.local.llm_app``)
        has not read the bot's last message: at 150-200 tokens a second on one thread, an
        answer of 40 tokens and the words took 300 ms, near the question's timeout. Read while
        the user speaks, it costs the question nothing. A conversation already read is not sent
        again; a failure only means the question reads it all (logged at DEBUG)."""
        prompt = chatml_prompt("", conversation)
        if prompt == self._primed:
            return
        self._primed = prompt
        try:
            async with asyncio.timeout(PRIME_TIMEOUT_S):
                await self._ask(prompt, PRIME_TIMEOUT_S)
        except (TimeoutError, *_FAILURES) as error:
            logger.debug(f"text end of turn: the conversation was not read ahead: {error!r}")
            return
        STATS.primed += 1

    async def _ask(self, prompt: str, timeout_s: float | None = None) -> float:
        body = {
            "model": self._model,
            "prompt": prompt,
            "max_tokens": 1,
            "temperature": 0,
            "logprobs": TOP_LOGPROBS,
            "logit_bias": await self._end_tokens_banned(),
            "user": self._caller,
        }
        limit = httpx.Timeout(timeout_s) if timeout_s is not None else httpx.USE_CLIENT_DEFAULT
        response = await self._client.post(self._url, json=body, timeout=limit)
        response.raise_for_status()
        choice = response.json()["choices"][0]
        top = choice["logprobs"]["top_logprobs"][0]
        if not isinstance(top, dict):
            raise ValueError(f"the server's top_logprobs are not a mapping: {top!r}")
        return min(1.0, sum(math.exp(float(top[t])) for t in SENTENCE_ENDS if t in top))

    async def _end_tokens_banned(self) -> dict[str, float]:
        """``logit_bias`` keeping every end-of-turn token out of the one sampled token (token
        ids from the server's own tokenizer, asked once)."""
        if self._banned is None:
            response = await self._client.post(
                self._tokenize_url, json={"input": f"{END_OF_TURN}<|endoftext|>"}
            )
            response.raise_for_status()
            tokens = response.json()["tokens"]
            if len(tokens) != 2:
                raise ValueError(
                    f"the server's model does not have ChatML's end tokens (got {tokens}): "
                    "the text end of turn needs a ChatML model such as SmolLM2"
                )
            self._banned = {str(token): -100.0 for token in tokens}
        return self._banned


def prompt_context(
    messages: list[dict[str, object]], system_prompt: str | None = None
) -> list[tuple[str, str]]:
    """An OpenAI-style message list as the answer's request sends it: ``system_prompt`` (the
    LLM service's ``system_instruction``) first unless the list has its own, then each
    system, user and assistant message that has text."""
    conversation: list[tuple[str, str]] = []
    if system_prompt and not (messages and messages[0].get("role") == "system"):
        conversation.append(("system", system_prompt))
    for message in messages:
        role, text = message.get("role"), message_text(message)
        if role in ("system", "user", "assistant") and isinstance(role, str) and text:
            conversation.append((role, text))
    return conversation
