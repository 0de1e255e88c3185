"""``voice-agent call +15550100 [--from +15550199] [--interpreter-session ID --party agent]``:
have the running server call someone (with a session: as that party of an interpreted session).

The command asks the server (``POST /calls/outbound`` with the profile's ``server.api_token``)
rather than Twilio directly, so the call counts against the server's ``server.max_calls`` and
its media stream lands on the server that placed it. It prints the new call (JSON) and exits.
Exit status: 0 the call was placed (it is ringing), 2 bad arguments or refused by the server
(bad number, no caller ID, no Twilio credentials, an unknown or taken interpreted session), 3
server unreachable, 4 not authorized (or the operator API is off), 5 the server is busy or
Twilio refused the call.
"""

from __future__ import annotations

import argparse
import json
import sys

import httpx

from agent.config import ConfigError, load_settings

EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_UNAUTHORIZED, EXIT_REFUSED = 0, 2, 3, 4, 5


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent call",
        description="Place an outbound phone call through the running server (Twilio).",
    )
    parser.add_argument("to", help="the number to call (E.164, e.g. +15550100) or a SIP URI")
    parser.add_argument(
        "--from", dest="from_", help="caller ID: one of your Twilio numbers (twilio.from_number)"
    )
    parser.add_argument(
        "--interpreter-session",
        help="dial the callee into this interpreted session (POST /interpreter/sessions)",
    )
    parser.add_argument(
        "--party",
        choices=("caller", "agent"),
        help="which party of the interpreted session the callee is",
    )
    parser.add_argument(
        "--server", help="the server's base URL (default: http://server.host:server.port)"
    )
    parser.add_argument("--token", help="the operator API token (default: server.api_token)")
    parser.add_argument("--profile", help="settings profile (default, vllm, sagemaker)")
    return parser


def main(argv: list[str]) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if (args.interpreter_session is None) != (args.party is None):
        parser.error("--interpreter-session and --party go together")
    try:
        settings = load_settings(args.profile)
    except ConfigError as exc:
        print(f"voice-agent call: {exc}", file=sys.stderr)
        return EXIT_USAGE
    server = args.server or f"http://{settings.server.host}:{settings.server.port}"
    token = args.token or settings.server.api_token
    if not token:
        print(
            "voice-agent call: no operator token; set server.api_token "
            "(VOICE_AGENT_SERVER__API_TOKEN) on the server and here, or pass --token",
            file=sys.stderr,
        )
        return EXIT_USAGE
    body = {"to": args.to, **({"from": args.from_} if args.from_ else {})}
    if args.interpreter_session:
        body |= {"interpreter_session": args.interpreter_session, "party": args.party}
    try:
        response = httpx.post(
            f"{server.rstrip('/')}/calls/outbound",
            json=body,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )
    except httpx.HTTPError as exc:
        print(f"voice-agent call: cannot reach the server at {server}: {exc}", file=sys.stderr)
        return EXIT_UNREACHABLE
    if response.status_code == 201:
        print(json.dumps(response.json(), indent=2))
        return EXIT_OK
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    print(f"voice-agent call: {response.status_code}: {detail}", file=sys.stderr)
    api_off = response.status_code == 404 and not args.interpreter_session  # else: no session
    if response.status_code == 401 or api_off:
        return EXIT_UNAUTHORIZED
    if response.status_code in (502, 503):
        return EXIT_REFUSED
    return EXIT_USAGE
