"""The beam: a frontier of the best measured transform sets, so that no first gain locks in.

A greedy walk builds every step on the last keep: a structural step kept first (a persistent
grid, +8 %) stays under everything after it, even when a later step gains more without it.
Here a version is a set of transforms on the original source (``loop.recipe``) and the loop
keeps the ``width`` best kept sets (each one's latency relative to the baseline: the product of
its lineage's measured ratios).  Each step picks one move on one member, ranked by expected
gain: *add* the diagnosis's next entry (a transform not in the set yet), *drop* one transform
of the set ("drop the persistent grid, keep occupancy=4"), or — only when nothing else is left —
change a setting already in the set, or re-measure on top of an arithmetic-only keep what was
measured before it.  A set is measured once (its source digest is the memo) unless its step
ended without a verdict.  After ``STALL`` steps without a keep the pick is a seeded random
perturbation of the ranked moves.  The loop is exhausted when no member has a move left.

Every step is still a row relative to its parent (a ``parent`` record in the ledger names it
and shows the frontier), kept or reverted by the recipe's rules; the loop ends with the best
member on the branch (a last ``parent`` record).
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

from .backends import Version
from .candidate import Candidate
from .choose import Choice, choose
from .decide import KEEP_DEMOTE_PCT, cumulative_ratios
from .diagnosis import LoopDiagnosis, Rec
from . import recipe as rc

PRIOR = 0.98            # the expected ratio of a transform never measured yet
STALL = 3               # steps without a keep before a random perturbation
NO_VERDICT = ("budget", "inconclusive", "crash")
UNPROMISING = "unpromising"   # the stop rule of a loop told to yield when no move is expected to gain (a campaign's)


@dataclass(frozen=True)
class Member:
    """A kept set on the frontier: its record (the baseline's or a keep's) and its latency
    relative to the baseline, as its lineage measured it."""
    record: dict
    est: float

    @property
    def digest(self) -> str:
        """The member's version digest."""
        return self.record["digest"]

    @property
    def keys(self) -> tuple[str, ...]:
        """The member's transform set, as a recipe."""
        return rc.recipe(self.record.get("applied") or ())

    def to_json(self) -> dict:
        """The member as the ledger's beam records show it."""
        return {"iteration": self.record["iteration"], "digest": self.digest[:12], "est": round(self.est, 5),
                "set": list(self.keys)}


@dataclass(frozen=True)
class Drop:
    """The move that removes one transform from a set (``Choice.transform`` of a drop step)."""
    name: str


@dataclass(frozen=True)
class SetResult:
    """A drop's outcome, in the shape of a ``TransformResult``."""
    transform: str
    new_source: str
    description: str
    params: dict
    changed_lines: tuple = ()
    notes: tuple = ()


@dataclass
class Move:
    """One candidate step from a frontier member: the choice to evaluate, what kind of move it is, and its expected
    latency ratio to the baseline."""
    member: Member
    choice: Choice
    kind: str            # add | drop | setting (a setting of a transform in the set) | again (after arithmetic)
    expected: float      # the member's estimate times the move's expected ratio

    def to_json(self) -> dict:
        """The move as the ledger's beam records show it."""
        return {"kind": self.kind, "on": self.member.record["iteration"], "transform": self.choice.transform.name,
                "expected": round(self.expected, 5)}


def estimates(iterations: Iterable[dict]) -> dict[str, float]:
    """digest -> latency relative to the baseline, for the baseline and every keep."""
    est: dict[str, float] = {}
    for r in iterations:
        if r["iteration"] == 0:
            est[r["digest"]] = 1.0
        elif r["status"] == "keep" and r.get("digest") and r.get("base_digest") in est:
            est[r["digest"]] = est[r["base_digest"]] * float((r.get("comparison") or {}).get("ratio") or 1.0)
    return est


def frontier(iterations: list[dict], width: int) -> list[Member]:
    """The ``width`` kept sets (the baseline included) with the lowest estimated latency, earliest first on ties."""
    est = estimates(iterations)
    recs = {r["digest"]: r for r in iterations if r.get("digest") in est and (r["iteration"] == 0 or r["status"] == "keep")}
    return sorted((Member(recs[d], e) for d, e in est.items()), key=lambda m: (m.est, m.record["iteration"]))[:width]


def lineage(iterations: list[dict], digest: str) -> list[dict]:
    """The keeps from the baseline to ``digest`` (what its cumulative ratios multiply)."""
    keeps = {r["digest"]: r for r in iterations if r["iteration"] > 0 and r["status"] == "keep" and r.get("digest")}
    out = []
    while digest in keeps:
        out.append(keeps[digest])
        digest = keeps[digest].get("base_digest")
    return out[::-1]


def measured(records: list[dict]) -> set[str]:
    """Digests measured with a verdict: the baseline and every step's candidates (``parent``
    records list them), less those of steps that ended without one."""
    no_verdict = {r["iteration"] for r in records if r.get("type") == "iteration"
                  and (r.get("decision") or {}).get("rule") in NO_VERDICT}
    out = {r["digest"] for r in records if r.get("type") == "iteration" and r["iteration"] == 0}
    for r in records:
        if r.get("type") == "parent" and r.get("step") not in no_verdict:
            out.update(r.get("candidates") or ())
    return out


def promising(mv: "Move", best: Member) -> bool:
    """``mv`` is expected to beat the best member by the recipe's keep threshold.  On an H100 a campaign's geglu loop,
    at x0.893 after one keep, spent three steps on the baseline (expected x1.000) while a layer norm with headroom
    waited for its share."""
    return mv.expected <= best.est * (1.0 - KEEP_DEMOTE_PCT / 100.0) * (1.0 + 1e-9)    # the prior on the best: yes


def ratios(iterations: Iterable[dict], *, by_setting: bool = False) -> dict:
    """transform (``by_setting``: (transform, its parameters as JSON)) -> the best ratio it was measured at as a step
    of its own (its expected gain)."""
    out: dict = {}
    for r in iterations:
        change = r.get("change") or {}
        t = str(change.get("transform") or "")
        ratio = (r.get("comparison") or {}).get("ratio")
        if t and "+" not in t and isinstance(ratio, (int, float)):
            key = (t, setting(change.get("params"))) if by_setting else t
            out[key] = min(out.get(key, ratio), ratio)
    return out


def expectation(iterations: list[dict]) -> Callable[..., float]:
    """``est(transform, params=None)``: the ratio a move is expected at.  A transform (or one setting of it) measured
    as a step: its best ratio there; never measured: ``PRIOR``.  A setting never measured keeps the prior's promise
    when the transform's other settings did not gain: an occupancy of 1 measured flat says little of 4 (on an H200,
    occupancy=4 gave a layer norm +14 %), and a campaign's loop yields once no move is expected to gain."""
    seen, exact = ratios(iterations), ratios(iterations, by_setting=True)

    def est(t: str, params: Mapping | None = None) -> float:
        if params is None:
            return seen.get(t, PRIOR)
        key = (t, setting(params))
        if key in exact:
            return exact[key]
        return min(seen[t], PRIOR) if t in seen else PRIOR
    return est


def setting(params: Mapping | None) -> str:
    """A transform's parameters as one comparable text."""
    return json.dumps(params or {}, sort_keys=True, default=str)


class Beam:
    """The loop's beam search: each step takes the best expected move over the frontier's members, after STALL steps
    without a keep a random one."""
    def __init__(self, runner, width: int):
        self.r, self.width = runner, width

    def members(self) -> list[Member]:
        """The frontier as the ledger stands."""
        return frontier(self.r.led.iterations, self.width)

    def best(self) -> Member:
        """The frontier member with the lowest estimated latency."""
        return self.members()[0]

    def _canonical(self, c: Candidate, original: Version) -> Candidate:
        """``c`` as its set built from the original source, so that one set is one digest."""
        keys = rc.recipe(c.version.applied)
        v = rc.build(keys, original, kernel_file=self.r.s.kernel_file, kernel=self.r.s.kernel,
                     transforms=self.r.transforms)
        c.version = Version("", v.files if v else c.version.files, None, v.applied if v else keys)
        return c

    def _adds(self, m: Member, a: Version, diag: LoopDiagnosis, original: Version, memo: set[str],
              attempted: set, est: Callable[..., float]) -> list[Move]:
        """The diagnosis's next entry on ``m`` (new transforms first; settings of ones in the set,
        and what an arithmetic-only keep's parent measured, as moves of last resort)."""
        out: list[Move] = []
        have = {rc.name_of(k) for k in m.keys}
        seen = set(attempted)
        for _ in range(8):               # each pass marks memoised candidates tried and asks again
            ch, _manual, _skipped = choose(diag, a, kernel_file=self.r.s.kernel_file, kernel=self.r.s.kernel,
                                           transforms=self.r.transforms, attempted=seen, only=self.r.opt.only,
                                           skip=self.r.opt.skip, max_sweep=self.r.max_sweep(),
                                           untimed=self.r.untimed)
            if ch is None:
                return out
            fresh = [self._canonical(c, original) for c in ch.candidates]
            fresh = [c for c in fresh if c.version.digest not in memo and c.version.digest != m.digest]
            for c in ch.candidates:
                seen.add((a.digest, c.transform or ch.transform.name, json.dumps(c.params, sort_keys=True, default=str)))
            if not fresh:
                continue
            kind = "setting" if ch.transform.name in have else "add"
            expected = min(est(ch.transform.name, c.params) for c in fresh)
            out.append(Move(m, Choice(ch.rec, ch.transform, fresh), kind, m.est * expected))
            return out
        return out

    def _drops(self, m: Member, original: Version, memo: set[str], est: Callable[[str], float]) -> list[Move]:
        out = []
        for key in m.keys:
            rest = tuple(k for k in m.keys if k != key)
            v = rc.build(rest, original, kernel_file=self.r.s.kernel_file, kernel=self.r.s.kernel,
                         transforms=self.r.transforms)
            if v is None or v.digest in memo:
                continue
            name = rc.name_of(key)
            kf = self.r.s.kernel_file
            res = SetResult(f"drop:{name}", v.files[kf], f"drop {key} (keep {', '.join(rest) or 'nothing'})",
                            {"drop": key})
            rec = Rec(id=f"-{getattr(self.r.transforms.get(name), 'playbook_id', '') or name}", name=f"drop {name}",
                      transform=f"drop:{name}")
            out.append(Move(m, Choice(rec, Drop(f"drop:{name}"), [Candidate(v, res, {"drop": key}, res.transform)]),
                            "drop", m.est / est(name)))
        return out

    def moves(self, diagnose: Callable[[Version], LoopDiagnosis], n: int) -> tuple[list[Move], list[Move]]:
        """(moves, moves of last resort) over the frontier, each list best expected first."""
        led = self.r.led
        memo, attempted = measured(led.records), led.attempted()
        est = expectation(led.iterations)

        base = next(r for r in led.iterations if r["iteration"] == 0)
        original = Version("baseline", {p: self.r.git.show(base["commits"]["kept"], p) for p in self.r.s.allowed},
                           base["commits"]["kept"])
        first, last = [], []
        by_digest = {r.get("digest"): r for r in led.iterations if r["iteration"] == 0 or r["status"] == "keep"}
        for m in self.members():
            a = self.r.version_of(m.record)
            diag = diagnose(a)
            if diag.escalate:
                continue
            # after an arithmetic-only keep, the entries measured on its parent wait (item: re-try only what can change)
            parent = by_digest.get(m.record.get("base_digest"))
            skip = set()
            if parent is not None and rc.arithmetic_only(parent.get("applied") or (), m.keys):
                skip = {(a.digest, t, p) for (d, t, p) in attempted if d == parent["digest"]}
            for mv in self._adds(m, a, diag, original, memo, attempted | skip, est):
                (first if mv.kind == "add" else last).append(mv)
            if skip:
                last += [mv for mv in self._adds(m, a, diag, original, memo, attempted, est)
                         if all(c.version.digest not in {x.version.digest for f in first for x in f.choice.candidates}
                                for c in mv.choice.candidates)]
            first += self._drops(m, original, memo, est)
        for lst in (first, last):
            lst.sort(key=lambda mv: mv.expected)
        return first, last

    def pick(self, moves: list[Move], n: int) -> Move:
        """The best expected move, or after ``STALL`` steps without a keep a random one of them."""
        recent = [r["status"] for r in self.r.led.iterations if r["iteration"] > 0][-STALL:]
        if len(recent) == STALL and "keep" not in recent and len(moves) > 1:
            return random.Random(n).choice(moves)
        return moves[0]

    def start_step(self, mv: Move, n: int, stalled: bool) -> Version:
        """Record the step's parent (and the frontier) and put the worktree on the parent's commit."""
        cands = [c.version.digest for c in mv.choice.candidates]
        self.r.led.append({"type": "parent", "step": n, "iteration": mv.member.record["iteration"],
                           "digest": mv.member.digest, "commit": mv.member.record["commits"]["kept"],
                           "frontier": [m.to_json() for m in self.members()], "move": mv.to_json(),
                           "perturbed": stalled, "candidates": cands})
        self.r.git.reset_clean(mv.member.record["commits"]["kept"])
        return self.r.kept_version()

    def finish(self) -> None:
        """The best member ends on the branch (a last ``parent`` record: what ``last_kept`` reads)."""
        best = self.best()
        self.r.led.append({"type": "parent", "step": None, "iteration": best.record["iteration"],
                           "digest": best.digest, "commit": best.record["commits"]["kept"], "final": True,
                           "frontier": [m.to_json() for m in self.members()], "candidates": []})
        self.r.git.reset_clean(best.record["commits"]["kept"])


def lineage_cumulative(iterations: list[dict], digest: str) -> Mapping[str, Any]:
    """``decide.cumulative_ratios`` along ``digest``'s lineage (not every keep: the keeps of a
    beam are not one chain)."""
    return cumulative_ratios((r["status"], r.get("comparison")) for r in lineage(iterations, digest))
