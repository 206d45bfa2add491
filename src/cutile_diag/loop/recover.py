"""After the loop process died: close the interrupted iteration, in the loop's worktree only.

The candidate of an iteration is saved in ``iterations/<n>/`` before the ``begin`` record
is written (``save_candidates``), so a kill at any later point loses nothing.  Recovery
first copies whatever the worktree holds beyond the last kept commit (a half-written
candidate, a manual edit in progress) into ``iterations/<n>/worktree-at-recovery/``, then
resets the worktree and records a ``crash`` row.  The user's checkout is never looked at.
"""
from __future__ import annotations

import difflib
import shutil
from pathlib import Path
from typing import Callable, Mapping, Sequence

from . import decide as decide_mod
from . import worktree as worktree_mod
from ..ledger import Ledger, short_text as _short
from .session import Session


def save_files(dest: Path, base: Mapping[str, str], files: Mapping[str, str]) -> list[str]:
    """Write the files of ``files`` that differ from ``base`` (flattened names) and their diff
    into ``dest``; returns the repo-relative paths written."""
    changed = [p for p in sorted(files) if files[p] != base.get(p)]
    if not changed:
        return []
    dest.mkdir(parents=True, exist_ok=True)
    diff = []
    for p in changed:
        (dest / p.replace("/", "__")).write_text(files[p])
        diff += difflib.unified_diff(base.get(p, "").splitlines(True), files[p].splitlines(True), f"a/{p}", f"b/{p}")
    (dest / "candidate.diff").write_text("".join(diff))
    return changed


def save_candidates(idir: Path, base: Mapping[str, str], candidates: Sequence[Mapping[str, str]]) -> Path | None:
    """Every candidate's files before the iteration can fail: ``idir`` for one, ``idir/point-<i>``
    for the points of a sweep.  None when nothing differs (nothing is promised then)."""
    wrote = False
    for i, files in enumerate(candidates):
        dest = idir if len(candidates) == 1 else idir / f"point-{i + 1}"
        wrote |= bool(save_files(dest, base, files))
    return idir if wrote else None


def _save_worktree(s: Session, kept: str, dest: Path) -> list[str]:
    """Copy every file of the worktree that differs from ``kept`` (tracked or not) into ``dest``."""
    git = s.git()
    saved = []
    for path in git.changed_since(kept):
        src = s.worktree / path
        if src.is_file():
            (dest / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / path)
            saved.append(path)
    return saved


def recover(session: Session, led: Ledger, *, echo: Callable[[str], None] | None = None) -> str | None:
    """Close the pending iteration: save and reset the loop's worktree to the last kept commit,
    record a ``crash`` row.  Returns what was done (None when nothing was pending).  Refuses,
    in one line, to act on anything but the loop's own worktree."""
    echo = echo or (lambda _s: None)
    pend = led.pending()
    if pend is None:
        return None
    made = worktree_mod.ensure(session)
    git = session.git()
    kept = led.kept_commit() if led.last_kept() else session.start_commit
    n = pend["iteration"]
    rescue = session.iteration_dir(n) / "worktree-at-recovery"
    left = _save_worktree(session, kept, rescue)
    git.reset_clean(kept)
    where = f"the loop's worktree {session.worktree} was reset to {kept[:12]} (your checkout was not touched)"
    if left:
        where += f"; what it held beyond that is saved in {rescue}"
    if made:
        where = made + "; " + where
    if n == 0:
        led.abandon(0, "the baseline was interrupted: it is measured again")
        echo(f"the baseline was interrupted: it will be measured again; {where}")
        return "baseline interrupted: it will be measured again"
    saved = pend.get("saved")
    reason = f"the loop process died during iteration {n}; {where}"
    if saved and Path(saved).is_dir() and any(Path(saved).iterdir()):
        reason += f"; the candidate's files are saved in {saved}"
    entry = pend.get("entry")
    verified = [r for r in led.of_type("progress") if r.get("iteration") == n and r.get("step") == "verified"]
    led.append({"type": "iteration", "iteration": n, "optimization": _short(
                    f"{entry['id']} {entry.get('transform') or 'manual'} (interrupted)" if entry else "interrupted"),
                "latency_ms": None, "status": "crash", "entry": entry,
                # a crash row never claims PASS: FAIL when its verification failed, else not established
                "correctness": "FAIL" if verified and verified[-1].get("passed") is False else "-",
                "base_commit": pend.get("base_commit"), "base_digest": pend.get("base_digest"),
                # the interrupted candidates count as tried: a step that killed the loop is not run again
                "change": {"tried": pend.get("tried") or []},
                "decision": decide_mod.reject("interrupted", reason, status="crash").to_json(),
                "commits": {"base": pend.get("base_commit"), "candidate": None, "kept": kept}})
    echo(f"recovered: {reason}")
    return reason
