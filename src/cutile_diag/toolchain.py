"""Locates the binary tools cutile-diag drives and runs them with clear failures.

tileiras / tileirdisasm / ptxas come from the ``nvidia-cuda-tileiras`` / ``nvidia-cuda-nvcc``
wheels (``cuda-tile[tileiras]``), cuobjdump and nvdisasm from ``nvidia-cuda-cuobjdump`` /
``nvidia-cuda-nvdisasm``; all install into ``site-packages/nvidia/cu13/bin``.  We look
there first (the same place cuTile itself looks), then on PATH.
"""
from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .errors import ToolFailedError, ToolNotFoundError
from .errors import UsageError

# tool -> the pip package that installs it
TOOL_PACKAGES = {
    "tileiras": "nvidia-cuda-tileiras (pip install 'cuda-tile[tileiras]')",
    "tileirdisasm": "nvidia-cuda-tileiras (pip install 'cuda-tile[tileiras]')",
    "ptxas": "nvidia-cuda-nvcc (pip install 'cuda-tile[tileiras]')",
    "cuobjdump": "nvidia-cuda-cuobjdump (pip install nvidia-cuda-cuobjdump)",
    "nvdisasm": "nvidia-cuda-nvdisasm (pip install nvidia-cuda-nvdisasm)",
    "ncu": "Nsight Compute (part of the CUDA toolkit, not on PyPI)",
}

# tileiras --gpu-name accepts these (13.4/13.5); cuTile targets sm_80 and newer.
SUPPORTED_ARCHS = ("sm_80", "sm_86", "sm_87", "sm_88", "sm_89", "sm_90", "sm_100", "sm_103",
                   "sm_107", "sm_110", "sm_120", "sm_121")


def _pip_bin_dirs() -> list[Path]:
    dirs = []
    try:
        import nvidia.cu13 as cu13  # type: ignore
        for p in cu13.__path__:
            dirs.append(Path(p) / "bin")
    except ImportError:
        pass
    return dirs


@functools.cache
def find_tool(name: str) -> Path:
    """Absolute path of a tool, or ToolNotFoundError naming the package to install."""
    env = os.environ.get(f"CUTILE_DIAG_{name.upper()}")
    if env:
        if Path(env).is_file():
            return Path(env)
        raise ToolNotFoundError(f"CUTILE_DIAG_{name.upper()}={env} does not exist")
    for d in _pip_bin_dirs():
        p = d / name
        if p.is_file() and os.access(p, os.X_OK):
            return p
    found = shutil.which(name)
    if found:
        return Path(found)
    raise ToolNotFoundError(f"'{name}' not found", hint=f"install {TOOL_PACKAGES.get(name, name)}")


def have_tool(name: str) -> bool:
    """Whether ``find_tool`` finds ``name``."""
    try:
        find_tool(name)
        return True
    except ToolNotFoundError:
        return False


@dataclass(frozen=True)
class ToolResult:
    """A finished tool run: the command, exit code and output."""
    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_tool(name: str, args: list[str], *, timeout: float = 300.0, check: bool = True,
             cwd: str | os.PathLike | None = None) -> ToolResult:
    """Run tool ``name`` with ``args`` (CUDA_HOME unset, see the comment); a timeout, an
    unrunnable file or (with ``check``) a non-zero exit raises ToolFailedError in one line."""
    exe = find_tool(name)
    env = dict(os.environ)
    # tileiras picks libnvvm from $CUDA_HOME when set; an older toolkit there fails every
    # compile with the unhelpful "failed to compile Tile IR program".
    env.pop("CUDA_HOME", None)
    env.pop("CUDA_PATH", None)
    cmd = [str(exe), *map(str, args)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=cwd,
                           env=env, errors="replace")
    except subprocess.TimeoutExpired:
        raise ToolFailedError(f"{name} timed out after {timeout:g} s") from None
    except OSError as e:   # not executable, wrong format (e.g. a CUTILE_DIAG_* override)
        raise ToolFailedError(f"{name} ({exe}) cannot be run: {e.strerror or e}") from None
    res = ToolResult(cmd, p.returncode, p.stdout, p.stderr)
    if check and p.returncode != 0:
        msg = _first_error_line(p.stderr or p.stdout) or "no message"
        raise ToolFailedError(f"{name} {_exit_text(p.returncode)}: {msg}")
    return res


def _exit_text(rc: int) -> str:
    # a negative code is a signal: say "killed by SIGSEGV" rather than "exited with -11"
    if rc < 0:
        import signal
        try:
            return f"was killed by {signal.Signals(-rc).name}"
        except ValueError:
            return f"was killed by signal {-rc}"
    return f"exited with {rc}"


def require_tools(*names: str) -> None:
    """Fail up front, before any work, when a tool is missing (the error names its package)."""
    for n in names:
        find_tool(n)


def _first_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "error" in ln.lower():
            return ln
    return lines[0] if lines else ""


@functools.cache
def tool_version(name: str) -> str | None:
    """Short version string, e.g. '13.5.37' or 'V13.4.92'; None if the tool is missing."""
    try:
        out = run_tool(name, ["--version"], timeout=60, check=False)
    except (ToolNotFoundError, ToolFailedError):
        return None
    text = out.stdout + out.stderr
    m = re.search(r"V(\d+\.\d+\.\d+)", text) or re.search(r"release (\d+\.\d+)", text)
    return m.group(1) if m else (text.strip().splitlines() or [None])[-1]


def tool_versions(names=("tileiras", "tileirdisasm", "ptxas", "cuobjdump", "nvdisasm")) -> dict:
    """The versions of the tools and of the cuda-tile and torch packages (None when absent)."""
    import importlib.metadata as md
    out: dict[str, str | None] = {n: tool_version(n) for n in names}
    for pkg in ("cuda-tile", "torch"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


def normalize_arch(arch: str) -> str:
    """'sm_90', 'sm90', '90', '9.0', 'sm_90a' -> 'sm_90'; UsageError lists valid ones."""
    a = arch.strip().lower()
    m = re.fullmatch(r"(?:sm_?)?(\d+)(?:\.(\d))?a?", a)
    if m:
        a = f"sm_{m.group(1)}{m.group(2) or ''}"
    if a not in SUPPORTED_ARCHS:
        raise UsageError(f"unknown arch '{arch}'", hint="supported: " + ", ".join(SUPPORTED_ARCHS))
    return a
