"""Where a loop lives and what it works on: the session, rebuilt from the ledger's setup record.

``root`` is the user's checkout (read, never written); ``worktree`` the loop's own git
worktree (``loop.worktree``) where its branch is checked out, the candidates are written and
every command runs.

State folder: ``<repo>/cutile-diag-out/optimize/<kernel>/`` by default (``--out`` moves the
root; a further loop of the same kernel on another branch uses ``<kernel>@<branch>/``).  Inside
the repository the whole ``cutile-diag-out/`` (or the ``--out`` root) is written to
``.git/info/exclude`` at setup, so no loop's state makes the next loop's tree dirty; it is never
committed:
``perf_results.md``, ``ledger.jsonl``, ``iterations/<n>/`` (each candidate's files and
diff), ``captures/`` (AOT captures by version digest), ``logs/``.
"""
from __future__ import annotations

import datetime as _dt
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CutileDiagError
from .errors import LoopError
from .git import Git, repo_root, slug  # noqa: F401  (slug: session.slug for callers)
from ..ledger import Ledger, LedgerError
from .worktree import loop_of, worktree_path
from ..output import prog
from ..source.ref import parse_ref

OUT_ROOT = Path("cutile-diag-out")
DEFAULT_OUT = OUT_ROOT / "optimize"


BRANCH_PREFIX = "cutile-perf"


def branch_name(kernel: str, date: _dt.date | None = None, *, prefix: str | None = None) -> str:
    """``<prefix>-<kernel>-<YYYYMMDD>`` (prefix ``cutile-perf``); a prefix git would not take is refused."""
    prefix = BRANCH_PREFIX if prefix is None else prefix
    if not prefix or slug(prefix) != prefix.strip("/") or ".." in prefix:
        raise LoopError(f"--branch-prefix {prefix!r}: use letters, digits, '-', '_' and '.' (e.g. cutile-perf-2)")
    d = date or _dt.date.today()
    return f"{prefix}-{slug(kernel)}-{d:%Y%m%d}"


def free_branch(git: Git, base: str) -> str:
    """``base``, or ``base-2``, ``base-3``, ... : the first name with no branch and no loop worktree
    (a second loop of a kernel on the same day does not collide with the first)."""
    name, n = base, 1
    while git.branch_exists(name) or worktree_path(git.root, name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def state_dir_for(root: Path, kernel: str, out: str | Path | None = None) -> Path:
    """The loop's state folder: ``<out or root/DEFAULT_OUT>/<kernel slug>``, absolute."""
    base = Path(out).expanduser() if out else root / DEFAULT_OUT
    if not base.is_absolute():
        base = (Path.cwd() / base)
    return (base / slug(kernel)).resolve()


def branch_state_dir(state: Path, branch: str) -> Path:
    """Where a further loop of the same kernel on another branch keeps its state."""
    return state.with_name(f"{state.name}@{slug(branch)}")


def owned_folder(root: Path, state_dir: Path) -> str | None:
    """The repo-relative folder the loop owns and git must ignore: all of ``cutile-diag-out/``
    by default (every kernel's loop lives there), else the ``--out`` root; None outside the repo."""
    try:
        rel = Path(state_dir).resolve().relative_to(Path(root).resolve())
    except ValueError:
        return None
    if rel.parts[:1] == OUT_ROOT.parts:
        return OUT_ROOT.as_posix()
    return rel.parent.as_posix() if len(rel.parts) > 1 else rel.as_posix()


@dataclass
class Session:
    """What a loop works on and where: the repository, kernel, allowed files, branch, worktree and state folder, with
    the backend and options (the ledger's setup record)."""
    root: Path
    state_dir: Path
    kernel_file: str                    # repo-relative
    kernel: str                         # as given
    function: str                       # the def it resolves to
    allowed: list[str]                  # files the loop may change: the kernel file + wrapper files
    branch: str
    start_commit: str
    backend: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    capture: dict = field(default_factory=dict)    # {enabled, archs, args}
    location: dict = field(default_factory=dict)

    start_branch: str | None = None                # the user's branch when `optimize` started
    worktree: Path | None = None                   # the loop's worktree (None: its default place)

    def __post_init__(self):
        self.root = Path(self.root)
        if self.worktree is None:
            # a ledger from before loops had worktrees: the default place (loop.worktree.ensure
            # refuses, in one line, a branch still checked out in the user's checkout)
            self.worktree = worktree_path(self.root, self.branch)
        self.worktree = Path(self.worktree)

    @property
    def kernel_path(self) -> Path:
        """The kernel file the loop edits and measures: the worktree's copy."""
        return self.worktree / self.kernel_file

    def git(self) -> Git:
        """The loop's worktree: the only tree the loop resets, commits or deletes in."""
        return Git(self.worktree, writable=True)

    def user_git(self) -> Git:
        """The user's checkout, for read-only checks."""
        own = owned_folder(self.root, self.state_dir)
        return Git(self.root, (own,) if own else ())

    def to_setup(self) -> dict:
        """The session as the ledger's setup record."""
        return {"root": str(self.root), "kernel_file": self.kernel_file, "kernel": self.kernel,
                "function": self.function, "allowed": self.allowed, "branch": self.branch,
                "start_commit": self.start_commit, "backend": self.backend, "options": self.options,
                "capture": self.capture, "location": self.location, "start_branch": self.start_branch,
                "worktree": str(self.worktree)}

    @classmethod
    def from_setup(cls, rec: dict, state_dir: Path) -> "Session":
        """The session from a setup record; a ``LedgerError`` when a field is missing."""
        try:
            return cls(root=Path(rec["root"]), state_dir=Path(state_dir), kernel_file=rec["kernel_file"],
                       kernel=rec["kernel"], function=rec.get("function", rec["kernel"]),
                       allowed=list(rec["allowed"]), branch=rec["branch"], start_commit=rec["start_commit"],
                       backend=rec.get("backend", {}), options=rec.get("options", {}),
                       capture=rec.get("capture", {}), location=rec.get("location", {}),
                       start_branch=rec.get("start_branch"),
                       worktree=Path(rec["worktree"]) if rec.get("worktree") else None)
        except KeyError as e:
            raise LedgerError(f"{state_dir}: the setup record lacks {e}") from None

    def take_commands(self, kept_commit: str | None) -> list[str]:
        """How to bring the kept result into the user's branch (nothing happens by itself)."""
        if not kept_commit or kept_commit == self.start_commit:
            return []
        root = self.root
        return [f"git -C {root} merge {self.branch}",
                f"git -C {root} cherry-pick {self.start_commit[:12]}..{self.branch}",
                f"git -C {root} diff {self.start_commit[:12]} {kept_commit[:12]} -- {' '.join(self.allowed)} "
                f"| git -C {root} apply"]

    def iteration_dir(self, n: int) -> Path:
        """Iteration ``n``'s folder in the state folder."""
        return self.state_dir / "iterations" / f"{n:02d}"


def find_state_dir(kernel_ref: str | None = None, out: str | Path | None = None,
                   cwd: Path | None = None) -> Path:
    """The state folder of an existing loop: by kernel reference (a path in the user's checkout or
    in a loop's worktree), by --out, the loop whose worktree holds ``cwd``, or the only one here."""
    cwd = Path(cwd or Path.cwd())
    if kernel_ref:
        path, name = parse_ref(kernel_ref)
        mine = loop_of(path)
        if mine and Ledger.exists(Path(mine["state_dir"])):
            return Path(mine["state_dir"])
        root = repo_root(path)
        d = state_dir_for(root, name, out)
        found = [x for x in [d, *sorted(d.parent.glob(f"{d.name}@*"))] if Ledger.exists(x)]
        if not found:
            raise LoopError(f"no optimisation loop for {name} in {d}",
                            hint=f"start one with `{prog()} optimize {kernel_ref} ...`")
        return found[0] if len(found) == 1 else _several(found, f"several loops for {name}")
    if out and Ledger.exists(Path(out)):
        return Path(out).resolve()
    mine = loop_of(cwd)
    if not out and mine and Ledger.exists(Path(mine["state_dir"])):
        return Path(mine["state_dir"])
    try:
        base = Path(out).resolve() if out else repo_root(cwd) / DEFAULT_OUT
    except Exception:
        raise LoopError("not inside a git repository, and no --out given",
                        hint="run from the kernel's repository or pass --out / the kernel reference") from None
    found = sorted(p.parent for p in base.glob("*/ledger.jsonl"))
    if not found:
        raise LoopError(f"no optimisation loop under {base}", hint=f"start one with `{prog()} optimize FILE.py::KERNEL`")
    if len(found) == 1:
        return found[0]
    return _several(found, f"several loops under {base}")


def loop_args(state_dir: str | Path) -> str:
    """The arguments that name this loop to a loop command run here (a printed hint must work as
    printed): none when it is the loop found without any (``find_state_dir``), else ``--out STATE``
    (a campaign's loop, a loop of several, a loop under another --out)."""
    state = Path(state_dir).resolve()
    try:
        if find_state_dir() == state:
            return ""
    except CutileDiagError:
        pass
    cwd = Path.cwd().resolve()
    shown = state.relative_to(cwd).as_posix() if state.is_relative_to(cwd) else str(state)
    return f" --out {shlex.quote(shown)}"


def _several(found: list[Path], what: str) -> Path:
    """Several loops match: say how to name one (the user's checkout is on none of their branches)."""
    shown = []
    for d in found:
        try:
            shown.append(f"{d.name} (worktree {Ledger.load(d).setup.get('worktree') or '?'})")
        except LedgerError:
            shown.append(d.name)
    raise LoopError(f"{what}: " + ", ".join(shown),
                    hint="name one: run from inside its worktree, give the kernel's path in its worktree, "
                         "or pass --out with its state folder")


def load_session(state_dir: Path) -> tuple[Session, Ledger]:
    """The session and ledger in ``state_dir``; options and measurement commands given again on ``--resume`` override
    the setup's."""
    led = Ledger.load(state_dir)
    s = Session.from_setup(led.setup, state_dir)
    changed = led.of_type("options")
    if changed:                      # options given again on --resume supersede the setup's
        s.options = dict(changed[-1].get("options") or s.options)
    backends = led.of_type("backend")
    if backends:                     # so do measurement commands given again on --resume
        s.backend = dict(backends[-1]["backend"])
    return s, led
