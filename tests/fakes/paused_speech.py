"""Test speech with the pauses people make, for turn-taking: the offline voice (Piper) speaks
each phrase, and silences of human lengths go between them.

Synthetic voices speak a sentence without a break, so a 200 ms end-of-turn wait never cuts
them off; people pause 300-900 ms inside sentences (clauses, hesitations, lists, digits read
one by one) and every such pause ended the turn in a real call. Each :class:`Utterance` knows
where its turn really ends (after its last phrase) and whether it is a complete question the
bot should answer at once. The pause lengths are drawn once from a fixed seed: every clone and
every run hears the same set.

Beside it (:func:`extended`), for the multilingual, short-turn bench: English short commands,
complete statements and unfinished ones with a pause (Piper), and the same kinds of turn in
German, French and Spanish, spoken by espeak-ng's voices for them; and (:func:`other_languages`)
the same kinds of turn in Italian, Portuguese and Dutch.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cache

import numpy as np

from tests.fakes.speech import speech_at

TRIM_PEAK = 300
"""Phrase audio is trimmed to its first and last sample louder than this (of 32767), so a
pause is exactly as long as declared."""


@dataclass(frozen=True, slots=True)
class Utterance:
    """One user turn: phrases with the pauses between them (``len(pauses) == len(phrases) - 1``)."""

    kind: str
    phrases: tuple[str, ...]
    pauses_s: tuple[float, ...]
    complete_question: bool = False
    """A complete turn (a question, a request, a command, a finished statement): the answer
    should start at once after it."""
    voice: str = "piper"
    """Who speaks it: ``piper`` (English) or ``espeak:LANG`` (:func:`tests.fakes.speech.speak`)."""
    language: str = "en"

    @property
    def text(self) -> str:
        return " ".join(self.phrases)

    def audio(self, sample_rate: int) -> tuple[bytes, float]:
        """PCM16 mono at ``sample_rate``, and the second at which the turn really ends."""
        audio = np.concatenate(self._parts(sample_rate))
        return audio.tobytes(), len(audio) / sample_rate

    def phrase_ends_s(self, sample_rate: int) -> list[float]:
        """Where each phrase ends in :meth:`audio`, in seconds from its first sample."""
        return [end for _, end in self.phrase_spans_s(sample_rate)]

    def phrase_spans_s(self, sample_rate: int) -> list[tuple[float, float]]:
        """Where each phrase starts and ends in :meth:`audio`, in seconds from its first
        sample."""
        bounds = np.cumsum([0, *(len(part) for part in self._parts(sample_rate))])
        return [
            (float(bounds[i]) / sample_rate, float(bounds[i + 1]) / sample_rate)
            for i in range(0, len(bounds) - 1, 2)
        ]

    def _parts(self, sample_rate: int) -> list[np.ndarray]:
        """The phrases' samples with the pauses' silence between them, in order."""
        parts: list[np.ndarray] = []
        for index, phrase in enumerate(self.phrases):
            parts.append(_trimmed(phrase, sample_rate, self.voice))
            if index < len(self.pauses_s):
                parts.append(np.zeros(int(self.pauses_s[index] * sample_rate), np.int16))
        return parts

    @property
    def longest_pause_s(self) -> float:
        return max(self.pauses_s, default=0.0)


def phrase_audio(phrase: str, sample_rate: int, voice: str = "piper") -> np.ndarray:
    """One phrase as the set speaks it: PCM16 samples, trimmed to its first and last loud one."""
    return _trimmed(phrase, sample_rate, voice)


Script = tuple[str, tuple[str, ...], bool]
"""One utterance to speak: its kind, its phrases (a pause between each two), whether it is a
complete turn."""
Scripts = dict[str, tuple[Script, ...]]
"""Utterances per language (``en``, or an espeak-ng voice's language)."""


@cache
def _trimmed(phrase: str, sample_rate: int, voice: str = "piper") -> np.ndarray:
    samples = np.frombuffer(speech_at(phrase, sample_rate, voice=voice), np.int16)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > TRIM_PEAK)
    return samples[loud[0] : loud[-1] + 1] if loud.size else samples


_SCRIPTS: tuple[Script, ...] = (
    ("clauses", ("i would like to book a table", "for two people", "tomorrow at eight"), False),
    ("clauses", ("when you get a moment", "could you check my last order"), False),
    ("hesitation", ("so", "i was wondering", "if you could help me with my bill"), False),
    ("hesitation", ("um", "what was it", "oh right the delivery address"), False),
    ("list", ("i need apples", "bread", "milk", "and some coffee"), False),
    ("digits", ("my number is five", "five", "five", "one two", "three four"), False),
    (
        "long sentence",
        (
            "yesterday after work",
            "when i finally got home",
            "after picking up the kids",
            "i noticed that the heating was off",
            "again",
        ),
        False,
    ),
    ("question", ("what time is it",), True),
    ("question", ("is the store open today",), True),
    ("question", ("can you call me back tomorrow",), True),
)


@cache
def utterances(seed: int = 14) -> tuple[Utterance, ...]:
    """The whole set, pauses drawn from 300-900 ms with a fixed seed."""
    rng = random.Random(seed)
    return tuple(
        Utterance(
            kind,
            phrases,
            tuple(round(rng.uniform(0.3, 0.9), 2) for _ in phrases[1:]),
            complete,
        )
        for kind, phrases, complete in _SCRIPTS
    )


_MORE: Scripts = {
    "en": (
        ("command", ("stop",), True),
        ("command", ("cancel it",), True),
        ("answer", ("yes",), True),
        ("answer", ("no",), True),
        ("statement", ("i would like to book a table for two people",), True),
        ("unfinished", ("i would like to", "book a table for two"), False),
        ("unfinished", ("book a table", "for two"), False),
    ),
    "de": (
        ("question", ("wann fängt der film an",), True),
        ("command", ("stopp",), True),
        ("answer", ("nein",), True),
        ("statement", ("ich möchte einen tisch für zwei personen reservieren",), True),
        ("unfinished", ("ich möchte einen tisch", "für zwei personen reservieren"), False),
    ),
    "fr": (
        ("question", ("quelle heure est il",), True),
        ("command", ("arrêtez",), True),
        ("answer", ("oui",), True),
        ("statement", ("je voudrais réserver une table pour deux personnes",), True),
        ("unfinished", ("je voudrais réserver", "une table pour deux personnes"), False),
    ),
    "es": (
        ("question", ("qué hora es",), True),
        ("command", ("para",), True),
        ("answer", ("sí",), True),
        ("statement", ("quisiera reservar una mesa para dos personas",), True),
        ("unfinished", ("quisiera reservar", "una mesa para dos personas"), False),
    ),
}
"""Per language: short commands and answers, a finished statement, and a sentence with a pause
inside it, which must not be answered at the pause."""

_REQUESTS: Scripts = {
    "en": (
        ("request", ("please cancel my taxi",), True),
        ("request", ("send me the receipt",), True),
        ("request", ("turn on the lights in the kitchen",), True),
        ("unfinished", ("can you tell me", "the opening hours"), False),
    ),
    "de": (("request", ("rufen sie mich morgen zurück",), True),),
    "fr": (("request", ("rappelez moi demain matin",), True),),
    "es": (("request", ("por favor llámame mañana",), True),),
}
"""Per language: requests of three words or more without a question mark, where the words rule
and the text model's veto act, and a request cut by a pause after words that ask ("can you tell
me"). After :data:`_MORE` in the set, so that its utterances keep their pauses."""

_TWO_WORD_STARTS: Scripts = {
    "en": (("unfinished", ("can you", "check my last order"), False),),
    "de": (("unfinished", ("ich möchte", "einen kaffee bestellen"), False),),
    "fr": (("unfinished", ("je veux", "un café s'il vous plaît"), False),),
    "es": (("unfinished", ("me gustaría", "un café por favor"), False),),
}
"""Per language: a sentence with a pause after its first two words, which the recognizer
closes ("Can you.", "Ich möchte.") and the words rule reads as a short command. Last in the
set, so that the utterances before keep their pauses."""

LANGUAGES = ("en", *(language for language in _MORE if language != "en"))

_OTHER_LANGUAGES: Scripts = {
    "it": (
        ("question", ("a che ora apre il negozio",), True),
        ("command", ("basta",), True),
        ("answer", ("sì",), True),
        ("statement", ("vorrei prenotare un tavolo per due persone",), True),
        ("unfinished", ("vorrei prenotare", "un tavolo per due persone"), False),
        ("request", ("mi richiami domani mattina",), True),
        ("unfinished", ("mi piacerebbe", "un caffè per favore"), False),
    ),
    "pt": (
        ("question", ("a que horas abre a loja",), True),
        ("command", ("pare",), True),
        ("answer", ("sim",), True),
        ("statement", ("eu gostaria de reservar uma mesa para duas pessoas",), True),
        ("unfinished", ("eu gostaria de reservar", "uma mesa para duas pessoas"), False),
        ("request", ("ligue me amanhã de manhã",), True),
        ("unfinished", ("eu quero", "um café por favor"), False),
    ),
    "nl": (
        ("question", ("hoe laat gaat de winkel open",), True),
        ("command", ("stop",), True),
        ("answer", ("ja",), True),
        ("statement", ("ik wil graag een tafel voor twee personen reserveren",), True),
        ("unfinished", ("ik wil graag een tafel", "voor twee personen reserveren"), False),
        ("request", ("bel me morgenochtend terug",), True),
        ("unfinished", ("ik wil", "een koffie alstublieft"), False),
    ),
}
"""More of the languages Voxtral writes (Italian, Portuguese, Dutch), the same kinds of turn as
the extended set's German, French and Spanish, in a set of their own
(:func:`other_languages`), so the extended set and every figure published on it stay as they
are."""

_OTHER_HESITATIONS: Scripts = {
    "it": (("hesitation", ("allora", "a che ora chiude il negozio"), False),),
    "pt": (("hesitation", ("então", "a que horas fecha a loja"), False),),
    "nl": (("hesitation", ("nou", "hoe laat gaat de winkel dicht"), False),),
}
"""Per language: a filler, a pause, then a question (English's "um... what was it"): the
filler alone must not end the turn. After :data:`_OTHER_LANGUAGES`, so that its utterances keep
their pauses."""

_OTHER_GREETINGS: Scripts = {
    "it": (("greeting", ("buongiorno", "a che ora apre la farmacia"), False),),
    "pt": (("greeting", ("bom dia", "a que horas abre a farmácia"), False),),
    "nl": (("greeting", ("goedemorgen", "hoe laat gaat de apotheek open"), False),),
}
"""Per language: a greeting, a pause, then the question ("Hello there... can you tell me"):
people greet and go on, so the greeting alone must not end the turn. After
:data:`_OTHER_HESITATIONS`, so that the utterances before keep their pauses."""

OTHER_LANGUAGES = tuple(_OTHER_LANGUAGES)

_CALLS_FOR_ATTENTION: Scripts = {
    "en": (
        ("attention", ("excuse me", "where is the nearest pharmacy"), False),
        ("attention", ("sorry", "can you say that again"), False),
    ),
    "de": (
        ("attention", ("entschuldigung", "wo ist die nächste apotheke"), False),
        ("attention", ("entschuldigen sie", "können sie das wiederholen"), False),
    ),
    "fr": (
        ("attention", ("excusez moi", "où est la pharmacie la plus proche"), False),
        ("attention", ("pardon", "pouvez vous répéter"), False),
    ),
    "es": (
        ("attention", ("perdone", "dónde está la farmacia más cercana"), False),
        ("attention", ("disculpe", "puede repetirlo"), False),
    ),
    "it": (
        ("attention", ("mi scusi", "dov'è la farmacia più vicina"), False),
        ("attention", ("scusa", "puoi ripetere"), False),
    ),
    "pt": (
        ("attention", ("com licença", "onde fica a farmácia mais próxima"), False),
        ("attention", ("desculpe", "pode repetir"), False),
    ),
    "nl": (
        ("attention", ("pardon", "waar is de dichtstbijzijnde apotheek"), False),
        ("attention", ("sorry", "kunt u dat herhalen"), False),
    ),
}
"""Per language of :data:`LANGUAGES` and :data:`OTHER_LANGUAGES`: a call for attention, a
pause, then what the caller wants ("Excuse me... where is the nearest pharmacy"): people say
it and go on, so it alone must not end the turn. A set of its own (:func:`calls_for_attention`),
so the other sets and every figure published on them stay as they are."""

ATTENTION_LANGUAGES = tuple(_CALLS_FOR_ATTENTION)

_EAST_ASIAN: Scripts = {
    "zh": (
        ("hesitation", ("那个", "你们几点开门"), False),
        ("unfinished", ("我想要一杯咖啡和", "一块蛋糕"), False),
        ("answer", ("好的",), True),
        ("question", ("你们几点开门",), True),
    ),
    "ja": (
        ("hesitation", ("あの", "なんじに あきますか"), False),
        ("unfinished", ("コーヒーを", "ふたつ ください"), False),
        ("answer", ("はい",), True),
        ("question", ("なんじに あきますか",), True),
    ),
    "ko": (
        ("hesitation", ("음", "몇 시에 문을 열어요"), False),
        ("unfinished", ("커피 그리고", "케이크 주세요"), False),
        ("answer", ("네",), True),
        ("question", ("몇 시에 문을 열어요",), True),
    ),
}
"""Chinese, Japanese and Korean (espeak-ng's voices; Japanese in kana, which its voice reads):
a hesitation before the question ("那个... 你们几点开门"), a sentence paused on a conjunction or
a particle ("コーヒーを... ふたつ ください"), a one-word answer and a question. Chinese and
Japanese are written without spaces (the rules find their words with BudouX's model)."""

EAST_ASIAN_LANGUAGES = tuple(_EAST_ASIAN)

_EAST_ASIAN_COMMANDS: Scripts = {
    "zh": (
        ("command", ("不用了",), True),  # "No need."
        ("command", ("停下来",), True),  # "Stop."
        ("command", ("等一下",), True),  # "Wait a moment."
        ("unfinished", ("我想要", "两杯咖啡"), False),  # "I'd like... two coffees"
        ("unfinished", ("明天的", "会议取消了"), False),  # "Tomorrow's... meeting is off"
        ("unfinished", ("那么", "几点开门"), False),  # "So... what time do you open"
    ),
    "ja": (
        ("command", ("やめて",), True),  # "Stop it."
        ("command", ("キャンセルして",), True),  # "Cancel it."
        ("command", ("けっこうです",), True),  # "No, thank you."
        ("unfinished", ("あしたの", "よやくを キャンセルしてください"), False),  # "Tomorrow's..."
        ("unfinished", ("コーヒーと", "ケーキを ください"), False),  # "Coffee and... cake, please"
        ("unfinished", ("それで", "なんじに あきますか"), False),  # "And then... when do you open"
    ),
}
"""Chinese and Japanese commands of three characters or more, and starts of one or two words
that go on after a pause, which the short-command rule must not answer ("明天的...",
"tomorrow's..."; "コーヒーと...", "coffee and...")."""

EAST_ASIAN_COMMAND_LANGUAGES = tuple(_EAST_ASIAN_COMMANDS)

_MORE_SCRIPTS: Scripts = {
    "ru": (
        ("hesitation", ("ну", "во сколько вы открываетесь"), False),
        ("unfinished", ("я хочу кофе и", "кусок торта"), False),
        ("answer", ("да",), True),
        ("question", ("во сколько вы открываетесь",), True),
    ),
    "ar": (
        ("hesitation", ("يعني", "متى تفتحون"), False),
        ("unfinished", ("أريد قهوة و", "قطعة كعك"), False),
        ("answer", ("نعم",), True),
        ("question", ("متى تفتحون",), True),
    ),
    "hi": (
        ("hesitation", ("तो", "आप कितने बजे खुलते हैं"), False),
        ("unfinished", ("मुझे कॉफ़ी और", "केक चाहिए"), False),
        ("answer", ("हाँ",), True),
        ("question", ("आप कितने बजे खुलते हैं",), True),
    ),
}
"""Russian, Arabic and Hindi (espeak-ng's voices), as :data:`_EAST_ASIAN`: a filler before the
question ("ну...", "يعني...", "तो..."), a sentence paused on "and", an answer and a question."""

MORE_SCRIPTS_LANGUAGES = tuple(_MORE_SCRIPTS)


_UNMARKED_QUESTIONS: Scripts = {
    "en": (
        ("unmarked question", ("where is the nearest pharmacy",), True),
        ("unmarked question", ("do you deliver on sundays",), True),
        ("unfinished", ("where i live", "the shops close early"), False),
    ),
    "de": (
        ("unmarked question", ("wo ist die nächste apotheke",), True),
        ("unmarked question", ("ist das der zug nach berlin",), True),
        ("unfinished", ("was ich sagen wollte", "der termin passt nicht"), False),
    ),
    "fr": (
        ("unmarked question", ("où est la pharmacie la plus proche",), True),
        ("unmarked question", ("est-ce que vous êtes ouverts demain",), True),
        ("unfinished", ("quand je suis arrivé", "il n'y avait personne"), False),
    ),
    "es": (
        ("unmarked question", ("dónde está la farmacia más cercana",), True),
        ("unmarked question", ("tienen mesa para dos esta noche",), True),
        ("unfinished", ("cuando llegué al hotel", "no había nadie"), False),
    ),
    "it": (
        ("unmarked question", ("dov'è la farmacia più vicina",), True),
        ("unmarked question", ("quanto costa un biglietto",), True),
        ("unfinished", ("quando sono arrivato", "non c'era nessuno"), False),
    ),
    "pt": (
        ("unmarked question", ("onde fica a farmácia mais próxima",), True),
        ("unmarked question", ("quanto custa um bilhete",), True),
        ("unfinished", ("quando eu cheguei", "não havia ninguém"), False),
    ),
    "nl": (
        ("unmarked question", ("waar is de dichtstbijzijnde apotheek",), True),
        ("unmarked question", ("hoeveel kost een kaartje",), True),
        ("unfinished", ("wat ik wilde zeggen", "de afspraak past niet"), False),
    ),
    "ru": (
        ("unmarked question", ("где ближайшая аптека",), True),
        ("unmarked question", ("можно ли заказать столик",), True),
        ("unfinished", ("когда я пришёл", "никого не было"), False),
    ),
    "ar": (
        ("unmarked question", ("أين أقرب صيدلية",), True),
        ("unmarked question", ("هل أنتم مفتوحون غدا",), True),
        ("unfinished", ("عندما وصلت إلى الفندق", "لم يكن هناك أحد"), False),
    ),
    "hi": (
        ("unmarked question", ("सबसे नज़दीकी दवाखाना कहाँ है",), True),
        ("unmarked question", ("क्या आप कल खुले हैं",), True),
        ("unfinished", ("जब मैं होटल पहुँचा", "वहाँ कोई नहीं था"), False),
    ),
    "zh": (
        ("unmarked question", ("最近的药店在哪里",), True),  # "Where is the nearest pharmacy"
        ("unmarked question", ("你们明天开门吗",), True),  # "Are you open tomorrow"
        (
            "unfinished",
            ("你们有什么", "素食的菜吗"),
            False,
        ),  # "Do you have any... vegetarian dishes"
    ),
    "ja": (
        ("unmarked question", ("いちばん ちかい やっきょくは どこですか",), True),
        ("unmarked question", ("あしたは あいてますか",), True),  # "Are you open tomorrow"
        ("unfinished", ("ホットの コーヒーか", "こうちゃを ください"), False),  # "Coffee or... tea"
    ),
    "ko": (
        ("unmarked question", ("가장 가까운 약국이 어디예요",), True),
        ("unmarked question", ("내일 문을 엽니까",), True),  # "Are you open tomorrow"
        (
            "unfinished",
            ("비가 오니까", "우산을 가져가세요"),
            False,
        ),  # "As it rains... take an umbrella"
    ),
}
"""Per language: a question by its interrogative and a yes/no question, which the recognizer
wrote without their question mark (the stand-in closes an "unmarked question" with a full stop),
and a start that goes on after a pause, opened by a relative or subordinating word ("where I
live...", "quand je suis arrivé...") or ending on one that looks like a question's ("你们有什么...",
"コーヒーか...", "비가 오니까..."): the question forms must not answer it at its pause."""

UNMARKED_QUESTION_LANGUAGES = tuple(_UNMARKED_QUESTIONS)


def _spoken(scripts: Scripts, rng: random.Random) -> tuple[Utterance, ...]:
    """Each language's scripts as utterances in its voice (espeak-ng's but for English), the
    pauses drawn from 300-900 ms in order."""
    return tuple(
        Utterance(
            kind,
            phrases,
            tuple(round(rng.uniform(0.3, 0.9), 2) for _ in phrases[1:]),
            complete,
            voice="piper" if language == "en" else f"espeak:{language}",
            language=language,
        )
        for language, language_scripts in scripts.items()
        for kind, phrases, complete in language_scripts
    )


@cache
def extended(seed: int = 20) -> tuple[Utterance, ...]:
    """The paused-speech set (English) and, per language of :data:`LANGUAGES`, short turns,
    requests, statements and paused sentences (two-word starts among them); pauses drawn from
    300-900 ms with a fixed seed."""
    rng = random.Random(seed)
    more = tuple(
        utterance
        for more_of in (_MORE, _REQUESTS, _TWO_WORD_STARTS)
        for utterance in _spoken(more_of, rng)
    )
    return utterances() + more


@cache
def other_languages(seed: int = 22) -> tuple[Utterance, ...]:
    """The extended set's kinds of turn in :data:`OTHER_LANGUAGES`, and a hesitation and a
    greeting before a question in each, pauses drawn from 300-900 ms with a fixed seed."""
    rng = random.Random(seed)
    return tuple(
        utterance
        for scripts in (_OTHER_LANGUAGES, _OTHER_HESITATIONS, _OTHER_GREETINGS)
        for utterance in _spoken(scripts, rng)
    )


@cache
def calls_for_attention(seed: int = 23) -> tuple[Utterance, ...]:
    """:data:`_CALLS_FOR_ATTENTION` in seven languages, pauses drawn from 300-900 ms with a
    fixed seed."""
    return _spoken(_CALLS_FOR_ATTENTION, random.Random(seed))


@cache
def east_asian(seed: int = 24) -> tuple[Utterance, ...]:
    """:data:`_EAST_ASIAN`, pauses drawn from 300-900 ms with a fixed seed."""
    return _spoken(_EAST_ASIAN, random.Random(seed))


@cache
def east_asian_commands(seed: int = 26) -> tuple[Utterance, ...]:
    """:data:`_EAST_ASIAN_COMMANDS`, pauses drawn from 300-900 ms with a fixed seed."""
    return _spoken(_EAST_ASIAN_COMMANDS, random.Random(seed))


@cache
def more_scripts(seed: int = 25) -> tuple[Utterance, ...]:
    """:data:`_MORE_SCRIPTS`, pauses drawn from 300-900 ms with a fixed seed."""
    return _spoken(_MORE_SCRIPTS, random.Random(seed))


@cache
def unmarked_questions(seed: int = 27) -> tuple[Utterance, ...]:
    """:data:`_UNMARKED_QUESTIONS`, pauses drawn from 300-900 ms with a fixed seed."""
    return _spoken(_UNMARKED_QUESTIONS, random.Random(seed))
