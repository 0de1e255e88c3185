"""The ``voice-agent`` command: one entry point, one module per subcommand.

Each subcommand lives in its own module with a ``main(argv) -> int``, imported only when
used, so ``voice-agent transcribe`` never pays for the server's imports.
"""

from __future__ import annotations

import importlib
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("agent.serve", "run the voice-agent server with the playground"),
    "transcribe": ("agent.transcribe", "stream a WAV file through the realtime STT path"),
    "asr-server": ("agent.local.asr_server", "offline CPU recognizer speaking vLLM's /v1/realtime"),
    "captions": ("pipelines.captions", "live captions in the browser (Gradio)"),
    "deploy": ("agent.deploy", "deploy or delete the Voxtral SageMaker endpoint"),
    "drain": ("agent.drain", "drain a running server and wait until its calls end (preStop)"),
    "call": ("agent.call", "place an outbound phone call through the running server"),
}


def usage() -> str:
    lines = ["usage: voice-agent COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<12} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    lines += ["", "Run 'voice-agent COMMAND --help' for a command's options."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(usage())
        return 0 if args else 2
    command, rest = args[0], args[1:]
    if command not in COMMANDS:
        print(f"voice-agent: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    sys.exit(main())
