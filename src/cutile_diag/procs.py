"""Child processes every stage starts in a session of its own (``start_new_session=True``)
so that a hang is killed together with everything it started (pytest workers, compilers,
the ncu-profiled worker)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys


def kill_group(proc: subprocess.Popen, *, grace_s: float = 0.0) -> None:
    """Kill ``proc``'s process group and reap it: SIGTERM first when ``grace_s`` > 0 (a
    pytest run flushes its report), SIGKILL after that or at once."""
    if grace_s > 0:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
            return
        except (ProcessLookupError, PermissionError):
            return
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a zombie the kernel will reap
        pass


def _prctl():
    try:
        import ctypes
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):     # not Linux
        return None


_PRCTL = _prctl() if sys.platform.startswith("linux") else None
_PR_SET_PDEATHSIG = 1


def die_with_parent() -> None:
    """``preexec_fn``: the child gets SIGKILL when this process dies, even by SIGKILL
    (Linux PR_SET_PDEATHSIG; a no-op elsewhere).  Its own children die with the group kill."""
    if _PRCTL is not None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGKILL)


def wait_or_kill(proc: subprocess.Popen, timeout: float | None, *, grace_s: float = 10.0) -> bool:
    """Wait for a user's command started in its own session; past ``timeout`` (or on Ctrl-C, which is
    re-raised) its whole group is killed — a pytest run forks workers.  True when it timed out."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc, grace_s=grace_s)
        return True
    except KeyboardInterrupt:
        kill_group(proc)
        raise
    return False
