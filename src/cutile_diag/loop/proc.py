"""Killable subprocesses with a deadline.

Every command the loop runs for a candidate (tests, benchmarks, captures) runs in its own
session so that a hang is killed together with everything it started (pytest workers,
compilers): ``os.killpg(SIGKILL)`` on the group.  Output goes to files, not pipes, so a
chatty child can never block on a full pipe while we wait for it.
"""
from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ..procs import die_with_parent, kill_group  # noqa: F401  (the loop's callers use proc.*)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: it unwinds like Ctrl-C — the running child's process
    group is killed, the tree goes back to the last kept commit, the iteration stays pending
    in the ledger for ``--resume``."""


@contextlib.contextmanager
def sigterm_unwinds():
    """While active, SIGTERM raises ``Terminated``; a second SIGTERM during the cleanup is ignored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise Terminated()

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def exit_on_sigterm(fn: Callable[[], int], then: str) -> int:
    """``fn()`` with SIGTERM unwinding like Ctrl-C; a SIGTERM is one line (``then``: what the
    user does next) and exit status 143."""
    try:
        with sigterm_unwinds():
            return fn()
    except Terminated:
        print("cutile-diag: terminated (SIGTERM): the running step was killed and the loop's worktree reset to the "
              "last kept commit" + then, file=sys.stderr)
        return 143


class Deadline:
    """An absolute point in time (monotonic clock); ``None`` budget = no limit."""

    def __init__(self, budget_s: float | None):
        self.budget_s = budget_s
        self.start = time.monotonic()
        self.at = None if budget_s is None else self.start + float(budget_s)

    def remaining(self) -> float | None:
        """Seconds left (never below 0); None without a budget."""
        return None if self.at is None else max(0.0, self.at - time.monotonic())

    def expired(self) -> bool:
        """The budget has run out."""
        return self.at is not None and time.monotonic() >= self.at

    def elapsed(self) -> float:
        """Seconds since the deadline was set."""
        return time.monotonic() - self.start

    def timeout(self, cap: float | None = None) -> float | None:
        """Seconds a child may run: what is left, optionally capped."""
        r = self.remaining()
        if cap is None:
            return r
        return cap if r is None else min(r, cap)


@dataclass
class ProcResult:
    """One child's outcome: its exit status, output, whether it was killed at the deadline, and its wall time."""
    argv: Sequence[str] | str
    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float

    @property
    def ok(self) -> bool:
        """Exited 0 before the deadline."""
        return not self.timed_out and self.returncode == 0

    def tail(self, n: int = 1500) -> str:
        """The last ``n`` characters of stdout then stderr."""
        text = (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr).strip()
        return text[-n:]


def run(argv: Sequence[str] | str, *, cwd: str | Path | None = None, env: dict | None = None,
        timeout: float | None = None, shell: bool = False, log: Path | None = None) -> ProcResult:
    """Run to completion or kill at ``timeout`` seconds; never raises for the child's failure.

    ``env`` entries whose value is None are removed from the child's environment (an empty
    string is a value: cuTile passes ``CUDA_HOME=""`` on to tileiras, which then fails)."""
    child_env = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            child_env.pop(k, None)
        else:
            child_env[k] = v
    child_env.setdefault("PYTHONUNBUFFERED", "1")
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="cutile-diag-proc-") as tmp:
        out_p, err_p = Path(tmp) / "out", Path(tmp) / "err"
        with open(out_p, "wb") as fo, open(err_p, "wb") as fe:
            proc = subprocess.Popen(argv, cwd=cwd, env=child_env, stdout=fo, stderr=fe,
                                    stdin=subprocess.DEVNULL, shell=shell, start_new_session=True,
                                    preexec_fn=die_with_parent)
            timed_out = False
            try:
                proc.wait(timeout=None if timeout is None else max(0.01, timeout))
            except subprocess.TimeoutExpired:
                timed_out = True
                kill_group(proc)
            except BaseException:
                kill_group(proc)
                raise
        stdout = out_p.read_text(errors="replace")
        stderr = err_p.read_text(errors="replace")
    res = ProcResult(argv, proc.returncode, stdout, stderr, timed_out, time.monotonic() - t0)
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            cmd = argv if isinstance(argv, str) else " ".join(map(str, argv))
            f.write(f"$ {cmd}\n# rc={res.returncode} timed_out={timed_out} wall={res.wall_s:.2f}s\n")
            f.write(stdout)
            if stderr:
                f.write("\n# stderr\n" + stderr)
            f.write("\n")
    return res
