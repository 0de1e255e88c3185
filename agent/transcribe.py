"""``voice-agent transcribe FILE.wav``: stream a WAV file through the realtime STT path.

Interim text goes to stderr, the final transcript is the last line of stdout (``--json``: one
JSON object per event on stdout). Exit status: 0 transcript printed, 2 bad arguments or not an
audio file, 3 endpoint unreachable (also: lost mid-way and not back within ``--timeout``),
4 model rejected, 5 no transcript in time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from typing import TextIO

from loguru import logger

from agent.config import ConfigError, SageMakerSettings, STTSettings, load_settings
from agent.stt.audio import AudioFormatError, PcmAudio, read_wav
from agent.stt.channels import ChannelFactory
from agent.stt.client import RealtimeTranscriber, TranscriptEvent
from agent.stt.params import RealtimeSTTParams
from agent.stt.service import VoxtralRealtimeSTTService
from pipelines.services import stt_channel_factory

EXIT_OK, EXIT_USAGE, EXIT_UNREACHABLE, EXIT_MODEL, EXIT_TIMEOUT = 0, 2, 3, 4, 5


class TranscribeError(Exception):
    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code


CONNECT_TIMEOUT_S = 20.0
TEARDOWN_S = 5.0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="voice-agent transcribe",
        description="Stream a WAV file (any rate, any channel count) to a realtime STT endpoint.",
    )
    parser.add_argument("file", help="a PCM WAV file")
    parser.add_argument("--url", help="ws://HOST:PORT/v1/realtime (default: the profile's stt.url)")
    parser.add_argument("--model", help="served model name (default: the profile's stt.model)")
    parser.add_argument("--profile", help="settings profile (default, vllm, sagemaker)")
    parser.add_argument("--sagemaker-endpoint", help="go through this SageMaker endpoint instead")
    parser.add_argument("--region", help="AWS region of the SageMaker endpoint")
    parser.add_argument("--realtime", action="store_true", help="pace audio at real speed")
    parser.add_argument("--json", action="store_true", help="print one JSON object per event")
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds to wait for the final transcript after the audio; also the longest wait "
        f"to connect, up to {CONNECT_TIMEOUT_S:g} s",
    )
    parser.add_argument("--verbose", action="store_true", help="show the service's logs")
    return parser


def _channel_factory(args: argparse.Namespace, settings: STTSettings) -> ChannelFactory:
    """The profile's STT endpoint, or the one the flags name."""
    if args.sagemaker_endpoint:
        if not args.region:
            raise TranscribeError("--sagemaker-endpoint needs --region (e.g. us-east-1)", 2)
        sagemaker = SageMakerSettings(endpoint_name=args.sagemaker_endpoint, region=args.region)
        settings = settings.model_copy(update={"transport": "sagemaker", "sagemaker": sagemaker})
    elif args.url:
        settings = settings.model_copy(update={"transport": "websocket", "url": args.url})
    return stt_channel_factory(settings)


def _report(event: TranscriptEvent, *, as_json: bool, out: TextIO, err: TextIO) -> None:
    if as_json:
        print(json.dumps(event.to_dict()), file=out, flush=True)
    elif event.kind == "interim":
        print(f"… {event.text}", file=err, flush=True)
    elif event.kind == "error":
        print(f"error: {event.text}", file=err, flush=True)


async def transcribe(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    try:
        audio = read_wav(args.file)
    except (AudioFormatError, OSError) as exc:
        raise TranscribeError(f"cannot read {args.file}: {exc}", EXIT_USAGE) from exc
    settings = load_settings(args.profile).stt
    model = args.model or settings.model
    channel_factory = _channel_factory(args, settings)
    if args.sagemaker_endpoint or (settings.transport == "sagemaker" and not args.url):
        name = args.sagemaker_endpoint or settings.sagemaker.endpoint_name
        target = f"SageMaker endpoint {name}"
        hint = "Check the endpoint's name, region and status, and your AWS credentials."
    else:
        target = args.url or settings.url
        hint = "Is it running? Start a local one with: voice-agent asr-server."
    service = VoxtralRealtimeSTTService(
        channel_factory=channel_factory,
        settings=VoxtralRealtimeSTTService.Settings(model=model),
        params=RealtimeSTTParams(
            preroll_s=0.0,
            final_timeout_s=max(10.0, audio.duration_s),
        ),
    )
    # A hard bound on everything, teardown included: a frozen endpoint must not hold the
    # command past what --timeout promises.
    limit_s = _connect_wait_s(args) + audio.duration_s + args.timeout + TEARDOWN_S
    try:
        async with asyncio.timeout(limit_s):
            async with RealtimeTranscriber(
                service, sample_rate=audio.sample_rate, channels=audio.channels
            ) as transcriber:
                return await _until_final(transcriber, audio, args, out, err, target, hint, model)
    except TimeoutError:
        raise TranscribeError(
            f"gave up after {limit_s:.0f} s: the STT endpoint stopped answering", EXIT_TIMEOUT
        ) from None


async def _until_final(
    transcriber: RealtimeTranscriber,
    audio: PcmAudio,
    args: argparse.Namespace,
    out: TextIO,
    err: TextIO,
    target: str,
    hint: str,
    model: str,
) -> int:
    """Connect, play the file as one turn, report events until the final transcript."""
    try:
        connected = await transcriber.wait_connected(timeout=_connect_wait_s(args))
    except TimeoutError:
        connected = False
    if not connected:
        raise TranscribeError(
            f"cannot reach the STT endpoint at {target}. {hint}", EXIT_UNREACHABLE
        )

    async def play() -> None:
        await transcriber.start_turn()
        await transcriber.feed(audio.pcm, realtime=args.realtime)
        await transcriber.end_turn()

    playing = asyncio.create_task(play())
    deadline = asyncio.get_running_loop().time() + audio.duration_s + args.timeout
    try:
        while True:
            remaining = deadline - asyncio.get_running_loop().time()
            try:
                event = await transcriber.next_event(timeout=max(remaining, 0.0))
            except TimeoutError:
                raise _timed_out(transcriber, args, target, hint) from None
            _report(event, as_json=args.json, out=out, err=err)
            if event.kind == "error" and "[model_not_found]" in event.text:
                raise TranscribeError(
                    f"the endpoint rejected model {model!r}; pass --model with the server's "
                    "served model name (vLLM's --served-model-name)",
                    EXIT_MODEL,
                )
            if event.kind == "error" and event.fatal:
                raise TranscribeError(
                    f"cannot reach the STT endpoint at {target}: {event.text}", EXIT_UNREACHABLE
                )
            if event.kind == "final":
                if not args.json:
                    print(event.text, file=out, flush=True)
                return EXIT_OK
    finally:
        playing.cancel()


def _connect_wait_s(args: argparse.Namespace) -> float:
    """How long to wait for a session: a short --timeout shortens this too (a user who asks
    for 5 s should not wait 20 on an endpoint that never answers)."""
    return min(CONNECT_TIMEOUT_S, args.timeout)


def _timed_out(
    transcriber: RealtimeTranscriber, args: argparse.Namespace, target: str, hint: str
) -> TranscribeError:
    """No final in time: an endpoint that answers but is slow (5), or one the service lost
    and could not reconnect to (3: a frozen or vanished endpoint is an unreachable one)."""
    if not transcriber.service.connected:
        return TranscribeError(
            f"lost the STT endpoint at {target} and could not reconnect within "
            f"--timeout {args.timeout:g} s. {hint}",
            EXIT_UNREACHABLE,
        )
    return TranscribeError("no final transcript before the timeout", EXIT_TIMEOUT)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logger.remove()
    if args.verbose:
        logger.add(sys.stderr, level="DEBUG")
    os.environ.setdefault("PIPECAT_DISABLE_TRACING", "1")
    try:
        return asyncio.run(transcribe(args, sys.stdout, sys.stderr))
    except TranscribeError as exc:
        print(f"voice-agent transcribe: {exc}", file=sys.stderr)
        return exc.exit_code
    except ConfigError as exc:
        print(f"voice-agent transcribe: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
