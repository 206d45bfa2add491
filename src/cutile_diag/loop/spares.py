"""Child processes started ahead of need (issue 21: the wall time of a step).

A compile child or a measurement worker spends most of its start in imports — torch alone is
2-5 s, which cuTile's compiler pulls in too — and a worker then creates its CUDA context: a
step waits for that once per candidate.  ``Spares`` keeps ``n`` children started ahead, each
blocked on its first line of stdin after those imports (``--spare``); ``take()`` hands one out
and starts its replacement at once, so the next step finds it ready.  A child serves one
version: that version's files go into its import system (``source.overrides.install``)
and cannot be taken back out.

The children share one environment (a spare does not know its version yet): the files of a
version always reach them as overrides, never from the disk, so no per-version bytecode
cache is needed for them.  How many: ``wanted`` (the runner's sweep width), ``0`` turns
them off; ``CUTILE_DIAG_SPARES`` overrides both — a small host (CI: 2 cores) gets none by
default, because a spare that is never taken is a torch import wasted.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Mapping

from . import proc
from ..errors import UsageError

MIN_CORES = 8           # below this the spares' imports compete with the work they would speed up


def wanted(n: int, *, env: str | None = None) -> int:
    """How many spares to keep: ``n`` on a host with cores to spare, else 0; ``CUTILE_DIAG_SPARES``
    (``env``: its value, default read from the environment) decides first, and must be a count."""
    env = os.environ.get("CUTILE_DIAG_SPARES") if env is None else env
    if env is not None and env.strip():
        try:
            count = int(env)
        except ValueError:
            count = -1
        if count < 0:
            raise UsageError(f"CUTILE_DIAG_SPARES={env!r}: must be a whole number of spare processes (0: none)",
                             hint="unset it for the default (none on hosts of < 8 cores)")
        return count
    return max(0, n) if (os.cpu_count() or 1) >= MIN_CORES else 0


def child_env(env: Mapping[str, str | None]) -> dict[str, str]:
    """``os.environ`` with ``env`` over it (None removes a variable), unbuffered."""
    out = dict(os.environ)
    for k, v in env.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = v
    out.setdefault("PYTHONUNBUFFERED", "1")
    return out


class Spares:
    """A pool of ``n`` child processes of ``module`` started ahead, waiting on stdin for their job, for one env and
    cwd."""
    def __init__(self, module: str, *, env: Mapping[str, str | None], cwd: Path | str, n: int,
                 log_dir: Path | None = None):
        """``log_dir``: each child's stderr goes to its own file there (``p.log_path``); without
        one it is a pipe, read with the reply."""
        self.module = module
        self.argv = [sys.executable, "-m", module, "--spare"]
        self.env, self.cwd, self.n = child_env(env), str(cwd), max(0, int(n))
        self.log_dir = Path(log_dir) if log_dir else None
        self.ready: list[subprocess.Popen] = []
        self.started = 0
        self.fill()

    def _start(self) -> subprocess.Popen:
        self.started += 1
        log = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            log = self.log_dir / f"spare-{self.module.rsplit('.', 1)[-1]}-{os.getpid()}-{self.started}.log"
        err = open(log, "ab") if log else subprocess.PIPE
        try:
            p = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=err, start_new_session=True,
                                 preexec_fn=proc.die_with_parent)
        finally:
            if log:
                err.close()          # the child holds its own descriptor
        p.log_path = log             # type: ignore[attr-defined]
        return p

    def fill(self) -> None:
        """Start children until ``n`` are ready (dead ones dropped)."""
        self.ready = [p for p in self.ready if p.poll() is None]
        while len(self.ready) < self.n:
            self.ready.append(self._start())

    def take(self) -> subprocess.Popen | None:
        """A started child (its imports may still be running: it reads stdin after them), or
        None when the pool is off; the pool starts a replacement."""
        p = None
        while self.ready and p is None:
            q = self.ready.pop(0)
            if q.poll() is None:
                p = q
            else:
                _reap(q)
        if self.n:
            self.fill()
        return p

    def matches(self, env: Mapping[str, str | None], cwd: Path | str) -> bool:
        """The pool's children were started with this env and cwd."""
        return child_env(env) == self.env and str(cwd) == self.cwd

    def close(self) -> None:
        """Reap every waiting child."""
        for p in self.ready:
            _reap(p)
        self.ready = []


def _reap(p: subprocess.Popen) -> None:
    for f in (p.stdin, p.stdout, p.stderr):
        try:
            if f is not None:
                f.close()          # EOF on stdin: a spare exits by itself
        except OSError:
            pass
    try:
        p.wait(timeout=2)
    except subprocess.TimeoutExpired:
        proc.kill_group(p)
