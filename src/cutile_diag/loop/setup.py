"""Phase 1 of the recipe: refuse a dirty tree, locate the kernel, create the loop's branch in its
own worktree (the user's checkout stays as it is) and the ledger."""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Callable, Sequence

from . import worktree as worktree_mod
from .errors import GitError, LoopError
from .git import Git, repo_root
from ..ledger import Ledger
from ..source.locate import locate
from ..source.ref import parse_ref, ref_file
from .session import (OUT_ROOT, Session, branch_name, branch_state_dir, free_branch, loop_args, owned_folder,
                      state_dir_for)
from ..output import prog
from .git import _run
from .recover import recover


def create_session(kernel_ref: str, *, backend: dict, options: dict, out: str | Path | None = None,
                   branch: str | None = None, wrappers: Sequence[str] = (), capture: dict | None = None,
                   echo: Callable[[str], None] | None = None,
                   branch_prefix: str | None = None) -> tuple[Session, Ledger]:
    """Start a loop: refuse a dirty tree, locate the kernel, create its branch in its own worktree and write the
    ledger's setup record."""
    echo = echo or (lambda _s: None)
    path, name = parse_ref(kernel_ref)
    root = repo_root(path)
    bname = branch or branch_name(name, prefix=branch_prefix)
    state = state_dir_for(root, name, out)
    if Ledger.exists(state) and Ledger.load(state).setup.get("branch") == bname:
        raise LoopError(f"a loop for {name} on branch {bname} already exists in {state}",
                        hint=f"continue it with --resume, inspect it with `{prog()} loop status{loop_args(state)}`, "
                             "or start another one with --branch NAME")
    own = owned_folder(root, state)
    git = Git(root, (own,) if own else ())
    if not branch:
        bname = free_branch(git, bname)             # a second loop today: <branch>-2, not a collision
    if Ledger.exists(state):
        state = branch_state_dir(state, bname)      # the same kernel again, on another branch
        if Ledger.exists(state):
            raise LoopError(f"a loop for {name} on branch {bname} already exists in {state}",
                            hint="continue it with --resume, or choose another --branch")
    if not git.has_commits():
        raise GitError(f"{root} has no commits", hint="commit the kernel first: the loop resets to commits")
    rel = git.rel(path)
    if not git.is_tracked(rel):
        raise GitError(f"{rel} is not tracked by git", hint="commit it first")
    if own and own != OUT_ROOT.as_posix() and _tracked_under(git, own):
        # `--out src` must not make src/ the loop's folder, hidden from the dirty check
        raise LoopError(f"--out {own}: that folder holds tracked files; the loop's state needs a folder of its own",
                        hint="e.g. --out cutile-diag-out/optimize (the default) or a folder outside the repository")
    if own:
        git.exclude(own)       # every loop's state folder stays out of this and later loops' dirty checks
    untracked = git.require_clean()
    if untracked:
        shown = ", ".join(untracked[:3]) + (f" and {len(untracked) - 3} more" if len(untracked) > 3 else "")
        echo(f"note: untracked files are not in the loop's worktree (made from HEAD): {shown}")
    loc = locate(path, name)
    allowed = [rel]
    for w in wrappers:
        wpath = Path(ref_file(w)).expanduser().resolve()
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
    wt = worktree_mod.worktree_path(root, bname)
    if wt.exists():
        raise GitError(f"{wt} already exists", hint=f"a leftover loop worktree: `git worktree remove --force {wt}`")
    s = Session(root=root, state_dir=state, kernel_file=rel, kernel=name, function=loc.function, allowed=allowed,
                branch=bname, start_commit=start, backend=dict(backend), options=dict(options),
                capture=dict(capture or {}), location=loc.to_json(), start_branch=start_branch, worktree=wt)
    wt.parent.mkdir(parents=True, exist_ok=True)
    git.add_worktree(wt, bname, start)
    try:
        worktree_mod.register(wt, state, root)
        led = Ledger(state)
        led.create(s.to_setup())
    except BaseException:
        worktree_mod.remove(s, delete_branch=True)
        raise
    echo(f"branch {bname} from {start[:12]} in the loop's worktree {wt}; allowed to change: {', '.join(allowed)}")
    return s, led


def _tracked_under(git: Git, folder: str) -> bool:
    return bool(_run(["ls-files", "-z", "--", folder], git.root).stdout.strip("\0"))


def discard_session(s: Session, led: Ledger) -> str:
    """Undo a loop that never measured its baseline (a bad --test-cmd, an incorrect kernel):
    back to the branch it started from, its branch and ledger gone, so the next `optimize`
    starts afresh instead of finding "a loop already exists".  The logs stay for the post-mortem."""
    if led.iterations:
        raise LoopError("internal: refusing to discard a loop with recorded iterations")
    worktree_mod.remove(s, delete_branch=True)
    for f in (led.path, led.table_path):
        f.unlink(missing_ok=True)
    for d in ("iterations", "captures", "pycache"):
        shutil.rmtree(s.state_dir / d, ignore_errors=True)
    logs = s.state_dir / "logs"
    return (f"nothing was kept: the loop's worktree and branch {s.branch} were removed (your checkout was not "
            "touched)" + (f"; the commands' output is in {logs}" if logs.is_dir() else ""))


def check_resume(s: Session, led: Ledger) -> list[str]:
    """Put the loop's worktree where the ledger says the loop is; returns what was done.
    Only the worktree is looked at and changed: the user's checkout may be on any branch,
    with any uncommitted work."""
    done = []
    made = worktree_mod.ensure(s)
    if made:
        done.append(made)
    r = recover(s, led)
    if r:
        done.append(r)
    git = s.git()
    kept = led.kept_commit() if led.last_kept() else s.start_commit
    head = git.head()
    if head != kept:
        if git.is_ancestor(kept, head):
            raise GitError(f"the loop's branch has commits after the last kept one ({head[:12]} after {kept[:12]})",
                           hint="the loop only continues from its own last kept commit; reset the branch in its "
                                f"worktree ({s.worktree}) or record a manual step with `{prog()} loop record`")
        raise GitError(f"the loop's worktree is on {head[:12]}, not the loop's last kept commit ({kept[:12]})",
                       hint=f"in {s.worktree}: git reset --hard {kept[:12]}")
    dirty = git.dirty_files()
    if dirty:
        raise GitError(f"the loop's worktree {s.worktree} has uncommitted changes: " + ", ".join(dirty[:5]),
                       hint=f"a manual edit? record it with `{prog()} loop record`; else undo it there")
    return done
