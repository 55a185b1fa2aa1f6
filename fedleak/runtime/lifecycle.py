"""How a run ends: stop requests, signals, Ray's processes and start-up checks.

``fedleak run`` turns SIGINT (Ctrl-C) and SIGTERM into a stop request
(:class:`RunControl`) instead of an exception in whatever thread happens to
run: the server loop (:func:`fedleak.experiments.server.run_federation`)
finishes the round in progress, records it, and returns, so Flower's
simulation shuts its Ray actors and Ray down the normal way and the run
directory gets ``model.npz`` and ``results.json`` with ``"status":
"interrupted"``. A round that has not finished :attr:`RunControl.grace_s`
seconds after the request (its clients were killed too, or it is long) is
abandoned: the run keeps the model of the last completed round. A second
signal abandons the round at once.

:func:`start_reaper` guards against the ends no handler sees (SIGKILL, a
crash of the interpreter): a small watcher process stops every process the
run started once the run's process is gone. :func:`check_ray_address` and
:func:`check_cpus` refuse settings under which Ray would retry or wait
forever (an unreachable cluster, clients that need more CPUs than exist).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from fedleak.errors import ConfigError

__all__ = [
    "DEFAULT_GRACE_S",
    "RAY_ADDRESS_ENV",
    "RAY_CONNECT_TIMEOUT_S",
    "RunControl",
    "RunInterrupted",
    "RunStopped",
    "check_cpus",
    "check_ray_address",
    "exit_now",
    "keep_signals_from_ray",
    "ray_address_in_use",
    "start_reaper",
    "stop_on_signals",
]

DEFAULT_GRACE_S = 5.0
"""Seconds a round in progress may take to finish after a stop request."""

RAY_CONNECT_TIMEOUT_S = 10.0
"""Seconds to wait for a TCP connection to an existing Ray cluster's GCS."""

RAY_ADDRESS_ENV = "RAY_ADDRESS"
"""Ray's own environment variable naming the cluster a driver joins."""


class RunStopped(Exception):
    """Raised inside the server loop to abandon the round in progress."""


class RunInterrupted(KeyboardInterrupt):
    """A signal stopped a run whose caller did not ask to watch for signals.

    :func:`fedleak.experiments.runner.run_experiment` (and ``resume_...``)
    called without a :class:`RunControl` watch SIGINT and SIGTERM themselves
    in the main thread: the run stops after its round, writes ``model.npz``
    and ``results.json`` (``"interrupted"``), and then this is raised, so a
    loop of runs (a benchmark) stops too. A ``KeyboardInterrupt``, so that
    ``except Exception`` does not swallow it.

    Attributes
    ----------
    run_dir : pathlib.Path
        The interrupted run's directory.
    completed_rounds : int
        Rounds it completed.
    exit_code : int
        The shell's exit status for the signal (130 for SIGINT, 143 for SIGTERM).
    """

    def __init__(
        self, run_dir: Path, completed_rounds: int, signum: int | None
    ) -> None:
        self.run_dir = Path(run_dir)
        self.completed_rounds = completed_rounds
        self.signal = signal.Signals(signum if signum is not None else signal.SIGINT)
        self.exit_code = 128 + int(self.signal)
        resume = (
            f"go on with: fedleak run --resume {self.run_dir}"
            if (self.run_dir / "checkpoint.npz").is_file()
            else "no round completed, so there is nothing to resume"
        )
        super().__init__(
            f"interrupted ({self.signal.name}) after round {completed_rounds}: "
            f"model.npz and results.json in {self.run_dir}; {resume}"
        )


class RunControl:
    """A stop request for a running experiment, safe to set from a signal handler.

    Parameters
    ----------
    grace_s : float, default=DEFAULT_GRACE_S
        How long the round in progress may run on after :meth:`request`.
    """

    def __init__(self, grace_s: float = DEFAULT_GRACE_S) -> None:
        self.grace_s = grace_s
        self.signal: int | None = None
        self._requested = threading.Event()
        self._at = 0.0

    def request(self, signum: int | None = None) -> None:
        """Ask the run to stop after the current round (again: at once)."""
        if self._requested.is_set():
            self.grace_s = 0.0
            return
        self.signal = signum
        self._at = time.monotonic()
        self._requested.set()

    @property
    def requested(self) -> bool:
        """Whether a stop was requested."""
        return self._requested.is_set()

    def abort_due(self) -> bool:
        """Whether the round in progress should be abandoned now."""
        return self.requested and time.monotonic() - self._at >= self.grace_s

    @property
    def exit_code(self) -> int:
        """The shell's exit status for the signal (128 + number; 130 for SIGINT)."""
        return 128 + (self.signal if self.signal is not None else signal.SIGINT)


@contextlib.contextmanager
def stop_on_signals(control: RunControl) -> Iterator[RunControl]:
    """Turn SIGINT and SIGTERM into ``control.request`` while the block runs.

    Only the main thread can install handlers; elsewhere the block runs with
    the process's handlers unchanged. The request is made by a watcher
    thread reading the signal numbers Python's C-level handler writes to a
    wakeup pipe (``signal.set_wakeup_fd``), not by the Python-level handler:
    that one runs in the main thread only, and the kernel may deliver the
    signal to any of the run's threads (Ray's, Flower's), so a main thread
    blocked in ``run_simulation``'s join never woke up and the run went on
    to its last round (seen once in six hand-made SIGINTs).
    """
    if threading.current_thread() is not threading.main_thread():
        yield control
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        return None  # the watcher makes the request

    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)

    def watch() -> None:
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum in _STOP_SIGNALS:
                    control.request(signum)

    watcher = threading.Thread(target=watch, name="fedleak-signals", daemon=True)
    watcher.start()
    previous = {signum: signal.signal(signum, handler) for signum in _STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    try:
        yield control
    finally:
        signal.set_wakeup_fd(previous_fd)
        for signum, old in previous.items():
            signal.signal(signum, old)
        os.close(write_fd)
        watcher.join(timeout=1.0)
        os.close(read_fd)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def keep_signals_from_ray() -> Iterator[None]:
    """Keep the process's SIGINT and SIGTERM handlers in place across ``ray.init``.

    ``ray.init`` replaces them twice in the driver: in Python, with a
    handler that calls ``sys.exit`` (``ray._private.utils.set_sigterm_handler``,
    skipped here), and in C++, where the core worker installs its failure
    signal handler for SIGTERM with ``sigaction``, which dumps "*** SIGTERM
    received ***" and aborts the process (exit status -6) in the middle of a
    round. ``signal.getsignal`` still reports Python's handler then, but it
    no longer runs. While this block runs, each ``ray.init`` made from the
    main thread (Flower's Ray backend calls it there, in ``run_simulation``)
    is followed by ``signal.signal`` with the handlers Python holds, which
    puts Python's own C-level handler back with ``sigaction``. A ``ray.init``
    from another thread cannot do that (only the main thread sets handlers)
    and leaves Ray's in place.
    """
    import ray
    import ray._private.utils as ray_utils

    original_set = ray_utils.set_sigterm_handler
    original_init: Callable[..., Any] = ray.init

    def keep(handler: Any) -> None:
        return None

    def init_keeping_handlers(*args: Any, **kwargs: Any) -> Any:
        ours = {signum: signal.getsignal(signum) for signum in _STOP_SIGNALS}
        try:
            return original_init(*args, **kwargs)
        finally:
            if threading.current_thread() is threading.main_thread():
                for signum, handler in ours.items():
                    if handler is not None:
                        signal.signal(signum, handler)

    ray_utils.set_sigterm_handler = keep
    ray.init = init_keeping_handlers
    try:
        yield
    finally:
        ray_utils.set_sigterm_handler = original_set
        ray.init = original_init


def exit_now(code: int) -> NoReturn:
    """End the process with ``code`` once its files are written, skipping teardown.

    Flushes standard output and error and runs the ``atexit`` handlers (Ray's
    shutdown hook, logging), then ``os._exit``: the interpreter's own
    finalization (freeing every module of torch, Ray, Flower and matplotlib,
    and Ray's C++ destructors) is skipped. It took 3 to 10 s on a loaded
    2-core machine, most of the time between a stop request and the exit.
    Call it only when nothing is left to write.
    """
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def start_reaper() -> subprocess.Popen[bytes] | None:
    """Start the watcher that stops this process's descendants once it is gone.

    Returns the watcher (its standard input is a pipe only this process
    holds; it ends when this process does, however it ends), or None where
    ``/proc`` is missing (not Linux).
    """
    if not Path("/proc/self/stat").exists():
        return None
    script = Path(__file__).with_name("_reaper.py")
    return subprocess.Popen(
        [sys.executable, str(script), str(os.getpid())],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def ray_address_in_use(address: str | None = None) -> str:
    """Return the Ray cluster a run joins, ``""`` for a new local instance.

    The address given (``--ray-address`` or ``[federation] ray_address``)
    wins; without one, Ray's own ``RAY_ADDRESS`` environment variable names
    the cluster, as it does for any Ray driver. ``""`` means a new local
    instance even where another Ray cluster runs on the machine (fedleak
    passes ``address="local"``: Ray would otherwise join the last cluster
    ``ray start`` made on this machine and refuse the local settings).
    """
    if address:
        return address
    return os.environ.get(RAY_ADDRESS_ENV, "").strip()


def check_ray_address(address: str, timeout: float = RAY_CONNECT_TIMEOUT_S) -> None:
    """Refuse a Ray cluster address that does not answer within ``timeout`` s.

    Ray retries an unreachable GCS for minutes; a TCP connection to the
    address's host and port fails fast. ``"auto"`` and ``"local"`` (Ray
    finds or starts the cluster itself) are not checked.

    Raises
    ------
    fedleak.errors.ConfigError
        Naming the address, if it has no port or nothing listens there.
    """
    if address in ("", "auto", "local"):
        return
    target = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ConfigError(
            f"ray address {address!r}: expected host:port (or ray://host:port)"
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(
            f"ray address {address!r}: cannot connect within {timeout:g} s ({reason}); "
            "is the Ray cluster running (ray start --head) and reachable?"
        ) from None


def check_cpus(cpus_per_client: float, address: str) -> None:
    """Refuse ``cpus_per_client`` above the CPUs a local Ray instance offers.

    A client that needs more CPUs than Ray has can never be placed: Flower's
    actor pool stays empty and the run waits forever. Against an existing
    cluster (``address``) the check is Ray's (its resources are unknown
    before connecting).

    Raises
    ------
    fedleak.errors.ConfigError
        Naming ``federation.cpus_per_client`` and the CPUs available.
    """
    if address:
        return
    from ray._private.utils import get_num_cpus

    available = get_num_cpus()
    if cpus_per_client > available:
        raise ConfigError(
            f"federation.cpus_per_client: {cpus_per_client:g} CPUs per client, but "
            f"Ray offers {available} on this machine; no client could ever start "
            f"(use at most {available})"
        )
