"""Who uses the machine's cores while a run goes on: sampled CPU time by kind of process.

``scripts/bench_scale.py`` runs the pipeline, its Ray workers, the embedding service and the
load generator that stands in for the servers all on one machine. A stage's wall then depends
on what else holds the cores, and a benchmark that reports walls alone cannot say whether a
stage waited on its servers or on the CPU. :class:`CpuMeter` samples every process's CPU time
once a second (``psutil``) and sums the growth by kind (:func:`kind_of`); the machine's busy
time comes from its own counters, so CPU of processes that lived less than a sample (short
sandboxes) is the ``unattributed`` rest.

Example::

    meter = CpuMeter(driver_pid=proc.pid, load_pids={server.pid})
    ...  # the run
    meter.stop()
    cores_by_stage(meter.samples, stage_at)
    # {"difficulty": {"seconds": 51, "busy": 1.97, "stage workers": 1.02, ...}, ...}
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psutil
from arenaforge.pipeline.sandbox.launcher import HARNESS_DIR

SANDBOX_HARNESS = HARNESS_DIR + "/"  # where a sandbox sees the harness it runs

KINDS = ("driver", "stage workers", "embedding service", "sandboxes", "load generator", "ray",
         "other", "unattributed")


def kind_of(pid: int, cmdline: list[str], driver_pid: int, load_pids: set[int]) -> str:
    """The kind of process ``pid`` is, from its command line.

    >>> kind_of(7, ["ray::EmbeddingService"], 1, set())
    'embedding service'
    >>> kind_of(7, ["ray::_run_task"], 1, set()), kind_of(7, ["ray::IDLE"], 1, set())
    ('stage workers', 'stage workers')
    >>> kind_of(7, ["/usr/bin/python3", "-I", "-S", "/opt/arenaforge/run.py", "cfg"], 1, set())
    'sandboxes'
    >>> kind_of(7, [".../ray/core/src/ray/raylet/raylet", "--x"], 1, set())
    'ray'
    """
    if pid == driver_pid:
        return "driver"
    if pid in load_pids:
        return "load generator"
    head = cmdline[0] if cmdline else ""
    if head.startswith("ray::EmbeddingService"):
        return "embedding service"
    if head.startswith(("ray::_run_task", "ray::IDLE")):
        return "stage workers"
    text = " ".join(cmdline)
    if SANDBOX_HARNESS in text or "sandbox/inside/" in text:  # as mounted inside, or on the host
        return "sandboxes"
    if "ray" in text:  # gcs_server, raylet, dashboard, Ray's agents, the engine directory
        return "ray"
    return "other"


class CpuMeter:
    """Samples, every ``every_s``, the cores each kind of process used since the last sample
    and how busy the machine was, until :meth:`stop`. ``samples``: ``(time, busy_cores,
    {kind: cores})``."""

    def __init__(self, driver_pid: int, load_pids: set[int], every_s: float = 1.0):
        self.driver_pid, self.load_pids, self.every_s = driver_pid, set(load_pids), every_s
        self.samples: list[tuple[float, float, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _cpu_by_pid(self) -> dict[int, tuple[str, float]]:
        out = {}
        for proc in psutil.process_iter(["pid", "cmdline", "cpu_times"]):
            info = proc.info
            times = info.get("cpu_times")
            if times is None:
                continue
            out[info["pid"]] = (kind_of(info["pid"], info.get("cmdline") or [], self.driver_pid,
                                        self.load_pids), times.user + times.system)
        return out

    def _poll(self) -> None:
        before, machine = self._cpu_by_pid(), psutil.cpu_times()
        last = time.monotonic()
        while not self._stop.wait(self.every_s):
            now_cpu, now_machine, now = self._cpu_by_pid(), psutil.cpu_times(), time.monotonic()
            span = max(now - last, 1e-6)
            by_kind: dict[str, float] = {}
            for pid, (kind, seconds) in now_cpu.items():
                grew = seconds - (before[pid][1] if pid in before else 0.0)  # new: all of it
                if grew > 0:
                    by_kind[kind] = by_kind.get(kind, 0.0) + grew / span
            busy = _busy_seconds(now_machine) - _busy_seconds(machine)
            busy_cores = max(0.0, busy / span)
            by_kind["unattributed"] = max(0.0, busy_cores - sum(by_kind.values()))
            self.samples.append((time.time(), busy_cores, by_kind))
            before, machine, last = now_cpu, now_machine, now

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _busy_seconds(times: Any) -> float:
    idle = times.idle + getattr(times, "iowait", 0.0)
    return sum(times) - idle - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)


def cores_by_stage(samples: list[tuple[float, float, dict[str, float]]],
                   stage_at: Callable[[float], str | None]) -> dict[str, dict[str, float]]:
    """Per stage (``stage_at(time)``; ``start-up`` before the first): the mean cores in use
    (``busy``) and by kind, over its samples, and ``seconds`` sampled.

    >>> cores_by_stage([(1, 2.0, {"driver": 0.5}), (2, 1.0, {"driver": 1.5})], lambda t: "a")
    {'a': {'seconds': 2, 'busy': 1.5, 'driver': 1.0}}
    """
    sums: dict[str, dict[str, float]] = {}
    for when, busy, by_kind in samples:
        stage = stage_at(when) or "start-up"
        acc = sums.setdefault(stage, {"seconds": 0, "busy": 0.0})
        acc["seconds"] += 1
        acc["busy"] += busy
        for kind, cores in by_kind.items():
            acc[kind] = acc.get(kind, 0.0) + cores
    return {stage: {k: (v if k == "seconds" else round(v / acc["seconds"], 2))
                    for k, v in acc.items()} for stage, acc in sums.items()}
