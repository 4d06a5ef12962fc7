"""The sandbox's own directories never hide a host directory that must be bound in."""

import pytest
from arenaforge.pipeline.sandbox import launcher
from arenaforge.pipeline.sandbox.config import SandboxConfig


@pytest.mark.parametrize("hidden", [launcher.WORK_DIR + "/venv", "/tmp/venv",
                                    launcher.HARNESS_DIR])
def test_a_bind_under_the_sandboxs_own_dirs_is_refused(hidden):
    with pytest.raises(RuntimeError, match="would hide it"):
        launcher.sandbox_command("00", SandboxConfig(), binds=(hidden,))


def test_the_interpreters_dirs_are_bound_at_their_own_paths():
    argv = launcher.sandbox_command("00", SandboxConfig(), binds=("/opt/toolchain",))
    for path in (*launcher._python_dirs(), "/opt/toolchain"):
        i = argv.index(path)
        assert argv[i - 1] == "--ro-bind" and argv[i + 1] == path
