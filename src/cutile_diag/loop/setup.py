"""Phase 1 of the recipe: refuse a dirty tree, locate the kernel, create the branch and the ledger."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Sequence

from .errors import GitError, LoopError
from .git import Git, repo_root
from .ledger import Ledger
from .locate import locate, parse_ref
from .session import Session, branch_name, branch_state_dir, owned_folder, state_dir_for


def create_session(kernel_ref: str, *, backend: dict, options: dict, out: str | Path | None = None,
                   branch: str | None = None, wrappers: Sequence[str] = (), capture: dict | None = None,
                   echo: Callable[[str], None] | None = None) -> tuple[Session, Ledger]:
    echo = echo or (lambda _s: None)
    path, name = parse_ref(kernel_ref)
    root = repo_root(path)
    bname = branch or branch_name(name)
    state = state_dir_for(root, name, out)
    if Ledger.exists(state):
        prev = Ledger.load(state).setup.get("branch")
        if prev == bname:
            raise LoopError(f"a loop for {name} on branch {bname} already exists in {state}",
                            hint="continue it with --resume, inspect it with `cutile-diag loop status`, "
                                 "or start another one with --branch NAME")
        state = branch_state_dir(state, bname)      # the same kernel again, on another branch
        if Ledger.exists(state):
            raise LoopError(f"a loop for {name} on branch {bname} already exists in {state}",
                            hint="continue it with --resume, or choose another --branch")
    own = owned_folder(root, state)
    git = Git(root, (own,) if own else ())
    if not git.has_commits():
        raise GitError(f"{root} has no commits", hint="commit the kernel first: the loop resets to commits")
    rel = git.rel(path)
    if not git.is_tracked(rel):
        raise GitError(f"{rel} is not tracked by git", hint="commit it first")
    if own:
        git.exclude(own)       # every loop's state folder stays out of this and later loops' dirty checks
    git.require_clean()
    loc = locate(path, name)
    allowed = [rel]
    for w in wrappers:
        wpath = Path(w.rsplit("::", 1)[0]).expanduser().resolve()
        if not wpath.is_file():
            raise LoopError(f"--wrapper {w}: no such file")
        wrel = git.rel(wpath)
        if not git.is_tracked(wrel):
            raise GitError(f"--wrapper {wrel} is not tracked by git", hint="commit it first")
        if wrel not in allowed:
            allowed.append(wrel)
    if not loc.launches and len(allowed) == 1:
        echo(f"note: no launch of {loc.function} in {rel}; only the kernel file may change (--wrapper adds one)")
    if git.branch_exists(bname):
        raise GitError(f"branch {bname} already exists",
                       hint="continue its loop with --resume, or choose another name with --branch")
    start, start_branch = git.head(), git.branch()
    git.create_branch(bname)
    echo(f"branch {bname} from {start[:12]}; allowed to change: {', '.join(allowed)}")
    s = Session(root=root, state_dir=state, kernel_file=rel, kernel=name, function=loc.function, allowed=allowed,
                branch=bname, start_commit=start, backend=dict(backend), options=dict(options),
                capture=dict(capture or {}), location=loc.to_json(), start_branch=start_branch)
    led = Ledger(state)
    led.create(s.to_setup())
    return s, led


def discard_session(s: Session, led: Ledger) -> str:
    """Undo a loop that never measured its baseline (a bad --test-cmd, an incorrect kernel):
    back to the branch it started from, its branch and ledger gone, so the next `optimize`
    starts afresh instead of finding "a loop already exists".  The logs stay for the post-mortem."""
    if led.iterations:
        raise LoopError("internal: refusing to discard a loop with recorded iterations")
    git = s.git()
    if git.branch() == s.branch:
        git.checkout(s.start_branch or s.start_commit)
    if git.branch_exists(s.branch) and git.branch() != s.branch:
        git.delete_branch(s.branch)
    for f in (led.path, led.table_path):
        f.unlink(missing_ok=True)
    for d in ("iterations", "captures", "pycache"):
        shutil.rmtree(s.state_dir / d, ignore_errors=True)
    logs = s.state_dir / "logs"
    return (f"nothing was kept: back on {s.start_branch or s.start_commit[:12]}, branch {s.branch} deleted"
            + (f"; the commands' output is in {logs}" if logs.is_dir() else ""))


def check_resume(s: Session, led: Ledger) -> list[str]:
    """Put the repository where the ledger says the loop is; returns what was done."""
    from .runner import recover
    git = s.git()
    done = []
    cur = git.branch()
    if cur != s.branch:
        if not git.branch_exists(s.branch):
            raise GitError(f"the loop's branch {s.branch} no longer exists")
        if git.dirty_files():
            raise GitError(f"on branch {cur} with uncommitted changes; the loop's branch is {s.branch}",
                           hint=f"commit or stash, then `git checkout {s.branch}`")
        git.checkout(s.branch)
        done.append(f"checked out {s.branch}")
    r = recover(s, led)
    if r:
        done.append(r)
    kept = led.kept_commit() if led.last_kept() else s.start_commit
    head = git.head()
    if head != kept:
        if git.is_ancestor(kept, head):
            raise GitError(f"HEAD ({head[:12]}) has commits after the last kept one ({kept[:12]})",
                           hint="the loop only continues from its own last kept commit; reset the branch or "
                                "record a manual step with `cutile-diag loop record`")
        raise GitError(f"HEAD ({head[:12]}) is not the loop's last kept commit ({kept[:12]})")
    if git.dirty_files():
        raise GitError("the work tree has uncommitted changes: " + ", ".join(git.dirty_files()[:5]),
                       hint="a manual edit? record it with `cutile-diag loop record`; else undo it")
    return done
