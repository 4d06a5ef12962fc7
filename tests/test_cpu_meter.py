"""``scripts/cpu_meter.py``: CPU time by kind of process, on real processes."""

import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import psutil
from cpu_meter import CpuMeter, cores_by_stage

BURN = "import time\nend = time.time() + {s}\nwhile time.time() < end: pass\n"


def test_a_busy_process_is_counted_as_its_kind_and_an_idle_one_is_not():
    busy = subprocess.Popen([sys.executable, "-c", BURN.format(s=3.5)])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3.5)"])
    try:
        spinner = psutil.Process(busy.pid)
        before, began = sum(spinner.cpu_times()[:2]), time.monotonic()
        meter = CpuMeter(driver_pid=busy.pid, load_pids={idle.pid}, every_s=0.5)
        time.sleep(3.0)
        meter.stop()
        used = (sum(spinner.cpu_times()[:2]) - before) / (time.monotonic() - began)
    finally:
        busy.kill()
        idle.kill()
    stages = cores_by_stage(meter.samples, lambda when: "run")
    run = stages["run"]
    assert run["seconds"] >= 4
    # one process spinning: "driver" is the cores it got, as the kernel counted them (a busy
    # machine gives it less than one core, so the kernel's count is the reference, not 1.0)
    assert used > 0.1 and abs(run["driver"] - used) <= 0.25 + 0.25 * used, (run, used)
    assert run.get("load generator", 0.0) < 0.1, run
    assert run["busy"] >= run["driver"] - 0.05, run
