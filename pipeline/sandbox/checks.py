"""Start-up self-check: is every isolation layer available on this machine?"""

from __future__ import annotations

import functools
import os
import shutil
import sys

from arenaforge.pipeline.sandbox import seccomp_filter


def _static_problems() -> list[str]:
    problems = []
    if not sys.platform.startswith("linux"):
        return [f"platform: the sandbox needs Linux namespaces, this is {sys.platform}"]
    if shutil.which("bwrap") is None:
        problems.append("bubblewrap: `bwrap` not found; install with `apt-get install bubblewrap`")
    for tool in ("setpriv", "unshare"):  # they bind a sandbox's life to its supervisor's
        if shutil.which(tool) is None:
            problems.append(f"util-linux: `{tool}` not found; install with "
                            "`apt-get install util-linux`")
    if not os.path.exists("/proc/self/ns/user"):
        problems.append("namespaces: kernel without user namespaces (CONFIG_USER_NS)")
    try:
        with open("/proc/sys/user/max_user_namespaces") as f:
            if int(f.read()) == 0:
                problems.append("namespaces: user namespaces disabled; run "
                                "`sysctl -w user.max_user_namespaces=15000`")
    except OSError:
        pass
    with open("/proc/self/status") as f:
        if "Seccomp:" not in f.read():
            problems.append("seccomp: kernel without seccomp support (CONFIG_SECCOMP_FILTER)")
    missing = seccomp_filter.available()
    if missing:
        problems.append(missing)
    return problems


def _probe(cfg) -> list[str]:
    """Run one real job through a per-exec sandbox: the only test that proves the layers work."""
    from arenaforge.pipeline.sandbox import launcher
    from arenaforge.pipeline.sandbox.prepare import prepare_tests
    from arenaforge.pipeline.sandbox.result import MODE_PER_EXEC, Job
    from arenaforge.pipeline.sandbox.worker import SandboxStartError, SandboxWorker

    launcher.compile_harness()
    slot = launcher.acquire_slots(1, cfg.uid_base)[0]
    worker = SandboxWorker(cfg, MODE_PER_EXEC, slot, None, seccomp_filter.build_bpf_hex())
    try:
        result = worker.run(Job("import os\nuid = os.getuid()", "assert uid != 0", timeout_s=10),
                            prepare_tests("assert uid != 0"))
    except SandboxStartError as exc:
        return [(f"namespaces: bubblewrap could not start a sandbox: {exc}. User namespaces must "
                 "be allowed (sysctl kernel.unprivileged_userns_clone=1 on Debian/Ubuntu, "
                 "user.max_user_namespaces > 0; AppArmor may need an exception for bwrap)")]
    finally:
        worker.close()
        slot.release()
    if not result.passed:
        return [f"sandbox probe job did not pass: {result.status} {result.error_name}: "
                f"{result.error_message} {result.stderr_tail}".strip()]
    return []


@functools.lru_cache(maxsize=8)
def self_check(cfg=None) -> list[str]:
    """Problems that prevent isolated execution; empty when every layer works.

    Checks bubblewrap, seccomp, and (by running one probe job in a real sandbox) user/pid/mount
    namespaces and that the job runs as a non-root uid. Each problem names what is missing and how to install it.
    """
    from arenaforge.pipeline.sandbox.config import SandboxConfig

    problems = _static_problems()
    if problems:
        return problems
    return _probe(cfg or SandboxConfig())
