"""The loop's records: ``perf_results.md`` (the table) and ``ledger.jsonl`` (everything behind it).

``perf_results.md`` holds only the Markdown table of the perf recipe, exactly these columns::

    | iteration | optimization | latency_ms | correctness | status |

``latency_ms`` has six decimals: the candidate's latency from the full comparison, or — when
that never finished (a crash or hang after a sweep's screening) — the chosen point's screening
latency (``latency_source: "screening"`` in the ledger); ``-`` when the candidate was never
timed at all (a correctness failure stops before measuring; a crash or an interruption before
the first timing).  ``correctness`` is the verification's verdict: PASS when it ran and passed,
FAIL when a check failed, ``-`` when no check decided it (a ``crash`` row never claims PASS: the
candidate did not finish; the ledger keeps any verification that ran).  A table made by the
simulated backend shows ``not checked (simulated)`` instead of PASS: nothing ran on a GPU.
``status`` keep/revert/crash, or inconclusive (sampled to its cap with the CI still wider than
the decision needs: not kept, and the set may be measured again).  One row per iteration; iteration 0 is the baseline.

``ledger.jsonl`` is one JSON object per line:

* ``{"type": "setup", ...}`` — first line: kernel, files, branch, start commit, backend,
  configurations, classification, options;
* ``{"type": "begin", "iteration": n, ...}`` — written before an iteration touches anything;
* ``{"type": "iteration", "iteration": n, ...}`` — the row and everything behind it:
  configurations and their records, the diagnosis and evidence that chose the step, the
  change, the IR diff summary against the last kept version, the roofline points, the
  decision and its reason, commit ids; ``costs`` (seconds a check / a run / a capture took:
  the baseline's, then any slower run, what ``loop.budget`` plans with), ``plan`` (points
  screened and ``skipped (budget)``, confirmation rounds), ``confirmations`` (when a sweep's
  screened winner lost its confirmation and the next point was confirmed);
* ``{"type": "progress", "iteration": n, "step": "verified", "passed": bool}`` — the
  candidate's verification finished (what an interrupted iteration's row reports);
* ``{"type": "backend", ...}`` — measurement commands given again on ``--resume``;
* ``{"type": "next", ...}`` — what ``loop next`` proposed for a manual edit;
* ``{"type": "stop", ...}`` — why the loop stopped (a later ``--resume`` may go on);
* ``{"type": "abandoned", "iteration": 0, ...}`` — an interrupted baseline, measured again.

A ``begin`` without its ``iteration`` means the process died mid-iteration; ``--resume``
(or any loop command) turns it into a ``crash`` row after resetting the tree.  Both files
are rewritten whole through a temp file + rename, the ledger first (it is the source of
truth: the table is regenerated from it).
"""
from __future__ import annotations

import gzip
import json
import math
import time
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from .errors import CutileDiagError
from .output import prog, to_jsonable, write_atomic

TABLE_FILE = "perf_results.md"
LEDGER_FILE = "ledger.jsonl"
LEDGER_GZ = LEDGER_FILE + ".gz"      # committed results keep ledgers gzipped: read, never written

COLUMNS = ("iteration", "optimization", "latency_ms", "correctness", "status")
STATUSES = ("keep", "revert", "crash", "inconclusive")   # inconclusive: not kept, no verdict (decide.py)
NOT_CHECKED = "-"
SIMULATED = "not checked (simulated)"
CORRECTNESS = ("PASS", "FAIL", NOT_CHECKED, SIMULATED)
SCHEMA = "cutile-diag.loop/1"


def find_ledgers(folder: str | Path) -> list[Path]:
    """Every ledger under ``folder``: ``ledger.jsonl``, or its gzipped copy where no plain one sits beside it."""
    folder = Path(folder)
    gz = [g for g in folder.rglob(LEDGER_GZ) if not (g.parent / LEDGER_FILE).exists()]
    return sorted([*folder.rglob(LEDGER_FILE), *gz])


def _first_cut(r: Mapping[str, Any], key: Any, cuts: Counter) -> bool:
    """Whether ``r`` is ``key``'s first step the time budget ended before its verdict (decision rule ``budget``):
    such a step is offered once more, so it does not count as tried."""
    if (r.get("decision") or {}).get("rule") != "budget":
        return False
    cuts[key] += 1
    return cuts[key] == 1


class LedgerError(CutileDiagError):
    """The ledger is missing, unreadable or inconsistent."""


_WATCHERS: list[Callable[[Path, dict], None]] = []


@contextmanager
def watched(fn: Callable[[Path, dict], None]) -> Iterator[None]:
    """Call ``fn(ledger path, record)`` after every record a ledger of this process stores, before
    ``append`` returns (a campaign's Ray actor hands each record to the driver, which owns the
    campaign's copy of the ledger, and goes on only once the driver has it)."""
    _WATCHERS.append(fn)
    try:
        yield
    finally:
        _WATCHERS.remove(fn)


def short_text(text: str, n: int = 110) -> str:
    """One line of at most ``n`` characters (the table's optimization column, echo lines)."""
    t = " ".join(str(text).split())
    return t if len(t) <= n else t[: n - 1] + "…"


def format_latency(ms: float | None) -> str:
    """A latency for the table: six decimals, ``-`` when missing or not finite."""
    if ms is None or not isinstance(ms, (int, float)) or not math.isfinite(ms):
        return "-"
    return f"{float(ms):.6f}"


def _cell(text: Any) -> str:
    s = " ".join(str(text).split())
    return s.replace("|", "\\|")


def _correctness_cell(value: Any) -> str:
    return value if value in CORRECTNESS else "FAIL"


def row_correctness(record: dict, *, simulated: bool = False) -> str:
    """The correctness cell of an iteration record (see the module doc)."""
    corr = record.get("correctness")
    if record.get("status") == "crash" and corr != "FAIL":
        return NOT_CHECKED
    if corr == "PASS" and simulated:
        return SIMULATED
    return _correctness_cell(corr)


def render_table(rows: Iterable[dict]) -> str:
    """The Markdown table; ``rows``: dicts with the five column keys."""
    body = []
    for r in rows:
        body.append([str(int(r["iteration"])), _cell(r["optimization"]) or "-", format_latency(r.get("latency_ms")),
                     _correctness_cell(r.get("correctness")), str(r["status"])])
    widths = [max(len(c), *(len(row[i]) for row in body)) if body else len(c) for i, c in enumerate(COLUMNS)]
    line = lambda cells: "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"
    out = [line(COLUMNS), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in body]
    return "\n".join(out) + "\n"


def parse_table(text: str) -> list[dict]:
    """Rows of a ``perf_results.md`` table; raises ``LedgerError`` unless the file is exactly the table."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    if len(lines) < 2:
        raise LedgerError("perf_results.md: no table")

    def cells(ln: str) -> list[str]:
        s = ln.strip()
        if not (s.startswith("|") and s.endswith("|")):
            raise LedgerError(f"perf_results.md: not a table row: {ln!r}")
        parts, cur, esc = [], "", False
        for ch in s[1:-1]:
            if esc:
                cur += ch
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == "|":
                parts.append(cur.strip())
                cur = ""
            else:
                cur += ch
        parts.append(cur.strip())
        return parts

    header = cells(lines[0])
    if tuple(header) != COLUMNS:
        raise LedgerError(f"perf_results.md: columns are {header}, expected {list(COLUMNS)}")
    sep = cells(lines[1])
    if len(sep) != len(COLUMNS) or not all(c and set(c) <= {"-", ":"} for c in sep):
        raise LedgerError("perf_results.md: second line is not the header separator")
    rows = []
    for ln in lines[2:]:
        c = cells(ln)
        if len(c) != len(COLUMNS):
            raise LedgerError(f"perf_results.md: row has {len(c)} cells: {ln!r}")
        it, opt, lat, corr, status = c
        if not it.isdigit():
            raise LedgerError(f"perf_results.md: iteration {it!r} is not a number")
        if lat != "-":
            whole, dot, frac = lat.partition(".")
            if not (dot and len(frac) == 6 and frac.isdigit() and whole.lstrip("-").isdigit()):
                raise LedgerError(f"perf_results.md: latency {lat!r} does not have six decimals")
        if corr not in CORRECTNESS:
            raise LedgerError(f"perf_results.md: correctness {corr!r} is not one of {', '.join(CORRECTNESS)}")
        if status not in STATUSES:
            raise LedgerError(f"perf_results.md: status {status!r} is not keep/revert/crash/inconclusive")
        rows.append({"iteration": int(it), "optimization": opt, "latency_ms": None if lat == "-" else float(lat),
                     "correctness": corr, "status": status})
    return rows


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) else None


@dataclass(frozen=True)
class IterationRecord:
    """An ``iteration`` record read back, typed for the readers outside the loop (the loop writes
    the JSON; ``raw`` keeps every field)."""
    iteration: int
    status: str | None
    entry: str | None                     # the playbook entry the step applied
    latency_ms: float | None
    baseline_latency_ms: float | None
    ratio: float | None                   # the comparison's t_after / t_before
    predicted: dict[str, float] = field(default_factory=dict)   # the entry's predicted_effect: low, high, expected
    bottleneck: str | None = None         # the diagnosis's evidence class (what "similar kernels" means)
    # the verification's own fields (``record["verification"]``, ``Verification.to_json``), not the
    # table's text: passed True/False when a check ran, None when nothing was checked
    verified: bool = False                # a verification is on the record
    passed: bool | None = None
    simulated_check: bool = False         # the simulated backend's pass: nothing ran, nothing failed
    raw: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_json(cls, rec: dict) -> "IterationRecord":
        """The typed view of an iteration record (the entry's predicted effect taken from its diagnosis)."""
        entry = (rec.get("entry") or {}).get("id")
        pred = next((x.get("predicted_effect") or {} for x in (rec.get("diagnosis") or {}).get("recommendations", [])
                     if x.get("id") == entry), {}) if entry else {}
        ver = rec.get("verification") if isinstance(rec.get("verification"), dict) else {}
        passed = ver.get("passed")
        return cls(iteration=int(rec.get("iteration", 0)), status=rec.get("status"),
                   entry=str(entry) if entry else None, latency_ms=_number(rec.get("latency_ms")),
                   baseline_latency_ms=_number(rec.get("baseline_latency_ms")),
                   ratio=_number((rec.get("comparison") or {}).get("ratio")), predicted=dict(pred),
                   bottleneck=(rec.get("diagnosis") or {}).get("bottleneck"), verified=bool(ver),
                   passed=passed if isinstance(passed, bool) else None,
                   simulated_check=bool(ver.get("simulated")), raw=rec)

    @property
    def check_passed(self) -> bool:
        """The candidate's verification passed: its check ran and passed, or the simulated backend
        passed it (nothing checked, nothing failed) — never a record without a verification."""
        return self.verified and (self.passed is True or (self.passed is None and self.simulated_check))

    @property
    def gain(self) -> float | None:
        """The measured speed-up (+0.1 = 10 % faster): from the comparison, else the two latencies."""
        if self.ratio is not None and self.ratio > 0:
            return 1.0 / self.ratio - 1.0
        if self.baseline_latency_ms is not None and self.latency_ms is not None and self.latency_ms > 0:
            return self.baseline_latency_ms / self.latency_ms - 1.0
        return None


class Ledger:
    """A loop's ``ledger.jsonl`` (plus the ``perf_results.md`` table it keeps): read, queried and
    appended record by record."""
    def __init__(self, state_dir: str | Path):
        self.dir = Path(state_dir)
        self.path = self.dir / LEDGER_FILE
        self.table_path = self.dir / TABLE_FILE
        self.records: list[dict] = []
        self.notes: list[str] = []

    # -- reading ---------------------------------------------------------------------------
    @classmethod
    def load(cls, state_dir: str | Path, *, file: str | Path | None = None) -> "Ledger":
        """The ledger in ``state_dir``; ``file``: a ledger file under another name (``diagnose --ledger``)."""
        led = cls(state_dir)
        if file is not None:
            led.path = Path(file)
        elif not led.path.exists() and (led.dir / LEDGER_GZ).exists():
            led.path = led.dir / LEDGER_GZ
        if not led.path.exists():
            raise LedgerError(f"{led.path}: no ledger here", hint=f"start the loop with `{prog()} optimize`")
        data = led.path.read_bytes()
        if led.path.name.endswith(".gz"):
            try:
                data = gzip.decompress(data)
            except (OSError, EOFError) as e:
                raise LedgerError(f"{led.path}: not a gzipped ledger ({e})") from None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise LedgerError(f"{led.path}: not UTF-8 text (byte {e.start}); expected the loop's {LEDGER_FILE}") \
                from None
        for i, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise LedgerError(f"{led.path}:{i}: not JSON ({e.msg})") from None
            if not isinstance(rec, dict) or "type" not in rec:
                raise LedgerError(f"{led.path}:{i}: a record without a type")
            led.records.append(rec)
        if not led.records or led.records[0].get("type") != "setup":
            raise LedgerError(f"{led.path}: the first record is not the setup record")
        return led

    @classmethod
    def exists(cls, state_dir: str | Path) -> bool:
        """Whether ``state_dir`` holds a ledger."""
        return (Path(state_dir) / LEDGER_FILE).exists()

    @property
    def setup(self) -> dict:
        """The setup record (always the first)."""
        return self.records[0]

    def of_type(self, t: str) -> list[dict]:
        """The records of type ``t``, in order."""
        return [r for r in self.records if r.get("type") == t]

    @property
    def iterations(self) -> list[dict]:
        """The iteration records (one per table row)."""
        return self.of_type("iteration")

    def iteration_records(self) -> list[IterationRecord]:
        """The iteration records, typed."""
        return [IterationRecord.from_json(r) for r in self.iterations]

    def pending(self) -> dict | None:
        """The last ``begin`` that has no ``iteration`` record yet and no ``stop`` after it (a
        baseline that failed is a recorded stop, not an interruption)."""
        done = {r["iteration"] for r in self.iterations}
        pend = None
        for r in self.records:
            if r.get("type") == "begin" and r["iteration"] not in done:
                pend = r
            elif r.get("type") == "stop":
                pend = None
            elif r.get("type") == "abandoned" and pend is not None and pend["iteration"] == r.get("iteration"):
                pend = None
        return pend

    def next_iteration(self) -> int:
        """The number the next iteration gets (after the recorded and the pending ones)."""
        its = [r["iteration"] for r in self.iterations]
        pend = self.pending()
        if pend is not None:
            its.append(pend["iteration"])
        return (max(its) + 1) if its else 0

    def last_kept(self) -> dict | None:
        """The kept version the next step builds on: the last keep, or the one a ``parent``
        record after the last iteration names (a beam's step, or its best member at the end:
        ``loop.beam``)."""
        kept = [r for r in self.iterations if r["status"] == "keep"]
        for r in reversed(self.records):
            if r.get("type") == "iteration":
                break
            if r.get("type") == "parent":
                return next((k for k in reversed(kept) if k.get("digest") == r["digest"]), kept[-1] if kept else None)
        return kept[-1] if kept else None

    def paired_ratio(self, config: str | None = None) -> float | None:
        """The kept version's latency over the baseline's as the product of the paired ratios along its line (each
        kept step was timed interleaved with its parent, in one process), or None where a step on that line has none
        (a manual record); ``config``: that configuration's.  Unlike final over baseline latency, measured in
        different sittings, it holds no drift between them: on an H100 a dropout kernel's baseline sitting read 6.5 %
        slower than its parent did in the kept step's own comparison."""
        first: dict[str, dict] = {}
        for r in self.iterations:
            if r["status"] == "keep" and r.get("digest"):
                first.setdefault(r["digest"], r)
        ratio, seen, r = 1.0, set(), self.last_kept()
        while r is not None and r["iteration"] != 0:
            measured = (r.get("configs") or {}).get(config) if config else r.get("comparison")
            c = (measured or {}).get("ratio")
            if not c or r["digest"] in seen:
                return None
            seen.add(r["digest"])
            ratio *= float(c)
            r = first.get(r.get("base_digest"))
        return ratio if r is not None else None

    def kept_commit(self) -> str:
        """The commit of the kept version; LedgerError when no baseline was recorded."""
        k = self.last_kept()
        if k is None or not k.get("commits", {}).get("kept"):
            raise LedgerError(f"{self.path}: no kept version recorded (the baseline is missing)")
        return k["commits"]["kept"]

    def decisions(self) -> list[dict]:
        """Decision dicts of iterations 1..n (what the stop rules read)."""
        return [r.get("decision", {}) for r in self.iterations if r["iteration"] > 0]

    def tried(self) -> Counter:
        """Playbook entry ids to demote: tried and not a clear (>= 5 %) win.  A step the clock cut before its
        verdict is not counted the first time (``attempted`` offers it again)."""
        c: Counter = Counter()
        cut: Counter = Counter()
        for r in self.iterations:
            entry = (r.get("entry") or {}).get("id")
            if not entry or r["iteration"] == 0:
                continue
            if _first_cut(r, entry, cut):
                continue
            d = r.get("decision", {})
            if r["status"] != "keep" or d.get("demote"):
                c[entry] += 1
        return c

    def attempted(self) -> set[tuple[str, str, str]]:
        """(base version digest, transform, params json) of every candidate already tried.  A candidate whose
        step the clock cut before a verdict (a time slice that ended during its test command, say) is offered
        once more: cut twice, it counts as tried."""
        out = set()
        cut: Counter = Counter()
        for r in self.iterations:
            base = r.get("base_digest")
            for cand in (r.get("change") or {}).get("tried", []):
                key = (base, cand.get("transform", ""), json.dumps(cand.get("params", {}), sort_keys=True))
                if _first_cut(r, key, cut):
                    continue
                out.add(key)
        return out

    def last_stop(self) -> dict | None:
        """The last stop record, unless an iteration or begin came after it."""
        stops = self.of_type("stop")
        if not stops:
            return None
        last = stops[-1]
        # a stop counts only if no iteration came after it
        idx = self.records.index(last)
        if any(r.get("type") in ("iteration", "begin") for r in self.records[idx + 1:]):
            return None
        return last

    @property
    def simulated(self) -> bool:
        """Made by the simulated backend (its correctness checks are planted, not run)."""
        return bool(self.records) and (self.setup.get("backend") or {}).get("backend") == "simulated"

    def rows(self) -> list[dict]:
        """The table's rows: its columns of each iteration plus the correctness word."""
        sim = self.simulated
        return [{**{k: r.get(k) for k in COLUMNS}, "correctness": row_correctness(r, simulated=sim)}
                for r in self.iterations]

    # -- writing ---------------------------------------------------------------------------
    def _flush(self) -> None:
        text = "".join(json.dumps(to_jsonable(r), sort_keys=False, allow_nan=False) + "\n" for r in self.records)
        write_atomic(self.path, text)
        write_atomic(self.table_path, render_table(self.rows()))

    def append(self, record: dict) -> dict:
        """Check and store one record (time-stamped, JSON-safe), rewrite the files and tell the
        watchers; a gzipped ledger is read-only."""
        if self.path.name.endswith(".gz"):
            raise LedgerError(f"{self.path}: a gzipped ledger is read-only",
                              hint="gunzip it into ledger.jsonl to continue the loop")
        if "type" not in record:
            raise LedgerError("internal: ledger record without a type")
        if record["type"] == "iteration":
            for k in COLUMNS:
                if k not in record:
                    raise LedgerError(f"internal: iteration record lacks '{k}'")
            if record["status"] not in STATUSES:
                raise LedgerError(f"internal: status {record['status']!r}")
            if any(r["iteration"] == record["iteration"] for r in self.iterations):
                raise LedgerError(f"internal: iteration {record['iteration']} recorded twice")
        record = {**record}
        record.setdefault("time", time.strftime("%Y-%m-%dT%H:%M:%S%z"))
        stored = _finite(to_jsonable(record))
        self.records.append(stored)
        self._flush()
        for fn in list(_WATCHERS):
            fn(self.path, stored)
        return record

    def adopt(self, records: Iterable[dict]) -> None:
        """Append records another writer stored, as they are (the campaign's driver keeps its copy
        of a loop that a Ray actor runs; the actor gets the driver's records back to resume)."""
        self.records.extend(records)
        self._flush()

    def abandon(self, iteration: int, reason: str) -> dict:
        """Close a pending ``begin`` that leaves no row (an interrupted baseline is measured again)."""
        return self.append({"type": "abandoned", "iteration": iteration, "reason": reason})

    def create(self, setup: dict) -> None:
        """Start a new ledger with its setup record; LedgerError when one exists."""
        if self.path.exists():
            raise LedgerError(f"{self.path} already exists", hint="continue it with --resume, or choose another --out")
        self.records = []
        self.append({"type": "setup", "schema": SCHEMA, **setup})


def _finite(obj):
    """JSON has no NaN/inf: replace them with None (the ledger stays strict JSON)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_finite(v) for v in obj]
    return obj
