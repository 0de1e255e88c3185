"""Start local helper servers as child processes, wait until they answer, stop them on exit.

``voice-agent serve`` in the offline profile needs two servers of its own: the CPU ASR server
and Piper's TTS server. They run as **child processes** (not threads) so a crash or a GPL
library stays on its side of the process boundary, and so each has its own interpreter and
cores. The supervisor's whole job:

- :meth:`Supervisor.start` spawns every child and waits until each answers ``GET ready_url``
  with a 2xx; a child that exits or stays silent past its timeout raises
  :class:`ChildFailed` (and every child is stopped).
- :meth:`Supervisor.keep_alive` restarts a child that dies, with backoff (calls ride it out:
  the STT reconnects and replays its turn once the recognizer is back), and returns a
  :class:`ChildFailed` only for a child that keeps dying (``max_restarts`` within
  ``restart_window_s``), so the caller can stop instead of looping.
- :meth:`Supervisor.stop` terminates every child (``SIGTERM``, then ``SIGKILL`` after
  ``stop_timeout_s``). It is synchronous and idempotent so it can run from ``finally``.

On Linux each child also gets ``PR_SET_PDEATHSIG``: if this process is killed outright
(``SIGKILL``, out of memory), the kernel still takes the children down with it.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
from loguru import logger


@dataclass(frozen=True, slots=True)
class ChildSpec:
    """How to run one local server and how to tell it is ready."""

    name: str
    argv: Sequence[str]
    ready_url: str
    ready_timeout_s: float = 60.0
    env: Mapping[str, str] = field(default_factory=dict)
    """Extra environment on top of this process's own."""


class ChildFailed(RuntimeError):
    """A child process exited, or never became ready; the message says which and why."""

    def __init__(self, message: str, *, name: str, returncode: int | None) -> None:
        super().__init__(message)
        self.name = name
        self.returncode = returncode


@dataclass(slots=True)
class _Child:
    spec: ChildSpec
    process: subprocess.Popen[bytes]

    @property
    def returncode(self) -> int | None:
        return self.process.poll()

    def describe(self) -> str:
        return f"{self.spec.name} (pid {self.process.pid})"


class Supervisor:
    """Owns a set of child servers for the lifetime of ``voice-agent serve``.

    Use as ``async with Supervisor(specs) as supervisor: ...``: entering starts the children
    and waits until they are ready, leaving stops them however the block ends.
    """

    def __init__(
        self,
        specs: Sequence[ChildSpec],
        *,
        poll_interval_s: float = 0.1,
        stop_timeout_s: float = 5.0,
        max_restarts: int = 5,
        restart_window_s: float = 60.0,
        restart_backoff_s: tuple[float, float] = (0.5, 8.0),
    ) -> None:
        names = [spec.name for spec in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"child names must be unique, got {names}")
        self._specs = list(specs)
        self._poll_interval_s = poll_interval_s
        self._stop_timeout_s = stop_timeout_s
        self._max_restarts = max_restarts
        self._restart_window_s = restart_window_s
        self._restart_backoff_s = restart_backoff_s
        self._children: list[_Child] = []
        self._deaths: dict[str, list[float]] = {}

    @property
    def pids(self) -> dict[str, int]:
        """The running children's process ids, by name."""
        return {child.spec.name: child.process.pid for child in self._children}

    async def __aenter__(self) -> Supervisor:
        await self.start()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.stop()

    async def start(self) -> None:
        """Spawn every child, then wait until all are ready.

        Raises:
            ChildFailed: a child could not be spawned, exited, or was not ready in time.
                The children already started are stopped before this is raised.
        """
        try:
            for spec in self._specs:
                self._children.append(self._spawn(spec))
            async with aiohttp.ClientSession() as session:
                await asyncio.gather(
                    *(self._wait_ready(child, session) for child in self._children)
                )
        except BaseException:
            self.stop()
            raise

    @property
    def down(self) -> list[str]:
        """The children that are not running right now (dead, or being restarted)."""
        return [child.spec.name for child in self._children if child.returncode is not None]

    async def keep_alive(self) -> ChildFailed:
        """Restart every child that dies; return (not raise) the one that keeps dying.

        A death is logged with its exit code; the child is started again after a backoff
        that doubles with each recent death, and waited for until it is ready. A child that
        dies more than ``max_restarts`` times within ``restart_window_s``, or cannot be
        started again, ends the watch.
        """
        async with aiohttp.ClientSession() as session:
            while True:
                for index, child in enumerate(self._children):
                    code = child.returncode
                    if code is None:
                        continue
                    failure = await self._restart(index, child, code, session)
                    if failure is not None:
                        return failure
                await asyncio.sleep(self._poll_interval_s)

    async def _restart(
        self, index: int, child: _Child, code: int, session: aiohttp.ClientSession
    ) -> ChildFailed | None:
        name = child.spec.name
        now = time.monotonic()
        deaths = [t for t in self._deaths.get(name, []) if now - t < self._restart_window_s]
        deaths.append(now)
        self._deaths[name] = deaths
        if len(deaths) > self._max_restarts:
            return ChildFailed(
                f"{child.describe()} keeps dying: it exited {len(deaths)} times within "
                f"{self._restart_window_s:g} s, the last time with code {code}. The server "
                "cannot work without it, so it is shutting down; its own log lines above "
                "say why.",
                name=name,
                returncode=code,
            )
        low, high = self._restart_backoff_s
        wait_s = min(high, low * 2 ** (len(deaths) - 1))
        logger.error(
            f"{child.describe()} exited with code {code}; restarting it in {wait_s:g} s "
            f"(restart {len(deaths)} of at most {self._max_restarts} per "
            f"{self._restart_window_s:g} s). Calls ride it out."
        )
        await asyncio.sleep(wait_s)
        try:
            fresh = self._spawn(child.spec)
            self._children[index] = fresh
            await self._wait_ready(fresh, session)
        except ChildFailed as exc:
            logger.error(f"restarting {name} failed: {exc}")
            return None if self._children[index].returncode is not None else exc
        logger.info(f"{name} is back (pid {fresh.process.pid})")
        return None

    def stop(self) -> None:
        """Terminate every child still running and reap them all; safe to call twice."""
        for child in self._children:
            if child.returncode is None:
                logger.debug(f"stopping {child.describe()}")
                child.process.terminate()
        deadline = time.monotonic() + self._stop_timeout_s
        for child in self._children:
            try:
                child.process.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                logger.warning(f"{child.describe()} ignored SIGTERM; killing it")
                child.process.kill()
                child.process.wait()
        self._children.clear()

    def _spawn(self, spec: ChildSpec) -> _Child:
        env = {**os.environ, **spec.env}
        try:
            process = subprocess.Popen(
                list(spec.argv),
                env=env,
                stdin=subprocess.DEVNULL,
                # A session of its own: Ctrl-C in a terminal signals the whole foreground
                # group, and a child that died of it would look like a crash. We stop them.
                start_new_session=True,
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        except OSError as exc:
            raise ChildFailed(
                f"cannot start {spec.name} ({' '.join(spec.argv)}): {exc}",
                name=spec.name,
                returncode=None,
            ) from exc
        logger.info(f"started {spec.name} (pid {process.pid}): {' '.join(spec.argv)}")
        return _Child(spec, process)

    async def _wait_ready(self, child: _Child, session: aiohttp.ClientSession) -> None:
        spec = child.spec
        deadline = time.monotonic() + spec.ready_timeout_s
        last_error = "no answer yet"
        while True:
            code = child.returncode
            if code is not None:
                raise ChildFailed(
                    f"{child.describe()} exited with code {code} before it was ready "
                    f"(it never answered {spec.ready_url}); its log lines above say why.",
                    name=spec.name,
                    returncode=code,
                )
            try:
                timeout = aiohttp.ClientTimeout(total=2.0)
                async with session.get(spec.ready_url, timeout=timeout) as response:
                    if 200 <= response.status < 300:
                        logger.info(f"{spec.name} is ready at {spec.ready_url}")
                        return
                    last_error = f"HTTP {response.status}"
            except (aiohttp.ClientError, TimeoutError) as exc:
                last_error = str(exc) or type(exc).__name__
            if time.monotonic() >= deadline:
                raise ChildFailed(
                    f"{child.describe()} was not ready after {spec.ready_timeout_s:g} s "
                    f"(GET {spec.ready_url}: {last_error}). Check its log lines above, or "
                    "whether another program already uses that port.",
                    name=spec.name,
                    returncode=None,
                )
            await asyncio.sleep(self._poll_interval_s)


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Ask the kernel to SIGTERM this child when its parent dies (Linux only)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except (OSError, AttributeError):
        pass
