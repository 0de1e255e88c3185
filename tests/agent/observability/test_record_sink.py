"""The JSON Lines writer: one line per ended call in its day's file, and a full disk that
loses nothing without saying so.

The full disk is real: a 64 KiB tmpfs mounted in a private mount namespace
(``unshare -rm``), filled up, then freed.
"""

from __future__ import annotations

import calendar
import json
import shutil
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agent.calls import CallRegistry, CallTurn
from agent.observability.record_sink import RecordDirectoryError, RecordSink, record_file
from tests.conftest import requires_user_namespaces


async def test_each_ended_call_is_one_line_of_its_days_file(tmp_path: Path) -> None:
    registry = CallRegistry(max_calls=4)
    sink = RecordSink(tmp_path / "records")
    registry.when_ended(sink.write)
    first, second, running = (registry.reserve(k) for k in ("twilio", "webrtc", "twilio"))
    first.attributes["call_sid"] = "CA1"
    first.turns.append(CallTurn(index=1, user=["what time is it"], bot=["It is noon."]))
    first.end_because("caller hung up")
    first.release()
    second.release()
    await sink.close()

    (day_file,) = (tmp_path / "records").iterdir()
    assert day_file == record_file(tmp_path / "records", first.ended_at or 0)
    assert stat.S_IMODE(day_file.stat().st_mode) == 0o600  # it holds what callers said
    lines = [json.loads(line) for line in day_file.read_text().splitlines()]
    assert [line["id"] for line in lines] == [first.id, second.id]
    assert lines[0] == first.as_record()
    assert lines[0]["end_reason"] == "caller hung up" and lines[1]["end_reason"] == "ended"
    assert lines[0]["turns"][0]["user"] == "what time is it"
    assert running.id not in day_file.read_text()
    running.release()  # after close: refused with an error, never raised


def test_the_day_is_the_utc_day_the_call_ended(tmp_path: Path) -> None:
    late = calendar.timegm((2026, 12, 3, 23, 59, 59, 0, 0, 0))
    assert record_file(tmp_path, late).name == "calls-2026-12-03.jsonl"
    assert record_file(tmp_path, late + 1).name == "calls-2026-12-04.jsonl"


def test_an_unusable_directory_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    with pytest.raises(RecordDirectoryError, match="VOICE_AGENT_RECORDS__DIRECTORY"):
        RecordSink(blocker / "records")


FULL_DISK = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from pathlib import Path
    from loguru import logger
    from agent.calls import CallRegistry, CallTurn
    from agent.observability.record_sink import RecordSink

    errors = []
    logger.remove()
    logger.add(lambda m: errors.append(m.record["message"]), level="ERROR")
    disk = Path(sys.argv[1])

    async def main():
        registry = CallRegistry(max_calls=10)
        failures = []
        sink = RecordSink(disk / "records", on_error=lambda: failures.append(1))
        registry.when_ended(sink.write)

        def end(words):
            call = registry.reserve("twilio")
            call.turns.append(CallTurn(index=1, user=[words]))
            call.release()
            return call.id

        first = end("short")
        await asyncio.sleep(0.5)
        filler = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)  # fill the disk...
        try:
            while os.write(filler, b"x" * 4096):
                pass
        except OSError:
            pass
        os.close(filler)
        os.truncate(disk / "filler", os.path.getsize(disk / "filler") - 4096)  # ...but 4 KiB
        day_file = next((disk / "records").iterdir())
        before = day_file.read_bytes()
        refused = end("y" * 20000)  # a line larger than the space left
        await asyncio.sleep(0.5)
        after_failure = day_file.read_bytes()
        os.unlink(disk / "filler")
        last = end("after the disk was freed")
        await sink.close()
        lines = [json.loads(line)["id"] for line in day_file.read_text().splitlines()]
        print(json.dumps({
            "ids": [first, refused, last], "lines": lines, "errors": errors,
            "failures": len(failures), "intact": after_failure == before,
        }))

    asyncio.run(main())
    """
)


@requires_user_namespaces  # to mount a small tmpfs
def test_a_full_disk_loses_no_record_and_says_so(tmp_path: Path) -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None
    disk = tmp_path / "disk"
    disk.mkdir()
    script = tmp_path / "full_disk.py"
    script.write_text(FULL_DISK)
    root = Path(__file__).resolve().parents[3]
    done = subprocess.run(
        [
            unshare,
            "-rm",
            "sh",
            "-c",
            f'mount -t tmpfs -o size=64k tmpfs "{disk}" && exec "{sys.executable}" '
            f'"{script}" "{disk}"',
        ],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.splitlines()[-1])
    first, refused, last = result["ids"]
    assert result["intact"], "a failed write left part of a line behind"
    assert result["failures"] >= 1
    assert any(
        refused in error and "not written" in error and "free space" in error
        for error in result["errors"]
    ), result["errors"]
    assert result["lines"] == [first, refused, last]  # written, in order, once space came back
    assert not any("LOST" in error or "lost" in error for error in result["errors"])
