"""The git side of the loop, through the git CLI.

The loop owns one branch (``cutile-perf-<kernel>-<YYYYMMDD>``), checked out in its own
worktree (``loop.worktree``): every write, reset and commit below runs there, never in the
user's checkout.  Every measured candidate is committed; a reverted one is reset away
(``git reset --hard <last kept>`` in the worktree) but stays reachable under
``refs/cutile-diag/<branch>/iter-<n>`` so that the ledger's commit ids can always be inspected.
"""
from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .errors import DirtyTreeError, GitError

# commits made by the loop get an identity even where git has none configured
_IDENTITY = {"GIT_AUTHOR_NAME": "cutile-diag", "GIT_AUTHOR_EMAIL": "cutile-diag@localhost",
             "GIT_COMMITTER_NAME": "cutile-diag", "GIT_COMMITTER_EMAIL": "cutile-diag@localhost"}


def _run(args: Sequence[str], cwd: Path, *, check: bool = True, env: dict | None = None,
         input: str | None = None) -> subprocess.CompletedProcess:
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("GIT_TERMINAL_PROMPT", "0")
    try:
        p = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, text=True,
                           input=input, timeout=120)
    except FileNotFoundError:
        raise GitError("git is not installed") from None
    except subprocess.TimeoutExpired:
        raise GitError(f"git {' '.join(args)} took longer than 120 s") from None
    if check and p.returncode != 0:
        msg = (p.stderr or p.stdout).strip().splitlines()
        raise GitError(f"git {' '.join(args)} failed: {msg[-1] if msg else 'exit ' + str(p.returncode)}")
    return p


def slug(name: str) -> str:
    """A name safe in branch and folder names."""
    s = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.")
    return s or "kernel"


def repo_root(path: str | Path) -> Path:
    """The top of the git repository holding ``path``; a ``GitError`` when there is none."""
    p = Path(path).resolve()
    start = p if p.is_dir() else p.parent
    r = _run(["rev-parse", "--show-toplevel"], start, check=False)
    if r.returncode != 0:
        raise GitError(f"{p} is not inside a git repository",
                       hint="the loop commits every kept step: run `git init` and commit the kernel first")
    return Path(r.stdout.strip()).resolve()


@dataclass
class Git:
    """Git commands on one tree; the loop's own folders (``ignore``) never count as changes, and commits and resets
    refuse a tree that is not ``writable``."""
    root: Path
    ignore: tuple[str, ...] = ()          # repo-relative folders the loop owns (its output)
    # True only for the loop's own worktree: resets, commits and deletions refuse any other tree,
    # so no code path can run them in the user's checkout
    writable: bool = False

    def __post_init__(self):
        self.root = Path(self.root).resolve()

    def _writable(self, what: str) -> None:
        if not self.writable:
            raise GitError(f"internal: refusing to {what} in {self.root}: it is not the loop's worktree")

    # -- queries ---------------------------------------------------------------------------
    def head(self) -> str:
        """The commit HEAD points at."""
        return _run(["rev-parse", "HEAD"], self.root).stdout.strip()

    def has_commits(self) -> bool:
        """The repository has a commit (HEAD resolves)."""
        return _run(["rev-parse", "--verify", "-q", "HEAD"], self.root, check=False).returncode == 0

    def branch(self) -> str | None:
        """The checked-out branch, or None when HEAD is detached."""
        r = _run(["symbolic-ref", "--short", "-q", "HEAD"], self.root, check=False)
        return r.stdout.strip() or None

    def branch_exists(self, name: str) -> bool:
        """A local branch ``name`` exists."""
        return _run(["rev-parse", "--verify", "-q", f"refs/heads/{name}"], self.root,
                    check=False).returncode == 0

    def is_tracked(self, path: str) -> bool:
        """Git tracks ``path``."""
        return _run(["ls-files", "--error-unmatch", "--", path], self.root, check=False).returncode == 0

    def rel(self, path: str | Path) -> str:
        """``path`` relative to the repository root (a relative path is taken from the root); a ``GitError`` outside
        it."""
        p = Path(path)
        p = p.resolve() if p.is_absolute() else (self.root / p).resolve()
        try:
            return p.relative_to(self.root).as_posix()
        except ValueError:
            raise GitError(f"{p} is outside the repository {self.root}") from None

    def _ignored(self, rel: str) -> bool:
        return any(rel == ig or rel.startswith(ig.rstrip("/") + "/") for ig in self.ignore)

    def status(self) -> list[tuple[str, str]]:
        """(XY status, path) of every change in the tree, the loop's own folders excluded."""
        out = _run(["status", "--porcelain=v1", "-z", "--untracked-files=all"], self.root).stdout
        items, parts, i = [], out.split("\0"), 0
        while i < len(parts):
            entry = parts[i]
            i += 1
            if not entry:
                continue
            xy, path = entry[:2], entry[3:]
            if xy[0] in "RC":          # rename/copy: the next field is the source path
                i += 1
            if not self._ignored(path):
                items.append((xy, path))
        return items

    def dirty_files(self) -> list[str]:
        """The changed paths of ``status``."""
        return [p for _, p in self.status()]

    def changed_since(self, rev: str) -> list[str]:
        """Files that differ between ``rev`` and the work tree (tracked and untracked)."""
        tracked = _run(["diff", "--name-only", "-z", rev, "--"], self.root).stdout.split("\0")
        untracked = _run(["ls-files", "--others", "--exclude-standard", "-z"], self.root).stdout.split("\0")
        files = {f for f in tracked + untracked if f and not self._ignored(f)}
        return sorted(files)

    def show(self, rev: str, path: str) -> str:
        """``path``'s text at ``rev``; a ``GitError`` when it does not exist there."""
        r = _run(["show", f"{rev}:{path}"], self.root, check=False)
        if r.returncode != 0:
            raise GitError(f"{path} does not exist at {rev[:12]}")
        return r.stdout

    def is_ancestor(self, a: str, b: str) -> bool:
        """``a`` is an ancestor of ``b`` (or the same commit)."""
        return _run(["merge-base", "--is-ancestor", a, b], self.root, check=False).returncode == 0

    # -- changes ---------------------------------------------------------------------------
    def require_clean(self) -> list[str]:
        """Refuse tracked uncommitted changes (the user may expect them measured); return the
        untracked files, which the loop's worktree (made from HEAD) simply does not hold."""
        status = self.status()
        dirty = [p for xy, p in status if xy != "??"]
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise DirtyTreeError(f"the work tree has uncommitted changes: {shown}",
                                 hint="commit or stash them first: the loop works in its own worktree made from "
                                      "HEAD, so uncommitted changes would not be part of what it measures")
        return [p for xy, p in status if xy == "??"]

    def common_dir(self) -> Path:
        """The repository's shared git folder (``.git`` of the main checkout, for every worktree)."""
        p = Path(_run(["rev-parse", "--git-common-dir"], self.root).stdout.strip())
        return (p if p.is_absolute() else self.root / p).resolve()

    def worktrees(self) -> dict[Path, str | None]:
        """Registered worktrees: path -> checked-out branch (None: detached)."""
        out: dict[Path, str | None] = {}
        cur: Path | None = None
        for line in _run(["worktree", "list", "--porcelain"], self.root).stdout.splitlines():
            if line.startswith("worktree "):
                cur = Path(line[len("worktree "):]).resolve()
                out[cur] = None
            elif line.startswith("branch ") and cur is not None:
                out[cur] = line[len("branch "):].removeprefix("refs/heads/")
        return out

    def add_worktree(self, path: Path, branch: str, start: str | None = None) -> None:
        """A worktree at ``path`` on ``branch`` (created from ``start`` when given); the checkout
        this runs from is not touched."""
        _run(["worktree", "prune"], self.root, check=False)
        args = ["worktree", "add", "-q"] + (["-b", branch, str(path), start] if start else [str(path), branch])
        _run(args, self.root)

    def remove_worktree(self, path: Path) -> None:
        """Remove the worktree at ``path`` (forced) and prune its administrative files."""
        _run(["worktree", "remove", "--force", str(path)], self.root, check=False)
        _run(["worktree", "prune"], self.root, check=False)

    def delete_refs(self, prefix: str) -> None:
        """Delete every ref under ``prefix`` (the loop's kept iteration refs)."""
        out = _run(["for-each-ref", "--format=%(refname)", prefix], self.root).stdout.split()
        for ref in out:
            _run(["update-ref", "-d", ref], self.root, check=False)

    def commit(self, paths: Sequence[str], message: str) -> str:
        """Commit exactly ``paths`` (hooks skipped: the committed bytes must be the measured ones)."""
        if not paths:
            raise GitError("internal: nothing to commit")
        self._writable("commit")
        _run(["add", "--", *paths], self.root)
        env = {k: v for k, v in _IDENTITY.items() if not self._configured(k)}
        _run(["commit", "-q", "--no-verify", "-m", message, "--", *paths], self.root, env=env)
        return self.head()

    def _configured(self, var: str) -> bool:
        if os.environ.get(var):
            return True
        key = "user.name" if var.endswith("_NAME") else "user.email"
        return _run(["config", "--get", key], self.root, check=False).returncode == 0

    def reset_clean(self, rev: str) -> None:
        """The worktree exactly at ``rev``: tracked files reset, untracked files deleted."""
        self._writable("reset")
        _run(["reset", "-q", "--hard", rev], self.root)
        for xy, path in self.status():
            if xy == "??":
                f = self.root / path
                if f.is_file() or f.is_symlink():
                    f.unlink()

    def exclude(self, folder: str) -> None:
        """Ignore a repo-relative folder for good through ``.git/info/exclude`` (local, never
        committed): the loop's state folder must not make the next loop's tree dirty."""
        path = Path(_run(["rev-parse", "--git-path", "info/exclude"], self.root).stdout.strip())
        path = path if path.is_absolute() else self.root / path
        line = "/" + folder.strip("/") + "/"
        text = path.read_text() if path.exists() else ""
        if line not in text.splitlines():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text + ("" if not text or text.endswith("\n") else "\n")
                            + f"# cutile-diag optimize: the loops' state\n{line}\n")

    def delete_branch(self, name: str) -> None:
        """Delete branch ``name``, merged or not."""
        _run(["branch", "-q", "-D", name], self.root)

    def keep_ref(self, ref: str, rev: str) -> None:
        """Point ``ref`` at ``rev``: an iteration's commit stays reachable after a revert resets the branch past it.
        Point ``ref`` at ``rev``: an iteration's commit stays reachable after a revert resets the branch past it."""
        _run(["update-ref", ref, rev], self.root)
