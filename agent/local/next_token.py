"""One next token's log-probabilities, read from the prompt's last position only.

The text end of turn (:mod:`agent.turns.text_end_of_turn`) asks the local LLM server for the
likeliest next tokens after the user's words: an OpenAI completion of one token with
``logprobs``. llama-cpp-python answers it by keeping the logits of every position it evaluates
(``logits_all``, which it needs on for any logprobs, answers included) and then log-softmaxing
every kept row of the conversation, to report one of them: the call's length times the
vocabulary (49,152 for SmolLM2). On a 2-core EPYC that took 69 ms after 80 tokens, 440 ms
after 500 and 1.4 s after 1,500, so from a call's fourth or fifth turn on the question missed
its 0.35 s timeout (``bench/results/text_model_calls.md``).

:func:`next_token_completion` gives the same answer from the one row that matters: it evaluates
the prompt's new tokens after the part already kept (in the caller's own sequence of a context
beside the answers', or on the answers' context: :mod:`agent.local.question_slots`), reads
llama.cpp's last output, and writes the completion exactly as llama-cpp-python would for
``max_tokens`` 1 at temperature 0: the top tokens from the raw logits, each under its text, and
the greedy token after ``logit_bias``. Sampling penalties are not applied to that token; they
do not touch the reported logprobs. The usage also says how many prompt tokens were already
kept (OpenAI's ``prompt_tokens_details.cached_tokens``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import llama_cpp
import numpy as np

from agent.local.question_slots import QuestionSlots, SharedContext


def token_id(key: str, vocabulary: int) -> int:
    """``logit_bias``'s key as a token id of this model, or a ValueError that says why not."""
    try:
        token = int(key)
    except ValueError:
        raise ValueError(f"logit_bias key {key!r} is not a token id") from None
    if not 0 <= token < vocabulary:
        raise ValueError(f"logit_bias names token {token}; this model's are 0-{vocabulary - 1}")
    return token


def _text(llama: llama_cpp.Llama, token: int) -> str:
    return llama.detokenize([token], prev_tokens=[]).decode("utf-8", errors="ignore")


def next_token_completion(
    llama: llama_cpp.Llama,
    prompt: str,
    *,
    reader: QuestionSlots | SharedContext,
    caller: str | None = None,
    top: int,
    logit_bias: Mapping[str, float] | None = None,
    model: str | None = None,
) -> dict[str, Any]:
    """The OpenAI completion llama-cpp-python writes for ``prompt`` with ``max_tokens`` 1,
    ``temperature`` 0 and ``logprobs`` ``top``, computed from the last position only.

    Args:
        llama: The model (any ``logits_all``): its vocabulary.
        prompt: The text to continue; special tokens (``<|im_start|>``) are read as such.
        reader: Where the prompt is evaluated (:mod:`agent.local.question_slots`).
        caller: Whose prompt it is (the request's ``user``): :class:`QuestionSlots` keeps
            each caller's in a sequence of its own.
        top: How many likeliest next tokens to report (each under its text).
        logit_bias: Token id (as a string) to the bias added before the greedy choice.
        model: The name the response gives; the model file by default.

    Raises:
        PromptTooLong: ``prompt`` leaves no room in the reader's context window for a token.
        ValueError: ``prompt`` is empty, or ``logit_bias`` names no token of the model.
    """
    if not prompt:
        raise ValueError("the prompt is empty: give the text whose next token to read")
    tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True)
    biases = {token_id(key, llama.n_vocab()): bias for key, bias in (logit_bias or {}).items()}
    logits, cached = reader.last_logits(tokens, caller)
    logprobs = llama_cpp.Llama.logits_to_logprobs(logits)
    biased = logits.copy()
    for biased_token, bias in biases.items():
        biased[biased_token] += bias
    token = int(np.argmax(biased))
    if llama_cpp.llama_vocab_is_eog(llama._model.vocab, token):
        # llama-cpp-python ends the completion on it before writing any logprob.
        text, finish = "", "stop"
        written: dict[str, list[Any]] = {
            "tokens": [],
            "text_offset": [],
            "token_logprobs": [],
            "top_logprobs": [],
        }
    else:
        text, finish = _text(llama, token), "length"
        # llama-cpp-python's order: likeliest first, ties to the higher token id.
        ranked = np.lexsort((-np.arange(len(logprobs)), -logprobs))[:top]
        top_logprobs = {_text(llama, int(i)): float(logprobs[i]) for i in ranked}
        top_logprobs[text] = float(logprobs[token])
        written = {
            "tokens": [text],
            "text_offset": [len(prompt)],
            "token_logprobs": [float(logprobs[token])],
            "top_logprobs": [top_logprobs],
        }
    return {
        "id": f"cmpl-{uuid.uuid4()}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model if model is not None else llama.model_path,
        "choices": [
            {
                "text": text,
                "index": 0,
                "logprobs": written,
                "finish_reason": finish,
            }
        ],
        "usage": {
            "prompt_tokens": len(tokens),
            "completion_tokens": len(written["tokens"]),
            "total_tokens": len(tokens) + len(written["tokens"]),
            "prompt_tokens_details": {"cached_tokens": cached},
        },
    }
