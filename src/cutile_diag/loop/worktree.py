"""The loop's own git worktree: where its branch is checked out and every edit, reset and
commit happens.  The user's checkout (branch, HEAD, index, files) is never written.

It lives in the repository's git folder, ``<git common dir>/cutile-diag/worktrees/<branch>``,
not in the user's tree: no untracked folder in their ``git status``, no second copy of their
tests for pytest to collect, nothing for ``git clean -fdx`` to delete under a running loop.
``<branch>.json`` beside it points back at the loop's state folder, so that loop commands run
from inside the worktree (a manual edit) find their loop.
"""
from __future__ import annotations

import json
from pathlib import Path

from .errors import GitError
from .git import Git, slug
from ..output import prog

WORKTREES = Path("cutile-diag") / "worktrees"


def worktree_path(root: Path, branch: str) -> Path:
    """Where the loop's worktree for ``branch`` goes: under the repository's common git folder."""
    return Git(root).common_dir() / WORKTREES / slug(branch)


def _pointer(wt: Path) -> Path:
    return wt.with_name(wt.name + ".json")


def register(wt: Path, state_dir: Path, root: Path) -> None:
    """Write the worktree's pointer file: the loop's state folder and the user's repository."""
    _pointer(wt).write_text(json.dumps({"state_dir": str(state_dir), "root": str(root)}) + "\n")


def loop_of(path: str | Path) -> dict | None:
    """``{state_dir, root}`` of the loop whose worktree holds ``path``; None elsewhere."""
    p = Path(path).resolve()
    for d in [p, *p.parents]:
        if d.parent.as_posix().endswith("/" + WORKTREES.as_posix()) and _pointer(d).is_file():
            try:
                return json.loads(_pointer(d).read_text())
            except (OSError, json.JSONDecodeError):
                return None
    return None


def ensure(s) -> str | None:
    """The loop's worktree exists and has the loop's branch checked out (``s``: a ``loop.session.Session``).  Returns what was done
    (None: nothing to do); refuses in one line any other state, never touching another tree."""
    g = Git(s.root)
    wt = Path(s.worktree).resolve()
    trees = g.worktrees()
    if wt in trees:
        if trees[wt] != s.branch:
            raise GitError(f"refusing to work in {wt}: it has {trees[wt] or 'a detached HEAD'} checked out, "
                           f"not the loop's branch {s.branch}")
        return None
    if wt.exists() and any(wt.iterdir()):
        raise GitError(f"refusing to use {wt}: it exists but is not a worktree of {s.root}")
    if not g.branch_exists(s.branch):
        raise GitError(f"the loop's branch {s.branch} no longer exists",
                       hint=f"nothing of this loop is left to continue; start another with `{prog()} optimize`")
    holder = next((p for p, b in trees.items() if b == s.branch), None)
    if holder is not None:
        raise GitError(f"the loop's branch {s.branch} is checked out in {holder}; the loop works only in its "
                       "own worktree and never in your checkout",
                       hint=f"check out another branch there (e.g. `git -C {holder} switch -`), then run this again")
    wt.parent.mkdir(parents=True, exist_ok=True)
    g.add_worktree(wt, s.branch)
    register(wt, s.state_dir, s.root)
    return f"the loop's worktree {wt} was made again from its branch {s.branch}"


def remove(s, *, delete_branch: bool = False) -> list[str]:
    """Remove the loop's worktree (and with ``delete_branch`` its branch and kept refs)."""
    g = Git(s.root)
    wt = Path(s.worktree).resolve()
    done = []
    trees = g.worktrees()
    if wt in trees:
        if trees[wt] != s.branch:
            raise GitError(f"refusing to remove {wt}: it has {trees[wt] or 'a detached HEAD'} checked out, "
                           f"not the loop's branch {s.branch}")
        g.remove_worktree(wt)
        done.append(f"removed the worktree {wt}")
    else:
        done.append(f"no worktree at {wt} (already removed)")
    _pointer(wt).unlink(missing_ok=True)
    if delete_branch and g.branch_exists(s.branch):
        holder = next((p for p, b in g.worktrees().items() if b == s.branch), None)
        if holder is not None:
            raise GitError(f"the branch {s.branch} is checked out in {holder}; not deleting it")
        g.delete_branch(s.branch)
        g.delete_refs(f"refs/cutile-diag/{s.branch}/")
        done.append(f"deleted the branch {s.branch} and its refs/cutile-diag/{s.branch}/*")
    return done
