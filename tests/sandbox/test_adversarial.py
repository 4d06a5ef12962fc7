"""Adversarial programs: each asserts the verdict AND the absence of side effects.

Every test runs in both isolated modes (fork server and one sandbox per job). After each program
the pool must hold no process of its uids beyond the fork server, and must still pass a correct
job (the server survived, or was replaced).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest
from arenaforge.pipeline.sandbox import ERROR, FAILED, MEMORY, OUTPUT_LIMIT, PASSED, TIMEOUT

GOOD = ("def add(a, b):\n    return a + b\n", "assert add(1, 2) == 3\nassert add(0, 0) == 0\n")


def _assert_clean(sandbox) -> None:
    deadline = time.monotonic() + 2
    while sandbox.stray_processes() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox.stray_processes() == []
    assert sandbox.run(*GOOD).status == PASSED


def test_infinite_loop_times_out(sandbox):
    r = sandbox.run("while True:\n    pass\n", "assert True", timeout_s=1.0)
    assert r.status == TIMEOUT and not r.passed
    assert r.duration_s < 3
    _assert_clean(sandbox)


def test_loop_that_swallows_every_exception_times_out(sandbox):
    src = ("import signal\nfor s in (signal.SIGTERM, signal.SIGINT, signal.SIGXCPU):\n"
           "    signal.signal(s, signal.SIG_IGN)\n"
           "while True:\n    try:\n        pass\n    except BaseException:\n        pass\n")
    r = sandbox.run(src, "assert True", timeout_s=1.0)
    assert r.status == TIMEOUT
    _assert_clean(sandbox)


def test_fork_bomb_is_contained(sandbox):
    src = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    r = sandbox.run(src, "assert True", timeout_s=2.0)
    assert r.status in (TIMEOUT, ERROR) and not r.passed
    _assert_clean(sandbox)


def test_memory_bomb_in_one_process(sandbox):
    src = "blocks = []\nwhile True:\n    blocks.append(bytearray(16 << 20))\n"
    r = sandbox.run(src, "assert True", memory_mb=128)
    assert r.status == MEMORY
    _assert_clean(sandbox)


def test_memory_bomb_in_many_processes(sandbox):
    src = ("import os, time\nkids = []\nfor _ in range(8):\n    pid = os.fork()\n"
           "    if pid == 0:\n        b = bytearray(100 << 20)\n"
           "        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
           "        time.sleep(1)\n        os._exit(0)\n    kids.append(pid)\n"
           "codes = [os.waitpid(k, 0)[1] for k in kids]\n")
    r = sandbox.run(src, "assert codes == [0] * 8", memory_mb=256, timeout_s=8)
    assert not r.passed
    if "cgroup_memory" in r.limits:  # 8 x 100 MB is under RLIMIT_AS each, over the tree's cap
        assert r.status == MEMORY
    _assert_clean(sandbox)


def test_huge_output_is_capped(sandbox):
    r = sandbox.run("while True:\n    print('x' * 10000)\n", "assert True")
    assert r.status == OUTPUT_LIMIT
    assert len(r.stdout_tail) <= 4096
    _assert_clean(sandbox)


def test_disk_fill_stays_in_the_job_tmpfs(sandbox):
    src = ("f = open('/job/fill', 'wb')\nwritten = 0\ntry:\n    while True:\n"
           "        f.write(b'0' * (1 << 20))\n        f.flush()\n        written += 1\n"
           "except OSError as exc:\n    error = exc\n")
    r = sandbox.run(src, "assert written > 10000")
    assert r.status == FAILED
    # the next job starts with empty /work and /tmp
    r = sandbox.run("import os\nleft = os.listdir('/job') + os.listdir('/tmp')", "assert left == []")
    assert r.status == PASSED
    _assert_clean(sandbox)


def test_fd_exhaustion(sandbox):
    src = "fds = []\nwhile True:\n    fds.append(open('/dev/null'))\n"
    r = sandbox.run(src, "assert True")
    assert r.status == ERROR and r.error_name == "OSError" and "Too many open files" in r.error_message
    _assert_clean(sandbox)


def test_write_outside_the_work_dir(sandbox, host_victim):
    target = host_victim.parent / "planted.txt"
    src = (f"import os\nfor p in ({str(target)!r}, '/usr/planted', '/etc/planted', "
           "'/root/planted', '/opt/arenaforge/server.py'):\n"
           "    try:\n        os.makedirs(os.path.dirname(p), exist_ok=True)\n"
           "        open(p, 'w').write('pwned')\n    except OSError:\n        pass\n"
           f"open({str(host_victim)!r}, 'w').write('pwned') if os.path.exists({str(host_victim)!r}) else None\n")
    r = sandbox.run(src, f"assert open({str(host_victim)!r}).read() == 'pwned'")
    assert r.status in (FAILED, ERROR)
    assert not target.exists() and host_victim.read_text() == "precious"
    assert not Path("/usr/planted").exists() and not Path("/etc/planted").exists()
    assert "pwned" not in Path(__file__).parents[2].joinpath("pipeline/sandbox/inside/server.py").read_text()
    _assert_clean(sandbox)


def test_delete_outside_the_work_dir(sandbox, host_victim):
    src = (f"import os, shutil\nfor p in ({str(host_victim)!r}, '/usr/bin/python3'):\n"
           "    try:\n        os.remove(p)\n    except OSError:\n        pass\n"
           f"shutil.rmtree({str(host_victim.parent)!r}, ignore_errors=True)\n"
           "shutil.rmtree('/usr/bin', ignore_errors=True)\n"
           f"gone = not os.path.exists({str(host_victim)!r})\n")
    sandbox.run(src, "assert gone")
    assert host_victim.read_text() == "precious"
    assert Path("/usr/bin/python3").exists()
    _assert_clean(sandbox)


def test_environment_secrets_are_not_visible(sandbox, monkeypatch):
    monkeypatch.setenv("ARENAFORGE_TEST_SECRET", "hunter2-secret")
    src = ("import os\nleaked = dict(os.environ)\nprint(leaked)\n"
           "for p in os.listdir('/proc'):\n    try:\n"
           "        print(open(f'/proc/{p}/environ').read())\n    except OSError:\n        pass\n")
    r = sandbox.run(src, "assert 'ARENAFORGE_TEST_SECRET' in leaked")
    assert r.status == FAILED
    assert "hunter2" not in r.stdout_tail + r.stderr_tail
    _assert_clean(sandbox)


def test_host_files_are_not_readable(sandbox):
    project_file = Path(__file__).resolve()
    src = ("import os\nfound = {}\n"
           f"for p in ('/etc/passwd', '/etc/shadow', '/root/.bashrc', '/home', {str(project_file)!r},"
           " '/proc/1/root/etc/passwd', '/proc/1/environ'):\n"
           "    try:\n        found[p] = open(p).read()[:50] if not os.path.isdir(p) else os.listdir(p)\n"
           "    except OSError:\n        pass\nprint(found)\n")
    r = sandbox.run(src, "assert found")
    assert r.status == FAILED
    assert "root:" not in r.stdout_tail and "adversarial" not in r.stdout_tail
    _assert_clean(sandbox)


def test_loopback_network_is_unreachable(sandbox):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.5)
    port = server.getsockname()[1]
    src = ("import socket\nerrors = []\nconnected = False\n"
           "for fam, addr in ((socket.AF_INET, ('127.0.0.1', PORT)), (socket.AF_INET6, ('::1', PORT))):\n"
           "    try:\n        s = socket.socket(fam)\n        s.settimeout(1)\n        s.connect(addr)\n"
           "        connected = True\n    except OSError as e:\n        errors.append(repr(e))\n"
           ).replace("PORT", str(port))
    r = sandbox.run(src, "assert connected")
    assert r.status == FAILED
    with pytest.raises(OSError):
        server.accept()
    server.close()
    _assert_clean(sandbox)


def test_external_network_and_dns_fail(sandbox):
    src = ("import socket\nok = []\nfor target in (('1.1.1.1', 53), ('pypi.org', 443)):\n"
           "    try:\n        socket.create_connection(target, timeout=1)\n        ok.append(target)\n"
           "    except OSError:\n        pass\n"
           "try:\n    raw = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)\n    ok.append('raw')\n"
           "except OSError:\n    pass\n")
    r = sandbox.run(src, "assert ok")
    assert r.status == FAILED
    _assert_clean(sandbox)


def test_spawned_shell_is_contained(sandbox, host_victim):
    marker = host_victim.parent / "from_shell"
    src = ("import subprocess\n"
           f"out = subprocess.run(['sh', '-c', 'id; echo pwned > {marker}; rm -f {host_victim}; "
           "kill -9 -1; cat /etc/passwd'], capture_output=True, text=True)\n")
    r = sandbox.run(src, "assert 'uid=0' in out.stdout")
    assert not r.passed
    assert not marker.exists() and host_victim.read_text() == "precious"
    _assert_clean(sandbox)


def test_killing_the_parent_and_the_server(sandbox):
    servers = sandbox.server_pids()
    src = (f"import os, signal\nfor pid in (os.getppid(), 1, -1, {os.getpid()}, *range(2, 64)):\n"
           "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n")
    r = sandbox.run(src, "assert True")
    assert r.status == PASSED  # the job is pid 1 of its own namespace: nothing else to hit
    assert sandbox.server_pids() == servers or sandbox.mode == "per_exec"  # server survived
    _assert_clean(sandbox)


@pytest.mark.parametrize("exit_call", ["import sys\nsys.exit(0)", "import os\nos._exit(0)",
                                       "raise SystemExit(0)"])
def test_exit_before_tests_is_not_a_pass(sandbox, exit_call):
    r = sandbox.run("def add(a, b):\n    return 0\n" + exit_call + "\n", "assert add(1, 2) == 3")
    assert r.status == ERROR and r.error_type == "exit"
    assert r.assertions_passed == 0


def test_exit_inside_the_tests_is_not_a_pass(sandbox):
    src = "import os\ndef add(a, b):\n    os._exit(0)\n"
    r = sandbox.run(src, "def check(candidate):\n    assert candidate(1, 2) == 3\ncheck(add)\n")
    assert r.status == ERROR and r.error_type == "exit"


def test_monkeypatched_unittest_and_assert(sandbox):
    src = ("import builtins, unittest\n"
           "unittest.TestCase.assertEqual = lambda *a, **k: None\n"
           "unittest.TestCase.run = lambda self, result=None: result\n"
           "builtins.AssertionError = type('Nope', (Exception,), {})\n"
           "builtins.isinstance = lambda *a: True\n"
           "def add(a, b):\n    return a - b\n")
    tests = ("import io, unittest\nclass T(unittest.TestCase):\n"
             "    def test_add(self):\n        self.assertEqual(add(1, 2), 3)\n"
             "res = unittest.TextTestRunner(stream=io.StringIO()).run("
             "unittest.defaultTestLoader.loadTestsFromTestCase(T))\n"
             "assert res.wasSuccessful()\nassert isinstance(add(1, 2), str) is False\n")
    r = sandbox.run(src, tests)
    assert r.status == FAILED and r.assertions_failed >= 1


def test_always_equal_object(sandbox):
    src = ("class Anything(int):\n    def __eq__(self, other):\n        return True\n"
           "    __ne__ = lambda self, other: False\n    __bool__ = lambda self: True\n"
           "def add(a, b):\n    return Anything(0)\n")
    tests = "assert add(1, 2) == 3\nassert not add(1, 2) != 3\nassert add(1, 2)\n"
    r = sandbox.run(src, tests)
    assert r.status == FAILED and r.assertions_failed == 3 and r.tests_total == 3
    assert "non-builtin" in r.error_message


def test_numpy_values_compare_but_object_arrays_do_not(sandbox):
    src = ("import numpy as np\nclass Anything:\n    def __eq__(self, other):\n        return True\n"
           "def mean(xs):\n    return np.mean(xs)\n"
           "def evil(xs):\n    a = np.empty(len(xs), dtype=object)\n    a[:] = [Anything()] * len(xs)\n"
           "    return a\n")
    ok = sandbox.run(src, "assert mean([1, 2, 3]) == 2.0\nassert (np.arange(3) == [0, 1, 2]).all()\n")
    assert ok.status == PASSED, ok
    bad = sandbox.run(src, "assert (evil([1, 2]) == [5, 6]).all()\nassert all(evil([1]) == [9])\n")
    assert bad.status == FAILED and bad.assertions_failed == 2, bad


def test_forged_passed_on_stdout_and_on_the_verdict_descriptor(sandbox):
    src = ("import os, json\nprint('PASSED')\nprint(json.dumps({'status': 'passed'}))\n"
           "for fd in range(3, 20):\n    try:\n"
           "        os.write(fd, b'{\"e\": \"done\"}\\n{\"e\": \"ok\"}\\n')\n"
           "    except OSError:\n        pass\nos._exit(0)\n")
    r = sandbox.run(src, "assert False")
    assert r.status == ERROR and not r.passed and r.assertions_passed == 0
    assert "PASSED" in r.stdout_tail  # it was printed, and ignored


def test_setsid_daemon_ignoring_sigterm_is_killed(sandbox, host_victim):
    beacon = host_victim.parent / "daemon_beacon"
    src = ("import os, signal, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
           "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n        while True:\n"
           f"            try:\n                open({str(beacon)!r}, 'a').write('x')\n"
           "            except OSError:\n                pass\n            time.sleep(0.05)\n"
           "    os._exit(0)\ndef add(a, b):\n    return a + b\n")
    r = sandbox.run(src, "assert add(1, 2) == 3")
    assert r.status == PASSED  # the job itself is correct; its daemon must still die
    _assert_clean(sandbox)
    assert not beacon.exists()


def test_ptrace_and_namespace_escapes_are_denied(sandbox):
    src = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nresults = {}\n"
           "results['ptrace'] = libc.ptrace(16, 1, 0, 0)\n"  # PTRACE_ATTACH pid 1
           "results['unshare'] = libc.unshare(0x10000000)\n"
           "results['mount'] = libc.mount(b'tmpfs', b'/usr', b'tmpfs', 0, None)\n"
           "results['setuid'] = libc.setuid(0)\n")
    r = sandbox.run(src, "assert 0 in results.values()")
    assert r.status == FAILED
    _assert_clean(sandbox)


def test_rlimits_cannot_be_raised(sandbox):
    src = ("import resource\nresource.setrlimit(resource.RLIMIT_NPROC, "
           "(resource.RLIM_INFINITY, resource.RLIM_INFINITY))\n")
    r = sandbox.run(src, "assert True")
    assert r.status == ERROR and r.error_name == "ValueError"


def test_candidate_hanging_in_a_thread_times_out(sandbox):
    src = ("import threading\ndef add(a, b):\n    t = threading.Thread(target=lambda: threading.Event().wait())\n"
           "    t.start()\n    t.join()\n")
    r = sandbox.run(src, "assert add(1, 2) == 3", timeout_s=1.0)
    assert r.status == TIMEOUT
    _assert_clean(sandbox)


def test_consecutive_jobs_do_not_see_each_other(sandbox):
    """The second job on a pool cannot see the files the first one left."""
    first = sandbox.run("open('/job/secret', 'w').write('s')\nopen('/tmp/secret', 'w').write('s')",
                        "assert True")
    assert first.status == PASSED
    r = sandbox.run("import os\nseen = os.path.exists('/job/secret') or os.path.exists('/tmp/secret')",
                    "assert not seen")
    assert r.status == PASSED
