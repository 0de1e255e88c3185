"""The bot's answer stays tentative until the caller hears it: started early, cancelled unheard.

Three cases, one mechanism. An answer is started for words the user may not have finished:

- **Eager answer** (``eager_answer``): when the STT sends an eager end of turn (the VAD
  stopped and the interim transcript is stable: ``EagerTranscriptionFrame``), the LLM starts
  on it at once, against a provisional copy of the context; the LLM service's
  :class:`~pipecat.turns.speculation_gate.SpeculationGate` holds its output. When the turn
  ends, the final transcript decides: if it matches (Pipecat's ``NormalizedMatch``: case and
  punctuation aside) the answer already under way is kept and released, and no second
  request goes out; if not, it is withdrawn (``EagerEndOfTurnCancelFrame``: the LLM stops,
  the gate drops it) and the LLM runs again on the final text. If the user speaks again
  before the turn ends, it is withdrawn too. Tool calls never run speculatively: the LLM
  service withdraws a speculation that reaches one, and the call runs on the final turn.
- **Answer ahead** (the stop strategy's ``answer_ahead``): the stop strategy starts it
  (Pipecat's ``trigger_user_turn_inference_triggered`` with a speculation) when the final
  words are in and the turn only waits out a quiet the models already call its end
  (:class:`~agent.turns.adaptive_stop.AdaptiveUserTurnStopStrategy`, the model's wait); it
  runs on the words gathered here and is kept, restarted or withdrawn as an eager answer is.
- **False end** (``merge_false_ends``): the turn did end and the answer was released, but
  the user starts speaking again before any of the answer's audio went out (no
  ``BotStartedSpeakingFrame`` since the turn ended). The new turn's interruption cancels the
  answer as barge-in always does; on top of that the finished turn's user message is taken
  back out of the context (it is still the last message: no answer, no tool call after it)
  and its words open the new turn, so the next LLM request sees both parts as one user
  message. Once audio has gone out the caller heard it, and the turn stays as it was.

Either way nothing of a cancelled answer is heard or stays in the context: the assistant
aggregator sits after the transport output and only writes what was played.

Extends ``pipecat.processors.aggregators.llm_response_universal.LLMUserAggregator`` (Pipecat
1.14.0): the speculation is started with its ``_run_speculative_inference`` and resolved in
its ``_on_user_turn_inference_triggered`` / ``_on_user_turn_stopped`` the way Pipecat's
``EagerUserTurnStopStrategy.trigger_user_turn_stopped`` resolves one (keep: finalize with
``confirms_speculation=True``; miss: withdraw, then stop as usual). That strategy cannot be
used as it is because it ends turns only on the STT's word (``ExternalUserTurnStopStrategy``);
doing it here leaves the end-of-turn decision to whichever stop strategy the call uses. The
false-end merge reads and edits the aggregator's ``_aggregation`` and ``_context``.

One more difference: ``broadcast_interruption`` (``FrameProcessor``'s) also empties this
processor's own queue, and here that queue holds the user's words. A turn started by an
interim transcript (``TranscriptionUserTurnStartStrategy``) interrupted the bot while the
final transcript right behind that interim was still queued, and the user's words were lost:
the turn then ended on the stop watchdog, 5 s later, without them. Ours interrupts everything
downstream and upstream as before and keeps its own queue.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal, cast

from loguru import logger
from pipecat.frames.frames import (
    BotStartedSpeakingFrame,
    EagerEndOfTurnCancelFrame,
    EagerTranscriptionFrame,
    Frame,
    InterruptionFrame,
    VADUserStartedSpeakingFrame,
)
from pipecat.processors.aggregators.llm_context import LLMContext, LLMContextMessage
from pipecat.processors.aggregators.llm_response_universal import (
    LLMAssistantAggregator,
    LLMUserAggregator,
    LLMUserAggregatorParams,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.turns.types import UserTurnSpeculation
from pipecat.turns.user_start import BaseUserTurnStartStrategy, UserTurnStartedParams
from pipecat.turns.user_stop import (
    BaseUserTurnStopStrategy,
    EagerMatchPolicy,
    NormalizedMatch,
    UserTurnStoppedParams,
)
from pipecat.turns.user_turn_controller import UserTurnController
from pipecat.utils.string import TextPartForConcatenation

from agent.observability.log_privacy import said

EagerOutcome = Literal["kept", "restarted", "withdrawn"]
"""What became of an eager answer: kept (the final matched), restarted on the final text,
or withdrawn because the user went on (or the LLM wanted a tool)."""

TURN_FALLBACK_WARNING = (
    "the user turn was ended by Pipecat's fallback (user_turn_stop_timeout), not by the "
    "end-of-turn strategy: turn_fallback"
)
"""Logged when a turn reaches Pipecat's safety net: every turn should end on a deadline of
the strategy's own, so this is an error (counted as ``turn_fallback``) and fails a test."""


class TentativeAnswerUserAggregator(LLMUserAggregator):
    """Pipecat's user aggregator, with eager answers and false ends merged into one turn.

    Events (besides the base class's): ``on_eager_answer(aggregator, outcome)`` with an
    :data:`EagerOutcome`, and ``on_false_end_merged(aggregator, text)`` with the words of the
    turn that was taken back.

    Args:
        context: The call's conversation.
        params: As for :class:`LLMUserAggregator`.
        eager_answer: Start the answer on an eager end of turn.
        merge_false_ends: Take an unheard turn back when the user goes on.
        match_policy: Whether the final transcript still matches the eager one.
    """

    def __init__(
        self,
        context: LLMContext,
        *,
        params: LLMUserAggregatorParams | None = None,
        eager_answer: bool = False,
        merge_false_ends: bool = True,
        match_policy: EagerMatchPolicy | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(context, params=params, **kwargs)
        self._eager_answer = eager_answer
        self._merge_false_ends = merge_false_ends
        self._match_policy = match_policy or NormalizedMatch()
        self._turn_open = False
        self._speculation: UserTurnSpeculation | None = None
        self._confirms_speculation = False
        self._unheard_message: LLMContextMessage | None = None  # the last turn, no audio yet
        self._register_event_handler("on_eager_answer")
        self._register_event_handler("on_false_end_merged")
        self.add_event_handler("on_user_turn_stop_timeout", self._warn_turn_fallback)

    @property
    def stop_strategies(self) -> list[BaseUserTurnStopStrategy]:
        """The strategies that end this aggregator's user turns (as it was given them)."""
        strategies = self._params.user_turn_strategies
        return list(strategies.stop or []) if strategies else []

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        if isinstance(frame, BotStartedSpeakingFrame):
            self._unheard_message = None  # the caller hears the answer: it stands
        elif isinstance(frame, EagerEndOfTurnCancelFrame):
            # Withdrawn elsewhere: by the STT (the user went on) or the LLM (a tool call).
            # Our own withdrawals cleared the speculation before broadcasting this.
            await self._drop_speculation(announce=False)
        elif isinstance(frame, VADUserStartedSpeakingFrame):
            await self._drop_speculation(announce=True)  # the user goes on within the turn
        await super().process_frame(frame, direction)
        if isinstance(frame, EagerTranscriptionFrame) and self._eager_answer and self._turn_open:
            await self._speculate(frame.text)

    async def _warn_turn_fallback(self, _aggregator: object) -> None:
        logger.warning(f"{self}: {TURN_FALLBACK_WARNING}")

    async def broadcast_interruption(self) -> None:
        """Interrupt the bot, keeping the user's words still queued here (see the module)."""
        logger.debug(f"{self}: broadcasting interruption")
        await self.stop_all_metrics()
        await self.broadcast_frame(InterruptionFrame)

    # ------------------------------------------------------------------ eager answer

    async def _speculate(self, eager_text: str = "") -> None:
        """Start an answer on the turn's words so far and ``eager_text`` after them."""
        await self._drop_speculation(announce=True)
        # Words finalized earlier in this turn (and a taken-back turn) are part of it.
        so_far = self.aggregation_string()
        speculation = UserTurnSpeculation(text=f"{so_far} {eager_text}".strip())
        self._speculation = speculation
        logger.debug(f"{self}: answering ahead: {said(speculation.text)}")
        await self._run_speculative_inference(speculation)

    async def _drop_speculation(self, *, announce: bool) -> None:
        if self._speculation is None:
            return
        self._speculation = None
        if announce:
            await self.broadcast_frame(EagerEndOfTurnCancelFrame)
        await self._call_event_handler("on_eager_answer", "withdrawn")

    async def _resolve_speculation(self) -> None:
        """At the end of the turn: keep the eager answer if the final words match it."""
        speculation, self._speculation = self._speculation, None
        if speculation is None:
            return
        final = self.aggregation_string()
        if self._match_policy.matches(speculation.text, final):
            logger.debug(f"{self}: eager answer kept: {said(final)}")
            self._confirms_speculation = True
            await self._call_event_handler("on_eager_answer", "kept")
            return
        logger.debug(f"{self}: eager answer restarted: {said(speculation.text)} -> {said(final)}")
        await self.broadcast_frame(EagerEndOfTurnCancelFrame)
        await self._call_event_handler("on_eager_answer", "restarted")

    async def _on_user_turn_inference_triggered(
        self,
        controller: UserTurnController,
        strategy: BaseUserTurnStopStrategy,
        speculation: UserTurnSpeculation | None = None,
    ) -> None:
        if speculation is not None:
            # The stop strategy answers ahead of the turn's end (``answer_ahead``): on the
            # words gathered here, which may hold a taken-back turn's too.
            await self._speculate()
            await self._call_event_handler("on_user_turn_inference_triggered", strategy)
            return
        if self._speculation is not None:
            await self._resolve_speculation()
            if self._confirms_speculation:
                # The answer is under way: the context write waits for the turn's end
                # (``_on_user_turn_stopped``), which releases it; no second request.
                await self._call_event_handler("on_user_turn_inference_triggered", strategy)
                return
        await super()._on_user_turn_inference_triggered(controller, strategy, speculation)

    async def _on_user_turn_speculation_cancelled(self, controller: UserTurnController) -> None:
        """The stop strategy withdrew the answer it started (the user went on)."""
        await self._drop_speculation(announce=True)

    async def _on_user_turn_stopped(
        self,
        controller: UserTurnController,
        strategy: BaseUserTurnStopStrategy,
        params: UserTurnStoppedParams,
    ) -> None:
        self._turn_open = False
        await self._resolve_speculation()  # a turn ended by the stop watchdog alone
        if self._confirms_speculation:
            self._confirms_speculation = False
            params = replace(params, confirms_speculation=True)
        await super()._on_user_turn_stopped(controller, strategy, params)

    # ------------------------------------------------------------------ false ends

    async def _on_user_turn_started(
        self,
        controller: UserTurnController,
        strategy: BaseUserTurnStartStrategy,
        params: UserTurnStartedParams,
    ) -> None:
        await self._drop_speculation(announce=True)
        # The interruption this broadcasts cancels an answer still on its way.
        await super()._on_user_turn_started(controller, strategy, params)
        self._turn_open = True
        unheard, self._unheard_message = self._unheard_message, None
        if self._merge_false_ends and params.enable_interruptions and unheard is not None:
            await self._take_back(unheard)

    async def _take_back(self, message: LLMContextMessage) -> None:
        """Reopen the last turn: its message leaves the context, its words open this turn."""
        messages = self._context.messages
        if not messages or messages[-1] is not message:
            return  # an answer or a tool call came after it: the turn stands
        text = cast(dict[str, Any], message).get("content")
        if not isinstance(text, str):
            return
        self._context.set_messages(messages[:-1])
        self._aggregation.insert(
            0, TextPartForConcatenation(text, includes_inter_part_spaces=False)
        )
        logger.debug(
            f"{self}: false end, the user went on before the answer was heard: {said(text)}"
        )
        await self._call_event_handler("on_false_end_merged", text)

    async def _push_aggregation(self, *, run_llm: bool = True) -> str:
        text = await super()._push_aggregation(run_llm=run_llm)
        if text:
            self._unheard_message = self._context.messages[-1]
        return text


def tentative_answer_aggregators(
    context: LLMContext,
    *,
    user_params: LLMUserAggregatorParams,
    eager_answer: bool,
    merge_false_ends: bool,
) -> tuple[TentativeAnswerUserAggregator, LLMAssistantAggregator]:
    """The user and assistant aggregators of one call, wired as ``LLMContextAggregatorPair``
    wires them."""
    user = TentativeAnswerUserAggregator(
        context,
        params=user_params,
        eager_answer=eager_answer,
        merge_false_ends=merge_false_ends,
    )
    assistant = LLMAssistantAggregator(context, _paired_user_aggregator=user)
    return user, assistant
