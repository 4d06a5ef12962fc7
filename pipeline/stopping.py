"""Stopping a run on Ctrl-C or SIGTERM: the running shards are abandoned, the committed kept.

``run_pipeline`` runs its stages inside :func:`stop_on_signals`: SIGINT and SIGTERM then raise
:class:`RunStopped` in the main thread (a ``KeyboardInterrupt``, so every stage and shard lets it
through as no row's fault), the runner notes the stage it stopped in, the executor abandons its
work without waiting for it (``RayExecutor.abandon``: Ray is shut down, so no engine, worker or
agent of the run outlives it), and the CLI prints one line. Without a handler SIGTERM would kill
the driver in the middle of a Ray call, leaving Ray's processes to notice it later, and a
graceful engine shutdown would wait for the model call in progress (a minute on a CPU).

A shard is committed by a rename and then its marker (``arenaforge.pipeline.store``), so a stop
at any point keeps each row at most once, and a rerun recomputes what was not committed.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class RunStopped(KeyboardInterrupt):
    """A run stopped by a signal (``signal_name``) in ``stage`` (``None``: between stages)."""

    def __init__(self, signal_name: str = "SIGINT", stage: str | None = None):
        super().__init__(signal_name, stage)
        self.signal_name, self.stage = signal_name, stage

    @property
    def exit_code(self) -> int:
        """The shell's code for a process ended by the signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + signal.Signals[self.signal_name].value

    def describe(self) -> str:
        """One line for the user.

        >>> RunStopped("SIGTERM", "judge").describe()
        'stopped by SIGTERM in stage judge; committed shards are kept: rerun the same command to resume'
        """
        where = f" in stage {self.stage}" if self.stage else ""
        return (f"stopped by {self.signal_name}{where}; committed shards are kept: rerun the "
                "same command to resume")


# The signal that stopped the run, for a KeyboardInterrupt that does not carry it: Ray's waits
# run the handler themselves and raise a plain KeyboardInterrupt in its place.
_received: list[str] = []


def stopped_in(exc: KeyboardInterrupt, stage: str | None = None) -> RunStopped:
    """``exc`` as a :class:`RunStopped` that names ``stage`` (a plain Ctrl-C reads as SIGINT)."""
    if isinstance(exc, RunStopped):
        exc.stage = exc.stage or stage
        return exc
    return RunStopped(_received[0] if _received else "SIGINT", stage)


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """While the block runs, SIGINT and SIGTERM raise :class:`RunStopped` in the main thread;
    the signals that follow the first are ignored until the block ends, so that a second Ctrl-C
    cannot cut the clean-up short. A signal the process ignores stays ignored (a job started
    with ``&`` by a script ignores SIGINT), and outside the main thread (where Python cannot
    handle signals) the block runs unchanged. The previous handlers come back at the end."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if _received:
            log.warning("%s ignored: the run is stopping already", name)
            return
        _received.append(name)
        raise RunStopped(name)

    _received.clear()
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS
                if signal.getsignal(sig) is not signal.SIG_IGN}
    try:
        for sig in previous:
            signal.signal(sig, handle)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler if handler is not None else signal.SIG_DFL)
        _received.clear()
