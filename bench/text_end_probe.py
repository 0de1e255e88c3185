"""Where the text model's veto should sit: p(the sentence ends here) for complete requests and
for requests cut by a pause, at three depths of a conversation.

The veto (``turn.text_unfinished_p``, :mod:`agent.turns.adaptive_stop`) holds a turn whose
words ask for an answer without a question mark (two words or more) when the model reads
p(end) below the threshold. The turn-taking set has few such turns, so this asks the model
directly, offline: the product's client (:class:`~agent.turns.text_end_of_turn.TextEndOfTurn`)
against the packaged SmolLM2 behind llama.cpp's server, as the default profile runs it, with
the voice assistant's system prompt and its greeting, then 0, 3 or 6 exchanges of a scripted
conversation before the user's words. The words are written as a recognizer closes them
before a pause (a full stop); the client reads them as spoken.

For each threshold it counts the complete requests the veto would hold for the bound (a
late answer) and the cut ones it would let end at their pause (a false end when Smart Turn
also calls the pause complete, as it does for "can you tell me" on the phone line, 0.97). No
clock: this times nothing, and a run is deterministic on one machine (temperature 0).

Then the same for questions the recognizer closed with a question mark, which the veto leaves
to the words unless ``turn.text_question_unfinished_p`` is set: per threshold, the complete
questions it would make wait for the bound and the cut ones ("Can you tell me?", as tiny.en
writes the pause) it would still let end at their pause.

    .venv/bin/python -m bench.text_end_probe [--no-write]
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import sys
import time
from pathlib import Path

from agent.config import LLMSettings, TurnSettings
from agent.turns.adaptive_stop import beyond_the_veto
from agent.turns.completeness import asks_for_answer
from agent.turns.text_end_of_turn import Conversation, TextEndOfTurn
from bench import peers
from bench.machine import describe
from bench.report import publish

RESULTS_MD = Path(__file__).parent / "results" / "text_end_probe.md"
GREETING = "Hello! How can I help you today?"
EXCHANGES = (
    ("What's the weather like in Paris today?", "It's sunny, with a high of twenty two degrees."),
    ("And tomorrow?", "Tomorrow looks cloudy, with some light rain in the afternoon."),
    ("Can you remind me to take an umbrella?", "Sure, I'll remind you tomorrow morning."),
    ("Thanks. What time is it now?", "It's a quarter past three in the afternoon."),
    ("Is the bakery on Rue Cler still open?", "Yes, it's open until seven tonight."),
    ("How far is it from the Eiffel Tower?", "It's about a ten minute walk from the tower."),
)
DEPTHS = (0, 3, 6)
"""Exchanges before the user's words."""
COMPLETE = (
    "Please cancel my taxi.",
    "Book a table for two people at eight.",
    "Turn on the lights in the kitchen.",
    "Call my mother.",
    "Send me the receipt.",
    "Tell me a joke.",
    "Check my last order.",
    "Play some jazz.",
    "Set an alarm for seven.",
    "Read me the news.",
    "Can you call me back tomorrow.",
    "Could you check my last order.",
    "Find a pharmacy near me.",
    "Cancel my appointment.",
    "Can you help me with my bill.",
    "Show me the menu.",
    "Give me directions to the station.",
    "Stop the music.",
    "Transfer me to an agent.",
    "Please call me back.",
    "Turn it off.",
    "Cancel the order.",
    "Can you hear me.",
    "Book it for me.",
    "Send it to my email.",
    "Check the weather.",
    # two words, in the bench's four languages: the veto reads them since it starts at two
    "Cancel it.",
    "Yes please.",
    "No thanks.",
    "Stop please.",
    "Hold on.",
    "Call mom.",
    "Stopp bitte.",
    "Ja bitte.",
    "Nein danke.",
    "Danke schön.",
    "Arrête ça.",
    "Oui merci.",
    "Non merci.",
    "Para ya.",
    "Sí claro.",
    "No gracias.",
)
CUT = (
    "Book a table.",
    "Can you tell me.",
    "Could you check.",
    "Could you book.",
    "Can you send.",
    "Can you find.",
    "Please send me.",
    "Could you give me.",
    "Please cancel my.",
    "Can you help me.",
    "Can you please.",
    "Could you tell me about.",
    "Would you mind.",
    "Can you put me.",
    "Could you send me.",
    "Please book me.",
    "Please tell me.",
    "Could you turn on.",
    # two words, which the words rule alone reads as a command
    "Can you.",
    "Could you.",
    "I need.",
    "I want.",
    "Please send.",
    "Ich möchte.",
    "Könnten Sie.",
    "Je veux.",
    "Je voudrais.",
    "Pourriez-vous.",
    "Me gustaría.",
    "Quiero reservar.",
    "Quisiera reservar.",
)
"""Requests cut by a pause, as the recognizer writes them (a full stop): words that ask, two or
more, where the veto acts (one word is left to the words rule: "Stop." reads 0). "Book a
table." and "Can you help me." are complete by their words as well: the pause decides them only
if the caller goes on; so is "Quisiera reservar." ("I would like to book")."""
QUESTIONS = (
    "Is the store open today?",
    "What time is it?",
    "Can you call me back tomorrow?",
    "Are you open?",
    "When do you close?",
    "What time do you open?",
    "How much is it?",
    "Where are you?",
    "Can I pay by card?",
    "Do you deliver?",
    "Is it raining?",
    "What's my balance?",
    "How are you?",
    "Can you help me?",
    "Who is this?",
    "What is the address?",
    "Is anyone there?",
    "Do you have parking?",
    "How long will it take?",
    "What's the weather tomorrow?",
    "Can I speak to a person?",
    "Where is my order?",
    "Are you a robot?",
    "Wann fängt der Film an?",
    "Quelle heure est-il?",
    "Qué hora es?",
)
"""Questions a caller asks, closed with a question mark as a recognizer writes them: with
``turn.text_question_unfinished_p`` the model reads them, and one it reads under it waits for
the bound."""
CUT_QUESTIONS = (
    "Can you tell me?",
    "Can you?",
    "Could you check?",
    "Where is?",
    "Do you have?",
    "Can you send me?",
    "Could you tell me about?",
    "Is there?",
    "What is the?",
    "How do I?",
)
"""Questions cut by a pause, closed with a question mark as tiny.en writes some ("Can you tell
me?", "Can you?" on the extended turn-taking set): with ``turn.text_question_unfinished_p``
those the model reads under it wait for the bound; without it they end at the pause whenever
Smart Turn calls the pause complete."""
THRESHOLDS = (0.1, 0.05, 0.02, 0.01, 0.001)


def conversation(depth: int) -> Conversation:
    said: list[tuple[str, str]] = [("system", LLMSettings().system_prompt)]
    said.append(("assistant", GREETING))
    for user, bot in EXCHANGES[:depth]:
        said += [("user", user), ("assistant", bot)]
    return said


async def probe(llm: LLMSettings) -> dict[str, list[float]]:
    """p(end) per text and depth."""
    model = TextEndOfTurn(str(llm.base_url), llm.model, timeout_s=30.0)
    read: dict[str, list[float]] = {}
    try:
        for text in COMPLETE + CUT + QUESTIONS + CUT_QUESTIONS:
            for depth in DEPTHS:
                p = await model.probability(text, conversation(depth))
                if p is None:
                    raise RuntimeError(f"the model gave no answer on {text!r}")
                read.setdefault(text, []).append(p)
    finally:
        await model.close()
    return read


def vetoable(text: str) -> bool:
    """Whether the veto acts on these words: they ask, and the strategy does not leave them to
    the words rule (:func:`~agent.turns.adaptive_stop.beyond_the_veto`)."""
    return asks_for_answer(text) and not beyond_the_veto(text)


def per_depth(counts: list[int], of: int) -> str:
    return " / ".join(f"{n} of {of}" for n in counts)


def render(read: dict[str, list[float]], took_s: float) -> str:
    when = f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC"
    lines = [
        "## Where the veto should sit: p(end) on requests (`bench/text_end_probe.py`)",
        "",
        f"{when}, {describe()}, {took_s:.0f} s. SmolLM2-135M-Instruct Q4_1 behind llama.cpp's "
        "server (agent.local.llm_app) as the default profile runs it; the voice assistant's "
        "system prompt and greeting, then the exchanges of a scripted conversation. The default "
        f"threshold (`turn.text_unfinished_p`) is {TurnSettings().text_unfinished_p}.",
        "",
        *threshold_table(
            read,
            [text for text in COMPLETE if vetoable(text)],
            [text for text in CUT if vetoable(text)],
            ("complete requests held for the bound", "cut requests let end at the pause"),
        ),
        "",
        f"Each cell counts after {', '.join(map(str, DEPTHS))} exchanges.",
        "",
        "### Questions closed with a question mark (`turn.text_question_unfinished_p`)",
        "",
        "The veto leaves a question the recognizer closed with a question mark to the words "
        "(it ends at once when Smart Turn calls it complete), unless "
        "`turn.text_question_unfinished_p` is set: then one the model reads under it waits for "
        "the bound (`turn.unfinished_wait_s`). tiny.en closes some fragments so; the cost is "
        "on real questions the model reads as going on.",
        "",
        *threshold_table(
            read,
            list(QUESTIONS),
            list(CUT_QUESTIONS),
            ("complete questions that wait for the bound", "cut questions let end at the pause"),
        ),
        "",
        "Per text (0: no end mark among the model's 20 likeliest next tokens; the reading sums "
        "those that are):",
        "",
        f"| words | kind | {' | '.join(f'after {d} exchanges' for d in DEPTHS)} |",
        "|---|---|" + "---|" * len(DEPTHS),
    ]
    kinds = {
        **dict.fromkeys(COMPLETE, "complete"),
        **dict.fromkeys(CUT, "cut at a pause"),
        **dict.fromkeys(QUESTIONS, "complete question"),
        **dict.fromkeys(CUT_QUESTIONS, "question cut at a pause"),
    }
    for text, kind in kinds.items():
        if kind in ("complete", "cut at a pause") and not vetoable(text):
            kind += " (not the veto's: the words rule decides)"
        cells = " | ".join("0" if p == 0 else f"{p:.3f}" for p in read[text])
        lines.append(f"| {text} | {kind} | {cells} |")
    return "\n".join(lines) + "\n"


def threshold_table(
    read: dict[str, list[float]], complete: list[str], cut: list[str], labels: tuple[str, str]
) -> list[str]:
    """Per threshold, per depth: the complete texts it holds and the cut ones it lets end."""
    lines = [f"| threshold | {labels[0]} | {labels[1]} |", "|---|---|---|"]
    for threshold in THRESHOLDS:
        held = [sum(read[t][i] < threshold for t in complete) for i in range(len(DEPTHS))]
        let = [sum(read[t][i] >= threshold for t in cut) for i in range(len(DEPTHS))]
        lines.append(
            f"| {threshold} | {per_depth(held, len(complete))} | {per_depth(let, len(cut))} |"
        )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    started = time.monotonic()
    with peers.local_llm_running() as llm:
        read = asyncio.run(probe(llm))
    report = render(read, time.monotonic() - started)
    publish(report, None if args.no_write else RESULTS_MD)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
