"""The test speech cache is shared by parallel test workers."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.fakes import speech


@pytest.mark.parametrize("voice", ["piper", "espeak"])
def test_workers_making_the_same_sentence_at_once_all_read_the_whole_file(
    voice: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(speech, "CACHE_DIR", tmp_path)
    make = speech.speak.__wrapped__  # past the in-process cache, as separate workers are
    speech.piper_voice()  # loaded before the race, as each worker has its own
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda _: make("the same sentence", voice=voice), range(4)))

    assert all(audio == made[0] for audio in made)
    assert len(made[0].pcm) > 22_050  # over half a second of speech, not a torn file
    assert [p.suffix for p in tmp_path.iterdir()] == [".wav"]
