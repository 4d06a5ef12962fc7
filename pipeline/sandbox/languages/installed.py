"""Where each language's toolchain is on this machine, its version, and what the sandbox binds.

The sandbox sees ``/usr`` (read-only) and the interpreter running arenaforge; a toolchain
elsewhere (a rustup Rust under ``/root``, the ``/etc`` files Debian's JDK links to) is bound
read-only at the same path. Found once per process (``lru_cache``): ``toolchain(id)`` runs at most
one short version command.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from arenaforge.pipeline.sandbox.languages.catalog import LANGUAGE_IDS, LANGUAGES, Language


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """One language's toolchain here.

    Attributes:
        language: The language id.
        available: True when everything a job needs was found.
        version: What the toolchain reports (``g++ 12.2.0``), or None.
        tools: Absolute paths of its commands by role (``compiler``, ``runtime``, ...).
        binds: Host directories outside ``/usr`` the sandbox must bind read-only.
        problem: Why it is unavailable, and how to install it.
    """

    language: str
    available: bool
    version: str | None = None
    tools: dict[str, str] = dataclasses.field(default_factory=dict)
    binds: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def compiled(self) -> bool:
        return LANGUAGES[self.language].compiled


class ToolchainUnavailable(RuntimeError):
    """A job needs a language whose toolchain is not installed; the message says how to."""


_INSTALL = ("install the toolchains with `bash scripts/setup.sh` (Debian's packages, npm for "
            "TypeScript)")


def _output(argv: list[str], timeout: float = 20.0) -> str:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout,
                              check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (done.stdout + done.stderr).strip()


def _outside_usr(path: str) -> bool:
    return not (path == "/usr" or path.startswith("/usr/"))


def _missing(lang: Language, what: str) -> Toolchain:
    return Toolchain(lang.id, False, problem=f"{lang.display}: `{what}` not found; {_INSTALL}")


def _python(lang: Language) -> Toolchain:
    exe = os.path.realpath(sys.executable)  # the interpreter the launcher already binds
    return Toolchain(lang.id, True, f"Python {sys.version.split()[0]}", {"runtime": exe})


def _gcc(lang: Language, command: str) -> Toolchain:
    exe = shutil.which(command)
    if exe is None:
        return _missing(lang, command)
    version = _output([exe, "-dumpfullversion"])
    return Toolchain(lang.id, bool(version), f"{command} {version}",
                     {"compiler": os.path.realpath(exe)},
                     binds=tuple(d for d in (os.path.dirname(os.path.realpath(exe)),)
                                 if _outside_usr(d)),
                     problem=None if version else f"{lang.display}: `{exe}` does not run")


def _java(lang: Language) -> Toolchain:
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        return _missing(lang, "javac" if javac is None else "java")
    home = Path(os.path.realpath(javac)).parent.parent
    release = home / "release"
    version = None
    if release.is_file():
        match = re.search(r'JAVA_VERSION="([^"]+)"', release.read_text(errors="replace"))
        version = f"OpenJDK {match.group(1)}" if match else None
    version = version or _output([javac, "-version"]) or None
    # Debian's JDK links jvm.cfg, java.security... to /etc/java-N-openjdk: bind their targets.
    binds = {str(home)} if _outside_usr(str(home)) else set()
    for sub in ("lib", "conf", "lib/security", "conf/security"):
        folder = home / sub
        if not folder.is_dir():
            continue
        for entry in folder.iterdir():
            if entry.is_symlink():
                target = os.path.realpath(entry)
                if _outside_usr(target) and os.path.exists(target):
                    binds.add(os.path.dirname(target) if os.path.isfile(target) else target)
    binds = {b for b in binds if not any(b != o and b.startswith(o + "/") for o in binds)}
    return Toolchain(lang.id, True, version,
                     {"compiler": os.path.realpath(javac), "runtime": os.path.realpath(java)},
                     binds=tuple(sorted(binds)))


def _node(lang: Language) -> Toolchain:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        return _missing(lang, "node")
    node = os.path.realpath(node)
    version = _output([node, "--version"])
    binds = (os.path.dirname(node),) if _outside_usr(node) else ()
    return Toolchain(lang.id, bool(version), f"Node.js {version}", {"runtime": node}, binds)


def _typescript(lang: Language) -> Toolchain:
    node = _node(LANGUAGES["javascript"])
    tsc = shutil.which("tsc")
    if not node.available:
        return Toolchain(lang.id, False, problem=node.problem)
    if tsc is None:
        return _missing(lang, "tsc")
    package = Path(os.path.realpath(tsc)).parent.parent  # <global node_modules>/typescript
    try:
        meta = json.loads((package / "package.json").read_text())
    except (OSError, ValueError):
        return Toolchain(lang.id, False, problem=f"TypeScript: no package.json beside {tsc}")
    tools = {"runtime": node.tools["runtime"]}
    # TypeScript 7 is a native program (in a platform package); earlier ones are lib/tsc.js.
    native = sorted((package / "node_modules" / "@typescript").glob("typescript-linux-*/lib/tsc"))
    if native:
        tools["compiler"] = str(native[0])
    elif (package / "lib" / "tsc.js").is_file():
        tools["compiler_js"] = str(package / "lib" / "tsc.js")
    else:
        return Toolchain(lang.id, False, problem=f"TypeScript: no compiler in {package}")
    types = package.parent / "@types"
    if (types / "node").is_dir():  # `process`, `require`: programs read stdin through them
        tools["type_roots"] = str(types)
    binds = {str(package.parent)} if _outside_usr(str(package)) else set()
    return Toolchain(lang.id, True, f"TypeScript {meta.get('version', '?')}", tools,
                     tuple(sorted(binds | set(node.binds))))


def _go(lang: Language) -> Toolchain:
    go = shutil.which("go")
    if go is None:
        return _missing(lang, "go")
    root = Path(os.path.realpath(go)).parent.parent
    version_file = root / "VERSION"
    version = (version_file.read_text().split()[0] if version_file.is_file()
               else _output([go, "version"]))
    return Toolchain(lang.id, bool(version), version.replace("go", "Go ", 1),
                     {"compiler": os.path.realpath(go)},
                     (str(root),) if _outside_usr(str(root)) else ())


def _rust(lang: Language) -> Toolchain:
    rustc = shutil.which("rustc")
    if rustc is None:
        return _missing(lang, "rustc")
    # A rustup proxy picks the toolchain from ~/.rustup: ask it once for the real one.
    sysroot = _output([rustc, "--print", "sysroot"]).splitlines()
    root = sysroot[-1] if sysroot and os.path.isdir(sysroot[-1]) else None
    real = os.path.join(root, "bin", "rustc") if root else os.path.realpath(rustc)
    if not os.path.isfile(real):
        return Toolchain(lang.id, False, problem=f"Rust: no rustc at {real}")
    version = _output([real, "--version"])
    binds = (root,) if root and _outside_usr(root) else ()
    # rustc links with `cc`, on Debian a link through /etc/alternatives (not in the sandbox)
    linker = shutil.which("cc") or shutil.which("gcc")
    if linker is None:
        return _missing(lang, "cc")
    return Toolchain(lang.id, bool(version), version.split(" (")[0] or None,
                     {"compiler": real, "linker": os.path.realpath(linker)}, binds)


_DETECT = {"python": _python, "cpp": lambda lang: _gcc(lang, "g++"),
           "c": lambda lang: _gcc(lang, "gcc"), "javascript": _node, "typescript": _typescript,
           "java": _java, "go": _go, "rust": _rust}


@functools.cache
def toolchain(language_id: str) -> Toolchain:
    """The toolchain of one language (found once per process)."""
    return _DETECT[language_id](LANGUAGES[language_id])


def toolchains() -> list[Toolchain]:
    """Every language's toolchain, in ``LANGUAGE_IDS`` order."""
    return [toolchain(lang) for lang in LANGUAGE_IDS]


def require(language_id: str) -> Toolchain:
    """The toolchain of ``language_id``, or ``ToolchainUnavailable`` saying how to install it."""
    found = toolchain(language_id)
    if not found.available:
        raise ToolchainUnavailable(found.problem or f"{language_id}: toolchain unavailable")
    return found


@functools.lru_cache(maxsize=1)
def sandbox_binds() -> tuple[str, ...]:
    """The host directories every available toolchain needs bound (one set for a pool, so that
    jobs of different languages never make its sandboxes restart)."""
    binds = {b for tc in toolchains() if tc.available for b in tc.binds}
    return tuple(sorted(b for b in binds
                        if not any(b != o and b.startswith(o + "/") for o in binds)))
