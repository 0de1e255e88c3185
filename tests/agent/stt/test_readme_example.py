"""The README's "Use the STT service in your own Pipecat bot" example runs as written, in a
plain Pipecat pipeline, without loading this app's settings."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import requires_espeak
from tests.fakes.speech import speech_at, word_error_rate, write_wav

ROOT = Path(__file__).resolve().parents[3]
SENTENCE = "what is the weather like in paris today"
APP_MODULES = ("agent.config", "pydantic_settings", "agent.server", "pipelines", "agent.fastpath")


def readme_example() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Use the STT service in your own Pipecat bot", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.S)
    assert match, "the README section has no python example"
    return match.group(1)


@requires_espeak
def test_the_readme_example_transcribes_a_file_without_the_app(
    asr_server_url: str, tmp_path: Path
) -> None:
    example = tmp_path / "transcribe_wav.py"
    example.write_text(readme_example(), encoding="utf-8")
    quiet = bytes(16_000)  # 0.5 s before the speech, as a recording has
    wav = write_wav(tmp_path / "speech.wav", quiet + speech_at(SENTENCE, 16_000), 16_000)
    check = (
        "import runpy, sys; "
        f"sys.argv = [{str(example)!r}, {asr_server_url!r}, {str(wav)!r}]; "
        f"runpy.run_path({str(example)!r}, run_name='__main__'); "
        f"loaded = [m for m in {APP_MODULES!r} if any(n == m or n.startswith(m + '.') "
        "for n in sys.modules)]; "
        "sys.exit(f'the plugin loaded app modules: {loaded}' if loaded else 0)"
    )
    result = subprocess.run(
        [sys.executable, "-c", check], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert word_error_rate(SENTENCE, result.stdout) <= 0.25, result.stdout
