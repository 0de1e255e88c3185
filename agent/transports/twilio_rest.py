"""The two calls we make to Twilio's REST API: create a call, and change a live one.

Both are ``POST`` to the 2010-04-01 Calls resource, form-encoded, with HTTP Basic auth
``AccountSid:AuthToken`` (twilio.com/docs/voice/api/call-resource):

- create: ``/2010-04-01/Accounts/{AccountSid}/Calls.json`` with ``To``, ``From``, ``Url`` (or
  ``Twiml``) and ``MachineDetection``; Twilio answers 201 and the call resource (``sid`` …).
- update: ``/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json`` with ``Twiml``; Twilio
  stops the TwiML the call is running (our ``<Connect><Stream>``: it sends ``stop`` and closes
  the media stream) and runs the new one (a transfer's ``<Dial>``).

Errors come back as Twilio's JSON (``code``, ``message``, ``more_info``, ``status``) and are
raised as :class:`TwilioRESTError`. A request opens its own HTTP client: these are a few
requests per call, not per frame.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import escape, quoteattr

import httpx

API_VERSION = "2010-04-01"
REQUEST_TIMEOUT_S = 10.0


class TwilioRESTError(RuntimeError):
    """Twilio refused a request, or could not be reached; the message says which and why."""

    def __init__(self, message: str, *, status: int | None = None, code: int | None = None):
        super().__init__(message)
        self.status = status
        self.code = code


class TwilioREST:
    """A client for the Calls resource of one Twilio account."""

    def __init__(self, *, account_sid: str, auth_token: str, base_url: str) -> None:
        self._account_sid = account_sid
        self._auth = httpx.BasicAuth(account_sid, auth_token)
        self._calls_url = f"{base_url.rstrip('/')}/{API_VERSION}/Accounts/{account_sid}/Calls"

    async def create_call(
        self,
        *,
        to: str,
        from_: str,
        url: str | None = None,
        twiml: str | None = None,
        machine_detection: str | None = None,
    ) -> dict[str, Any]:
        """Start an outbound call; Twilio fetches ``url`` (or runs ``twiml``) once answered.

        Raises:
            TwilioRESTError: Twilio refused it (bad number, bad credentials …) or is unreachable.
        """
        form = {"To": to, "From": from_}
        if url is not None:
            form["Url"] = url
        if twiml is not None:
            form["Twiml"] = twiml
        if machine_detection and machine_detection != "none":
            form["MachineDetection"] = machine_detection
        return await self._post(f"{self._calls_url}.json", form)

    async def update_call(self, call_sid: str, *, twiml: str) -> dict[str, Any]:
        """Replace the TwiML a live call runs (a transfer: ``<Dial>``).

        Raises:
            TwilioRESTError: Twilio refused it (the call is over, bad credentials …) or is
                unreachable.
        """
        return await self._post(f"{self._calls_url}/{call_sid}.json", {"Twiml": twiml})

    async def _post(self, url: str, form: dict[str, str]) -> dict[str, Any]:
        try:
            async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_S) as http:
                response = await http.post(url, data=form, auth=self._auth)
        except httpx.HTTPError as exc:
            raise TwilioRESTError(
                f"cannot reach Twilio's REST API at {url}: {exc!r} (check "
                "twilio.api_base_url and the network)"
            ) from exc
        try:
            body = response.json()
        except ValueError:
            body = {}
        if response.status_code >= 400:
            message = body.get("message") if isinstance(body, dict) else None
            code = body.get("code") if isinstance(body, dict) else None
            hint = (
                " (check twilio.account_sid and twilio.auth_token)"
                if response.status_code == 401
                else ""
            )
            raise TwilioRESTError(
                f"Twilio answered {response.status_code}"
                f"{f' ({code})' if code else ''}: {message or response.text[:200]}{hint}",
                status=response.status_code,
                code=code if isinstance(code, int) else None,
            )
        if not isinstance(body, dict):
            raise TwilioRESTError(f"Twilio answered {response.status_code} without a call resource")
        return body


# ---------------------------------------------------------------------------- TwiML


def is_sip_uri(destination: str) -> bool:
    return destination.lower().startswith(("sip:", "sips:"))


def twiml_dial(destination: str, *, whisper_url: str | None = None) -> str:
    """``<Dial>`` to a number or a SIP URI; ``whisper_url`` is TwiML the person who answers
    hears before the caller is connected (Twilio's ``url`` attribute of ``<Number>``/``<Sip>``)."""
    noun = "Sip" if is_sip_uri(destination) else "Number"
    url = f" url={quoteattr(whisper_url)}" if whisper_url else ""
    return (
        '<?xml version="1.0" encoding="UTF-8"?><Response><Dial>'
        f"<{noun}{url}>{escape(destination)}</{noun}></Dial></Response>"
    )


def twiml_say(text: str) -> str:
    return f'<?xml version="1.0" encoding="UTF-8"?><Response><Say>{escape(text)}</Say></Response>'
