"""The seccomp deny-list loaded by the harness before untrusted code runs.

Built on the host with ``pyseccomp`` (libseccomp) and handed to the harness as raw BPF, so the
sandbox needs neither libseccomp nor an import to load it. A deny-list, not an allow-list: the
namespaces, uid and rlimits are the walls; this removes the kernel surfaces a job never needs
(network sockets, ptrace, namespace and mount calls, BPF, io_uring, TIOCSTI...).
"""

from __future__ import annotations

import errno
import functools
import tempfile

_DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "bpf", "perf_event_open",
    "userfaultfd", "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "move_mount",
    "open_tree", "fsopen", "fsmount", "fspick", "mount_setattr", "io_uring_setup",
    "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key", "kexec_load",
    "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot", "swapon",
    "swapoff", "syslog", "acct", "quotactl", "open_by_handle_at", "name_to_handle_at",
    "lookup_dcookie", "fanotify_init", "pidfd_open", "pidfd_getfd", "pidfd_send_signal",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "vhangup", "iopl", "ioperm",
    "modify_ldt", "uselib", "nfsservctl", "sysfs", "_sysctl",
)
_AF_UNIX = 1
_TIOCSTI, _TIOCLINUX = 0x5412, 0x541C
# CLONE_NEWTIME, NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET
_CLONE_NS_FLAGS = (0x80, 0x20000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000)


def available() -> str | None:
    """None when a filter can be built here, else what is missing."""
    try:
        import pyseccomp  # noqa: F401
    except (ImportError, OSError) as exc:
        return (f"seccomp: cannot import pyseccomp ({exc}); install with `apt-get install "
                "libseccomp2` and `pip install pyseccomp`")
    return None


@functools.lru_cache(maxsize=1)
def build_bpf_hex() -> str:
    """The deny-list compiled to BPF for the native architecture, as hex."""
    import pyseccomp as sc

    filt = sc.SyscallFilter(sc.ALLOW)
    for name in _DENIED:
        try:
            filt.add_rule(sc.ERRNO(errno.EPERM), name)
        except (ValueError, RuntimeError, OSError):
            pass  # a syscall this kernel/libseccomp does not know cannot be called either
    filt.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.NE, _AF_UNIX))
    for req in (_TIOCSTI, _TIOCLINUX):
        filt.add_rule(sc.ERRNO(errno.EPERM), "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, req))
    for flag in _CLONE_NS_FLAGS:
        filt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
    # clone3 passes its flags in memory the filter cannot read; ENOSYS makes libc fall back to clone.
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    with tempfile.TemporaryFile() as f:
        filt.export_bpf(f)
        f.seek(0)
        return f.read().hex()
