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


# The watcher: a process of its own (not this one's child in the kill's sense: a session of its own)
# that notes this process's descendants while it lives and, once it is gone (a kill -9 included),
# kills those still running.  Self-contained: it imports nothing of cutile_diag.
_WATCHER = r"""
import os, signal, sys, time
parent, me = int(sys.argv[1]), os.getpid()

def stat(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            rest = f.read().rsplit(")", 1)[1].split()
        return rest[0], int(rest[1]), rest[19]            # state, ppid, start time
    except (OSError, IndexError, ValueError):
        return None

first = stat(parent)
seen = {}
while True:
    now = stat(parent)
    if now is None or now[0] in "ZX" or now[2] != first[2]:
        break
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            st = stat(int(d))
            if st is not None:
                kids.setdefault(st[1], []).append((int(d), st[2]))
    stack = [parent]
    while stack:
        for pid, start in kids.get(stack.pop(), []):
            if pid != me:
                seen[pid] = start
                stack.append(pid)
    time.sleep(0.5)
for pid, start in seen.items():
    st = stat(pid)
    if st is not None and st[2] == start:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
"""


def reap_descendants_on_exit() -> subprocess.Popen | None:
    """Start the watcher of this process (Linux): whatever this process started and leaves running
    when it dies, by any death, is killed — e.g. the agents of a local Ray instance, which outlive a
    ``kill -9`` of the driver that started them."""
    if not sys.platform.startswith("linux"):
        return None
    return subprocess.Popen([sys.executable, "-c", _WATCHER, str(os.getpid())], start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
