"""The sandbox's own directories never hide a host directory that must be bound in."""

import pytest
from arenaforge.pipeline.sandbox import launcher
from arenaforge.pipeline.sandbox.config import SandboxConfig


@pytest.mark.parametrize("hidden", [launcher.WORK_DIR + "/venv", "/tmp/toolchain",
                                    launcher.HARNESS_DIR])
def test_a_bind_under_the_sandboxs_own_dirs_is_refused(hidden):
    with pytest.raises(RuntimeError, match="would hide it"):
        launcher.sandbox_command("00", SandboxConfig(), binds=(hidden,))


def test_the_interpreters_dirs_are_bound_where_jobs_find_them():
    argv = launcher.sandbox_command("00", SandboxConfig(), binds=("/opt/toolchain",))
    for host, inside in (*launcher._python_binds(), ("/opt/toolchain", "/opt/toolchain")):
        i = argv.index(host)
        assert argv[i - 1] == "--ro-bind" and argv[i + 1] == inside


def test_a_virtual_environment_under_tmp_is_bound_at_its_own_place(monkeypatch):
    # a CI clone under /tmp: its .venv would vanish under each job's fresh /tmp
    monkeypatch.setattr(launcher.sys, "prefix", "/tmp/clone/.venv")
    monkeypatch.setattr(launcher.sys, "base_prefix", "/usr")
    monkeypatch.setattr(launcher.sys, "executable", "/usr/bin/python3")
    monkeypatch.setattr(launcher.os.path, "realpath", lambda p: p)
    binds = dict(launcher._python_binds())
    assert binds["/tmp/clone/.venv"] == launcher.ENV_DIR
    assert launcher._inside("/tmp/clone/.venv/lib/python3/site-packages") == \
        launcher.ENV_DIR + "/lib/python3/site-packages"
    argv = launcher.sandbox_command("00", SandboxConfig())
    assert argv[argv.index("/tmp/clone/.venv") + 1] == launcher.ENV_DIR
