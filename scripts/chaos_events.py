"""The runs of ``scripts/chaos.py``: attempts of ``arenaforge run`` and one fault per attempt.

A faulted run is a sequence of attempts. Each but the last meets one event at a stage of its
own, the events in pipeline order: a SIGKILL at a random moment of the stage, the filesystem
filling up, an expert's server going down, or (on a two-node Ray cluster) a node dying. After
the events, attempts resume until the run completes. Whatever an attempt does that it should
not (fails when it should go on, hangs when it should stop, stops without saying why) is
recorded in ``problems``.
"""

from __future__ import annotations

import random
import shutil
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from chaos_procs import Attempt, LocalCluster, SmallDisk

# the stages that call the experts' servers (mine only when it mines, not reading a file)
MODEL_STAGES = ("mine", "difficulty", "answer", "judge", "tests", "repair")
STOP_WAIT_S = 600.0  # a run on a full disk or without its server must stop within this


class ChaosRun:
    """One run directory and the attempts that make it.

    Args:
        config: the run config.
        artifacts: the run's ``artifacts_dir`` (the run directory is ``artifacts/chaos``).
        logs: where each attempt's output goes.
        env: the attempts' environment.
        overrides: ``--set`` values for every attempt.
        timeout_s: longest an attempt may run.
        experts: the stand-in experts (for taking one down).
        rng: draws the events' stages and moments.
        walls: the clean run's wall seconds per stage (how long a stage lasts).
        stages: the configured stages, in order.
        model_stages: those of them that call the experts' servers (where a server can go
            down); default: the configured :data:`MODEL_STAGES`.
    """

    def __init__(self, config: Path, artifacts: Path, logs: Path, env: dict[str, str],
                 overrides: list[str], timeout_s: float, experts: Any = None,
                 rng: random.Random | None = None, walls: dict[str, float] | None = None,
                 stages: list[str] | None = None,
                 model_stages: list[str] | None = None) -> None:
        self.config, self.artifacts, self.logs, self.env = config, artifacts, logs, env
        self.overrides, self.timeout_s, self.experts = overrides, timeout_s, experts
        self.rng = rng or random.Random(0)
        self.walls, self.stages = walls or {}, stages or []
        self.model_stages = (list(model_stages) if model_stages is not None
                             else [s for s in MODEL_STAGES if s in self.stages])
        self.run_dir = artifacts / "chaos"
        self.attempts = 0
        self.events: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.complete = False
        self.wall_s = 0.0
        self._disk: SmallDisk | None = None
        self._current: Attempt | None = None
        logs.mkdir(parents=True, exist_ok=True)

    # -- attempts --------------------------------------------------------------------------
    def start(self, fresh: bool = False, overrides: tuple[str, ...] = ()) -> Attempt:
        """Start ``arenaforge run`` on this run directory (a resume unless ``fresh``)."""
        cmd = [sys.executable, "-m", "arenaforge.pipeline.cli", "run", str(self.config)]
        for item in [f"artifacts_dir={self.artifacts}", *self.overrides, *overrides]:
            cmd += ["--set", item]
        cmd += ["--fresh"] if fresh else []
        self.attempts += 1
        self._current = Attempt(cmd, self.env, self.logs / f"attempt-{self.attempts:03d}.log")
        return self._current

    @property
    def resumes(self) -> int:
        return max(0, self.attempts - 1)

    @property
    def kills_done(self) -> int:
        return sum(1 for e in self.events if e["event"] == "sigkill")

    def kills_by_stage(self) -> dict[str, int]:
        return dict(Counter(e["stage"] for e in self.events if e["event"] == "sigkill"))

    def event_counts(self) -> dict[str, int]:
        """Faults other than the servers' answers, by kind (events that happened)."""
        return dict(Counter(e["event"] for e in self.events if not e.get("skipped")))

    # -- the plan ------------------------------------------------------------------------
    def schedule(self, kills: int, server_down: bool, disk_full: bool,
                 node_loss: bool) -> list[tuple[str, str]]:
        """``(stage, event)`` in pipeline order: the kills spread evenly over the stages, the
        other events at a stage drawn for each (a model stage where it needs one)."""
        n = len(self.stages)
        events = [(self.stages[i * n // kills], "sigkill") for i in range(kills)]
        model = self.model_stages
        if disk_full:
            events.append((self.rng.choice(self.stages[1:-1] or self.stages), "disk_full"))
        if server_down and model:
            events.append((self.rng.choice(model), "server_down"))
        if node_loss and model:
            events.append((self.rng.choice(model), "node_loss"))
        order = {s: i for i, s in enumerate(self.stages)}
        return sorted(events, key=lambda e: order[e[0]])

    def run(self, kills: int, server_down: bool, disk_full: bool, node_loss: bool,
            ray_tmp: Path, disk_mb: int = 256) -> None:
        """The whole faulted run: the scheduled events, then resumes until complete."""
        begin = time.perf_counter()
        if disk_full:
            try:
                self._disk = SmallDisk(self.artifacts, disk_mb)
            except OSError as exc:
                self.events.append({"event": "disk_full", "skipped": str(exc)})
                disk_full = False
        self._ray_tmp = ray_tmp
        for stage, event in self.schedule(kills, server_down, disk_full, node_loss):
            if self.complete:
                self.events.append({"event": event, "stage": stage,
                                    "skipped": "the run was complete"})
                continue
            getattr(self, f"_{event}")(stage)
        for _ in range(3):
            if self.complete:
                break
            attempt = self.start()
            rc = attempt.wait(self.timeout_s)
            self._ended(attempt, rc, "resume to the end")
        self.wall_s = time.perf_counter() - begin

    def close(self) -> None:
        """Kill an attempt still running (the benchmark itself failed); unmount the small
        disk, keeping a copy of the run directory beside it."""
        if self._current is not None and self._current.proc.poll() is None:
            self._current.kill()
        if self._disk is not None:
            self._disk.free()
            if self.run_dir.exists():
                shutil.copytree(self.run_dir, self.artifacts.with_name("faulted-run"),
                                dirs_exist_ok=True)
            self._disk.unmount()
            self._disk = None

    # -- events --------------------------------------------------------------------------
    def _started(self, attempt: Attempt, stage: str) -> str | None:
        """The stage at or after ``stage`` that the attempt starts (None: it ended first)."""
        got = attempt.wait_for_start(self.stages[self.stages.index(stage):], self.timeout_s)
        if got is None:
            self._ended(attempt, attempt.wait(0), f"waiting for {stage}")
        return got

    def _ended(self, attempt: Attempt, rc: int | None, what: str) -> None:
        """An attempt that ended on its own: complete (0), or a problem."""
        if rc is None:
            attempt.kill()
            self.problems.append(f"attempt {self.attempts} ({what}) ran past "
                                 f"{self.timeout_s:.0f} s; killed")
        elif rc == 0:
            self.complete = True
        else:
            self.problems.append(f"attempt {self.attempts} ({what}) failed (exit {rc}):\n"
                                 f"{attempt.output()}")

    def _moment(self, attempt: Attempt, stage: str) -> float:
        """A random moment within what is left of ``stage`` (from the clean run's time)."""
        shards, done = attempt.shards.get(stage, (1, 0))
        left = self.walls.get(stage, 1.0) * (1 - done / max(shards, 1))
        return self.rng.uniform(0.0, 0.9 * max(left, 0.2))

    def _at(self, attempt: Attempt) -> str:
        """The stage running now (the next one when between two)."""
        if (running := attempt.running()) is not None:
            return running
        last = attempt.started[-1]
        nxt = self.stages.index(last) + 1
        return self.stages[nxt] if nxt < len(self.stages) else last

    def _sigkill(self, stage: str) -> None:
        attempt = self.start()
        if (got := self._started(attempt, stage)) is None:
            return
        delay = self._moment(attempt, got)
        if (rc := attempt.wait(delay)) is not None:
            self._ended(attempt, rc, f"killing in {got}")
            return
        at = self._at(attempt)
        attempt.kill()
        self.events.append({"event": "sigkill", "stage": at, "after_s": round(delay, 2)})

    def _disk_full(self, stage: str) -> None:
        attempt = self.start()
        if (got := self._started(attempt, stage)) is None:
            return
        attempt.wait(self._moment(attempt, got))
        at = self._at(attempt)
        filled = self._disk.fill()
        rc = attempt.wait(STOP_WAIT_S)
        said = attempt.output(6)
        event = {"event": "disk_full", "stage": at, "filled_mb": round(filled / 2**20, 1),
                 "exit_code": rc, "message": said.splitlines()[-1] if said else ""}
        if rc is None:
            attempt.kill()
            self.problems.append(f"the run did not stop on a full disk within {STOP_WAIT_S} s")
        elif rc == 0:
            self.complete = True
            self.problems.append("the run completed on a full disk")
        elif "No space left" not in said and "disk full" not in said:
            self.problems.append(f"the run stopped on a full disk without saying so:\n{said}")
        self._disk.free()
        self.events.append(event)

    def _server_down(self, stage: str) -> None:
        name = min(self.experts.ports)  # expert-1: every model stage calls it
        attempt = self.start()
        if (got := self._started(attempt, stage)) is None:
            return
        self.experts.down(name)
        rc = attempt.wait(STOP_WAIT_S)
        said = attempt.output(6)
        self.experts.up(name)
        url = self.experts.url(name)
        event = {"event": "server_down", "stage": got, "expert": name, "exit_code": rc,
                 "names_server": url in said,
                 "message": next((line for line in said.splitlines() if url in line), said[-500:])}
        if rc is None:
            attempt.kill()
            self.problems.append(f"the run did not stop with {url} down within {STOP_WAIT_S} s")
        elif rc == 0:
            self.complete = True
        elif url not in said:
            self.problems.append(f"the run stopped with {url} down without naming it:\n{said}")
        self.events.append(event)

    def _node_loss(self, stage: str) -> None:
        cluster = LocalCluster(self._ray_tmp / "c", self.env)
        try:
            attempt = self.start(overrides=(f"runner.ray_address={cluster.address}",))
            if (got := self._started(attempt, stage)) is None:
                return
            attempt.wait(self._moment(attempt, got) / 2)
            cluster.kill_worker()
            finished = attempt.wait_for_complete(got, STOP_WAIT_S)
            rc = attempt.proc.poll()
            self.events.append({"event": "node_loss", "stage": got, "stage_finished": finished,
                                "exit_code": rc})
            if not finished:
                self.problems.append(f"{got} did not finish after losing a node:\n"
                                     f"{attempt.output()}")
            if rc == 0:
                self.complete = True
            else:
                attempt.kill()  # the rest of the run goes on on the local Ray
        finally:
            cluster.stop()
