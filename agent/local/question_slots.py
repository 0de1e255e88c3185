"""Where the text end of turn's question is read: a llama.cpp context of its own, one KV
sequence per call, beside the context that writes the answers.

On the answers' context, a question waits for the server's one lock behind whatever answer is
streaming, another call's included, and each call's prompt evicts the other's kept one: with
two calls 29 of 48 questions came within their 0.35 s, with four 13 of 96
(``bench/results/text_model_calls.md``). :class:`QuestionSlots` is a second context over the
same weights (the model is not loaded twice) with a lock of its own and ``slots`` sequences:
each call's questions keep their conversation in the call's own sequence and read only what is
new, and an answer never waits for a question nor a question for an answer. The price is the
second context's KV cache, ``slots`` times the answers' ``n_ctx`` tokens.

:class:`SharedContext` is the other way, for a machine without that memory: the question is
read on the answers' context (the caller holds its lock), whose kept prompt it then shares
with the answer.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import llama_cpp
import numpy as np
from llama_cpp import _internals


class PromptTooLong(ValueError):
    """The prompt does not fit the context window."""


def _check_fits(tokens: list[int], n_ctx: int) -> None:
    if len(tokens) >= n_ctx:
        raise PromptTooLong(
            f"Requested tokens ({len(tokens) + 1}) exceed context window of {n_ctx}"
        )


def _reusable(kept: list[int], tokens: list[int]) -> int:
    """How many of ``tokens`` a context holding ``kept`` need not read again: their common
    prefix, less the last token when it is all of them (its logits are not kept: it is read
    again)."""
    return min(llama_cpp.Llama.longest_token_prefix(kept, tokens), len(tokens) - 1)


class SharedContext:
    """The answers' own context: the question reads on from their kept prompt. Not thread-safe:
    hold the server's lock around :meth:`last_logits`."""

    def __init__(self, llama: llama_cpp.Llama) -> None:
        self._llama = llama

    def last_logits(self, tokens: list[int], caller: str | None = None) -> tuple[np.ndarray, int]:
        """The logits after ``tokens`` (a copy), and how many of them were already kept.

        ``caller`` is ignored: there is one kept prompt.

        Raises:
            PromptTooLong: ``tokens`` leave no room for a next one.
        """
        llama = self._llama
        _check_fits(tokens, llama.n_ctx())
        reuse = _reusable(llama._input_ids.tolist(), tokens)
        if reuse > 0 and llama._ctx.kv_cache_seq_rm(-1, reuse, -1):
            llama.n_tokens = reuse
        else:
            llama.reset()
            reuse = 0
        llama.eval(tokens[reuse:])
        logits = llama._ctx.get_logits_ith(-1)
        return np.ctypeslib.as_array(logits, shape=(llama.n_vocab(),)).copy(), reuse


class QuestionSlots:
    """A context of its own over ``llama``'s weights, keeping the prompts of the ``slots``
    callers that asked last, each in its own sequence of ``llama.n_ctx()`` tokens. Thread-safe
    (one question at a time), and independent of ``llama``'s own context and lock."""

    def __init__(self, llama: llama_cpp.Llama, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"slots ({slots}) must be at least 1")
        params = type(llama.context_params).from_buffer_copy(llama.context_params)
        params.n_seq_max = slots
        params.n_ctx = llama.n_ctx() * slots
        params.kv_unified = False  # each sequence its own n_ctx: no call crowds out another
        self._context = _internals.LlamaContext(model=llama._model, params=params, verbose=False)
        self._batch = _internals.LlamaBatch(
            n_tokens=llama.n_batch, embd=0, n_seq_max=1, verbose=False
        )
        self._n_ctx = llama.n_ctx()
        self._n_vocab = llama.n_vocab()
        self._kept: list[list[int]] = [[] for _ in range(slots)]
        self._slots: OrderedDict[str | None, int] = OrderedDict()  # least recent caller first
        self._lock = threading.Lock()

    def last_logits(self, tokens: list[int], caller: str | None = None) -> tuple[np.ndarray, int]:
        """The logits after ``tokens`` (a copy), and how many of them ``caller``'s sequence
        already held. Callers beyond ``slots`` take the sequence of the one that asked least
        recently; ``None`` is one caller like any other.

        Raises:
            PromptTooLong: ``tokens`` leave no room for a next one.
            RuntimeError: llama.cpp could not evaluate them (the sequence is emptied).
        """
        _check_fits(tokens, self._n_ctx)
        with self._lock:
            slot = self._slot_of(caller)
            reuse = _reusable(self._kept[slot], tokens)
            if not self._context.kv_cache_seq_rm(slot, reuse, -1):
                self._context.kv_cache_seq_rm(slot, 0, -1)
                reuse = 0
            self._kept[slot] = []
            try:
                self._decode(slot, tokens, reuse)
            except Exception:
                self._context.kv_cache_seq_rm(slot, 0, -1)
                raise
            self._kept[slot] = list(tokens)
            logits = self._context.get_logits_ith(-1)
            return np.ctypeslib.as_array(logits, shape=(self._n_vocab,)).copy(), reuse

    def _slot_of(self, caller: str | None) -> int:
        """``caller``'s sequence: its own, a free one, or the least recent caller's."""
        if caller in self._slots:
            self._slots.move_to_end(caller)
            return self._slots[caller]
        if len(self._slots) < len(self._kept):
            slot = min(set(range(len(self._kept))) - set(self._slots.values()))
        else:
            _, slot = self._slots.popitem(last=False)
        self._slots[caller] = slot
        return slot

    def _decode(self, slot: int, tokens: list[int], start: int) -> None:
        """Evaluate ``tokens[start:]`` into ``slot``'s sequence, in batches, keeping the logits
        of the last one only."""
        batch = self._batch.batch
        size = self._batch._n_tokens
        for begin in range(start, len(tokens), size):
            chunk = tokens[begin : begin + size]
            batch.n_tokens = len(chunk)
            for i, token in enumerate(chunk):
                batch.token[i] = token
                batch.pos[i] = begin + i
                batch.seq_id[i][0] = slot
                batch.n_seq_id[i] = 1
                batch.logits[i] = False
            batch.logits[len(chunk) - 1] = True
            self._context.decode(self._batch)
