"""The playground's interpreted-session view in headless Chromium, against a phone caller.

The operator makes a session; the page, opened as ``/?interpreter_session=ID&party=agent``,
joins it as the agent (the two values go in the WebRTC offer's ``request_data``) and shows
that it waits for the caller; a Twilio-protocol caller joins and speaks an espeak sentence;
the page shows that the caller is there, then the caller's words and their translation as a
"peer" bubble; the caller hangs up and the page says so. Everything is read from the DOM.
The server, the fake caller and the translating chat fake are those of
``tests/pipelines/test_interpreter.py``. A screenshot is saved as
``playground_interpreter.png`` in the test's pytest tmp dir
(``bench/results/interpreter_playground.png``, shown in the README, is a copy of one).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from urllib.parse import urlencode

import pytest

from agent.interpreter.notices import PEER_LEFT
from tests.agent.playground.browser import (
    Browser,
    async_wait_for_page,
    open_playground,
    screenshot_card,
)
from tests.agent.transports.stack import async_wait_for, running_server
from tests.conftest import requires_chromium, requires_espeak
from tests.fakes.chat_server import ChatServer
from tests.fakes.speech import word_error_rate, write_wav
from tests.fakes.speech_server import SpeechServer
from tests.fakes.twilio_caller import ulaw_speech
from tests.pipelines.test_interpreter import (
    heard,
    in_french,
    interpreter_settings,
    is_notice,
    new_session,
    phone_party,
    translate,
)
from tests.pipelines.test_translation import SENTENCE, french

pytestmark = [requires_espeak, requires_chromium, pytest.mark.timeout(150)]

# Installed before Connect: every text the status line shows, in order (a status that is
# soon replaced is not missed between two polls).
WATCH_THE_STATUS = """
(() => {
const status = document.getElementById('status');
window.__statuses = [status.textContent];
new MutationObserver(() => {
  if (window.__statuses.at(-1) !== status.textContent) window.__statuses.push(status.textContent);
}).observe(status, {childList: true, characterData: true, subtree: true});
return true;
})()
"""

STATUS = "document.getElementById('status').textContent"

# What the page shows, for a failure's message.
SHOWN = (
    "({statuses: window.__statuses, error: document.getElementById('error').textContent, "
    "transcript: document.getElementById('transcript').innerText})"
)

# The other party's bubbles: [who, text, interim] each.
READ_THE_PEER = """
Array.from(document.querySelectorAll('.msg.peer')).map(e => [
  e.querySelector('.who').textContent, e.querySelector('.text').textContent,
  e.querySelector('.interim').textContent])
"""


async def test_the_playground_shows_an_interpreted_session_from_the_agents_side(
    asr_server_url: str, asr_model_name: str, tmp_path: Path
) -> None:
    with (
        ChatServer(script=translate) as chat,
        SpeechServer(voice="espeak") as tts,
        running_server(
            interpreter_settings(asr_server_url, asr_model_name, chat.base_url, tts.url)
        ) as (url, app),
        tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp,
    ):
        session = await new_session(url, caller_language="English", agent_language="French")
        sid = session["session_id"]
        # The agent says nothing: Chromium loops a silent microphone.
        mic = write_wav(Path(tmp) / "mic.wav", bytes(2 * 48_000 * 2), 48_000)
        browser = Browser("about:blank", mic, Path(tmp) / "profile")
        try:
            await browser.attach()
            query = urlencode({"interpreter_session": sid, "party": "agent"})
            await open_playground(browser, f"{url}/?{query}")
            assert await browser.js(WATCH_THE_STATUS)
            await browser.js("document.getElementById('connect').click()")
            await async_wait_for_page(
                browser,
                f"{STATUS} === 'Waiting for the caller (English)'",
                what="the page told to wait for the caller",
                timeout_s=30,
                show=SHOWN,
            )
            # The page joined as the agent of this session (its offer's request_data).
            (agent_call,) = app.state.registry.calls()
            assert agent_call.attributes == {
                **agent_call.attributes,
                "interpreter_session": sid,
                "party": "agent",
            }

            async with phone_party(url, 1, sid, "caller") as caller:
                async with caller.quiet():
                    await async_wait_for_page(
                        browser,
                        f"{STATUS} === 'With the caller (English)'",
                        what="the page told the caller joined",
                        timeout_s=30,
                        show=SHOWN,
                    )
                await caller.speak(ulaw_speech(SENTENCE))
                async with caller.quiet():
                    await async_wait_for_page(
                        browser,
                        "Array.from(document.querySelectorAll('.msg.peer')).some(e => "
                        "e.querySelector('.text').textContent.includes('demain matin') && "
                        "!e.querySelector('.interim').textContent)",
                        what="the caller's words and their translation",
                        timeout_s=45,
                        show=SHOWN,
                    )
                    peer = await browser.js(READ_THE_PEER)
                    (tmp_path / "playground_interpreter.png").write_bytes(
                        await screenshot_card(browser)
                    )
                # The caller hangs up: the page says the caller left.
                await caller.stop()
                await caller.ws.close()
            await async_wait_for_page(
                browser,
                f"{STATUS} === 'The caller left'",
                what="the page told the caller left",
                timeout_s=30,
                show=SHOWN,
            )
            # The agent's call ends once the notice is spoken, and the page hangs up.
            await async_wait_for(
                lambda: not app.state.registry.calls(), timeout_s=30, what="both calls ended"
            )
            await async_wait_for_page(
                browser,
                "document.getElementById('connect').textContent === 'Connect'",
                what="the page to end its call",
                timeout_s=30,
                show=SHOWN,
            )
            statuses = await browser.js("window.__statuses")
            final_status = await browser.js(STATUS)
            error = await browser.js("document.getElementById('error').textContent")
            button = await browser.js("document.getElementById('connect').textContent")
            bubbles = await browser.js(
                "Array.from(document.querySelectorAll('.msg')).map(e => e.className)"
            )
        finally:
            await browser.close()
    # One bubble, the caller's: "caller (English): <what the caller said> →" over its French.
    ((who, text, interim),) = peer
    prefix, arrow = "caller (English): ", " →"
    assert who.startswith(prefix) and who.endswith(arrow), who
    source = who.removeprefix(prefix).removesuffix(arrow)
    assert word_error_rate(SENTENCE, source) <= 0.2, who
    assert text == french([{"content": source}]), (text, source)
    assert interim == ""
    assert bubbles == ["msg peer"], bubbles
    (request,) = [r for r in chat.requests if not is_notice(r)]
    assert "from English into French" in request["messages"][0]["content"]
    # The status line went through the session's states, in order: once the session has a
    # state, the call's own "Connected" (which may come later) does not replace it, nor does
    # "Disconnected" when the server ends the call after the caller left.
    waiting = statuses.index("Waiting for the caller (English)")
    assert set(statuses[:waiting]) <= {"Disconnected", "Connecting…", "Connected"}, statuses
    assert statuses[waiting:] == [
        "Waiting for the caller (English)",
        "With the caller (English)",
        "The caller left",
    ], statuses
    # The call is over (the server ended it), and the page still says why, with no error.
    assert (final_status, error, button) == ("The caller left", "", "Connect"), statuses
    assert heard(agent_call).endswith(in_french(PEER_LEFT))  # the agent's language
