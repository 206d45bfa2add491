"""The machine-readable playbook: ``references/playbook/<ID>-<slug>.toml``, one entry each.

Entry schema (see ``references/playbook/README.md``)::

    id, name, summary, transform ("" = manual), alternatives, changes, risk, risks, verify,
    references, bounded_by_roof, already_applied (predicate), last_resort
    [[applies_when]]  expr, reason, cite, penalty, root_cause   # any clause true -> the entry applies
    [[adjust]]        when, note, effect_high, effect_low
    [priority]        <class> = rank (lower = earlier), default = rank
    [expected_effect] low, high   # speedup fraction: t_before / t_after - 1
    [recipe]          steps, when_autotuned   # `loop next` lines, with kernel placeholders (RECIPE_FIELDS)

Every predicate is parsed at load time and every fact key checked against the vocabulary,
so a typo in a TOML fails loudly (``PlaybookError`` naming file and field) instead of
silently never matching.
"""
from __future__ import annotations

import importlib.resources
import os
import tomllib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from ..errors import CutileDiagError
from ..transforms.registry import TRANSFORMS
from .classes import CLASSES
from .evidence import FACTS
from .predicates import Predicate, PredicateError

REFERENCES_ENV = "CUTILE_DIAG_REFERENCES"

# placeholders a [recipe] line may use (filled from the kernel's location by loop.manual); a line
# that is exactly "{ops}" or "{ops:KIND,KIND}" expands to the kernel's memory ops of those kinds
RECIPE_FIELDS = frozenset({"kernel", "wrappers", "path", "constants", "tuned_kind", "tuned_function", "tuned_line"})

RISK_LEVELS = ("none", "low", "medium", "high")


class PlaybookError(CutileDiagError):
    """A playbook file is missing, malformed or uses unknown facts / classes / transforms."""


@dataclass(frozen=True)
class Clause:
    """One ``applies_when`` clause: the predicate, the reason it renders, the facts it cites."""
    predicate: Predicate
    reason: str
    cite: tuple[str, ...] = ()
    penalty: float = 0.0
    root_cause: bool = False    # the finding invalidates tuning anything else: rank first in every class


@dataclass(frozen=True)
class Adjust:
    """A predicate that, when true, adds a note and may override the expected effect's bounds."""
    predicate: Predicate
    note: str
    effect_high: float | None = None
    effect_low: float | None = None


@dataclass
class Entry:
    """One playbook TOML: when it applies, its rank per class, expected effect, risk, transform
    and the steps ``loop next`` shows."""
    id: str
    slug: str
    name: str
    summary: str
    path: Path
    clauses: list[Clause]
    priority: dict[str, float]
    effect_low: float
    effect_high: float
    transform: str = ""
    alternatives: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    risk: str = "low"
    risks: list[str] = field(default_factory=list)
    verify: list[str] = field(default_factory=list)
    references: list[str] = field(default_factory=list)
    bounded_by_roof: bool = True
    already_applied: Predicate | None = None
    adjust: list[Adjust] = field(default_factory=list)
    last_resort: bool = False      # offered only when nothing else is left
    recipe: list[str] = field(default_factory=list)            # `loop next` steps (RECIPE_FIELDS placeholders)
    recipe_autotuned: list[str] = field(default_factory=list)  # instead, when the kernel is already autotuned

    @property
    def automatic(self) -> bool:
        """Whether a transform applies it (else the user edits by hand)."""
        return bool(self.transform)

    def rank(self, cls: str) -> float:
        """The entry's priority in class ``cls`` (lower ranks first; default 100)."""
        return self.priority.get(cls, self.priority.get("default", 100.0))

    def fact_keys(self) -> set[str]:
        """Every fact key its clauses, citations, adjustments and already-applied test read."""
        keys: set[str] = set()
        for c in self.clauses:
            keys |= c.predicate.names | set(c.cite)
        for a in self.adjust:
            keys |= a.predicate.names
        if self.already_applied:
            keys |= self.already_applied.names
        return keys


@dataclass
class Playbook:
    """The loaded playbook entries and the folder they came from."""
    entries: list[Entry]
    root: Path

    def by_id(self, id_: str) -> Entry:
        """The entry ``id_``; KeyError when there is none."""
        for e in self.entries:
            if e.id == id_:
                return e
        raise KeyError(id_)

    @property
    def ids(self) -> list[str]:
        """Every entry id, in file order."""
        return [e.id for e in self.entries]


def packaged_references() -> Path | None:
    """``cutile_diag/diagnose/references``: in a checkout a symlink to the top-level references/
    (the one source), in a wheel the copy setuptools made of it (pyproject package-data)."""
    cand = importlib.resources.files(__package__) / "references"
    return Path(cand).resolve() if isinstance(cand, Path) and (cand / "playbook").is_dir() else None


def references_dir() -> Path:
    """$CUTILE_DIAG_REFERENCES, else the package's references (checkout or installed wheel),
    else a references/ folder above the package (a checkout whose symlink was not materialised)."""
    env = os.environ.get(REFERENCES_ENV)
    if env:
        p = Path(env).expanduser()
        if not (p / "playbook").is_dir():
            raise PlaybookError(f"{REFERENCES_ENV}={env} has no playbook/ folder")
        return p
    packaged = packaged_references()
    if packaged is not None:
        return packaged
    for parent in Path(__file__).resolve().parents:
        cand = parent / "references"
        if (cand / "playbook").is_dir():
            return cand
    raise PlaybookError("cannot find the references/ folder with the playbook",
                        hint=f"set {REFERENCES_ENV} to the cutile-diag checkout's references/ folder")


def _pred(expr, where: str) -> Predicate:
    if not isinstance(expr, str):
        raise PlaybookError(f"{where}: predicate must be a string")
    try:
        p = Predicate(expr)
    except PredicateError as e:
        raise PlaybookError(f"{where}: {e.message}") from None
    unknown = sorted(n for n in p.names if n not in FACTS)
    if unknown:
        raise PlaybookError(f"{where}: unknown fact{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}",
                            hint="facts are listed in references/evidence-facts.md")
    return p


def _str_list(d: dict, key: str, where: str) -> list[str]:
    v = d.get(key, [])
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(x, str) for x in v):
        raise PlaybookError(f"{where}: '{key}' must be a list of strings")
    return v


def load_entry(path: Path) -> Entry:
    """Parse and check one playbook TOML; a missing field, bad predicate or unknown fact key
    raises PlaybookError naming the file."""
    where = str(path)
    try:
        d = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise PlaybookError(f"{where}: not valid TOML: {e}") from None
    for req in ("id", "name", "summary", "applies_when", "priority", "expected_effect"):
        if req not in d:
            raise PlaybookError(f"{where}: missing '{req}'")
    id_ = str(d["id"])
    stem_id, _, slug = path.stem.partition("-")
    if stem_id != id_:
        raise PlaybookError(f"{where}: file name starts with '{stem_id}' but id is '{id_}'")
    clauses = []
    raw_clauses = d["applies_when"]
    if not isinstance(raw_clauses, list) or not raw_clauses:
        raise PlaybookError(f"{where}: 'applies_when' must be a non-empty array of tables")
    for i, c in enumerate(raw_clauses):
        cw = f"{where}: applies_when[{i}]"
        if not isinstance(c, dict) or "expr" not in c or "reason" not in c:
            raise PlaybookError(f"{cw}: needs 'expr' and 'reason'")
        cite = tuple(_str_list(c, "cite", cw))
        bad = [k for k in cite if k not in FACTS]
        if bad:
            raise PlaybookError(f"{cw}: cites unknown fact {', '.join(bad)}")
        clauses.append(Clause(_pred(c["expr"], cw), str(c["reason"]), cite, float(c.get("penalty", 0)),
                              bool(c.get("root_cause", False))))
    prio = d["priority"]
    if not isinstance(prio, dict) or not prio:
        raise PlaybookError(f"{where}: 'priority' must be a table of class = rank")
    for k, v in prio.items():
        if k != "default" and k not in CLASSES:
            raise PlaybookError(f"{where}: priority for unknown class '{k}'",
                                hint="classes: " + ", ".join(CLASSES))
        if not isinstance(v, (int, float)):
            raise PlaybookError(f"{where}: priority.{k} must be a number")
    eff = d["expected_effect"]
    try:
        lo, hi = float(eff["low"]), float(eff["high"])
    except (KeyError, TypeError, ValueError):
        raise PlaybookError(f"{where}: expected_effect needs numeric 'low' and 'high'") from None
    if lo > hi:
        raise PlaybookError(f"{where}: expected_effect low > high")
    transform = str(d.get("transform", ""))
    alternatives = _str_list(d, "alternatives", where)
    for t in [transform, *alternatives]:
        if t and t not in TRANSFORMS:
            raise PlaybookError(f"{where}: unknown transform '{t}'",
                                hint="transforms: " + ", ".join(sorted(TRANSFORMS)))
    risk = str(d.get("risk", "low"))
    if risk not in RISK_LEVELS:
        raise PlaybookError(f"{where}: risk must be one of {', '.join(RISK_LEVELS)}")
    adjust = []
    for i, a in enumerate(d.get("adjust", [])):
        aw = f"{where}: adjust[{i}]"
        if not isinstance(a, dict) or "when" not in a or "note" not in a:
            raise PlaybookError(f"{aw}: needs 'when' and 'note'")
        adjust.append(Adjust(_pred(a["when"], aw), str(a["note"]),
                             float(a["effect_high"]) if "effect_high" in a else None,
                             float(a["effect_low"]) if "effect_low" in a else None))
    applied = d.get("already_applied")
    recipe = d.get("recipe", {})
    if not isinstance(recipe, dict) or set(recipe) - {"steps", "when_autotuned"}:
        raise PlaybookError(f"{where}: [recipe] holds 'steps' and 'when_autotuned' (lists of lines)")
    steps, tuned = (_recipe_lines(recipe, k, f"{where}: recipe.{k}") for k in ("steps", "when_autotuned"))
    return Entry(
        id=id_, slug=slug, name=str(d["name"]), summary=str(d["summary"]), path=path,
        clauses=clauses, priority={k: float(v) for k, v in prio.items()}, effect_low=lo, effect_high=hi,
        transform=transform, alternatives=alternatives, changes=_str_list(d, "changes", where),
        risk=risk, risks=_str_list(d, "risks", where), verify=_str_list(d, "verify", where),
        references=_str_list(d, "references", where), bounded_by_roof=bool(d.get("bounded_by_roof", True)),
        already_applied=_pred(applied, f"{where}: already_applied") if applied else None,
        adjust=adjust, last_resort=bool(d.get("last_resort", False)), recipe=steps, recipe_autotuned=tuned)


def _recipe_lines(d: dict, key: str, where: str) -> list[str]:
    import re
    import string
    lines = _str_list(d, key, where)
    for ln in lines:
        if re.fullmatch(r"\{ops(:[a-z_]+(,[a-z_]+)*)?\}", ln.strip()):
            continue
        try:
            names = {f for _, f, _, _ in string.Formatter().parse(ln) if f is not None}
        except ValueError as e:
            raise PlaybookError(f"{where}: {e} in {ln!r} (write literal braces as {{{{ }}}})") from None
        bad = sorted(names - RECIPE_FIELDS)
        if bad:
            raise PlaybookError(f"{where}: unknown placeholder {', '.join(bad)}",
                                hint="placeholders: " + ", ".join(sorted(RECIPE_FIELDS)) + ", and a line {ops[:KINDS]}")
    return lines


def load_playbook(root: str | Path | None = None) -> Playbook:
    """Every ``*.toml`` under ``root`` (or its ``playbook/``; default: the shipped references),
    ids unique."""
    base = Path(root) if root is not None else references_dir()
    pdir = base / "playbook" if (base / "playbook").is_dir() else base
    files = sorted(p for p in pdir.glob("*.toml"))
    if not files:
        raise PlaybookError(f"{pdir}: no playbook entries (*.toml)")
    entries, seen = [], {}
    for f in files:
        e = load_entry(f)
        if e.id in seen:
            raise PlaybookError(f"{f}: id '{e.id}' already used by {seen[e.id].name}")
        seen[e.id] = f
        entries.append(e)
    return Playbook(entries, base)


@lru_cache(maxsize=4)
def _cached(root: str) -> Playbook:
    return load_playbook(root)


def default_playbook() -> Playbook:
    """The shipped playbook, loaded once per process."""
    return _cached(str(references_dir()))
