"""pytest plugin (entry point ``pytest11: cutile_diag``): implements ``--print-record``.

TileGym's perf tests call ``record_property("benchmark", {framework: {"forward": {...}}})``
and its conftest registers ``--print-record`` without ever printing anything.  With
cutile-diag installed, every test that recorded a benchmark prints, after it ran::

    Performance Test Results: tests/ops/test_softmax.py::Test_Softmax::test_perf[cutile-...]
    Cutile: {'forward': {'mean': 3.79, 'std': 0.0017, 'rel_std': 0.0447, 'median': 3.7899, ...}} ms

(framework name capitalised, the repr of its record dict, then `` ms``).  A record without
the framework level (``{"forward": {...}}``) is printed under the framework found in the
test id (cutile, triton, pytorch, tilecpp, cutile-rs), else ``Benchmark``.

Coexisting with a conftest that registers the option too: pytest loads entry-point
plugins before conftests, and TileGym's conftest adds ``--print-record`` inside a
``try/except ValueError`` block that also holds ``--run-full`` — registering the option
first would make that block bail out early and lose ``--run-full``.  So this plugin adds
``--print-record`` only *after* the initial conftests are loaded, and only if nobody did;
an option registered by a conftest is reused as is.

Helpers: ``format_record_lines(record, nodeid)`` (the printed lines) and
``parse_record_lines(text)`` (back to ``[(framework, dict)]``, for scripts reading a log).
"""
from __future__ import annotations

import ast
import re
from typing import Any

import pytest

OPTION = "--print-record"
DEST = "print_record"
HEADER = "Performance Test Results"
KNOWN_FRAMEWORKS = ("cutile-rs", "cutile", "triton", "pytorch", "tilecpp", "torch", "cublas")
_PHASES = {"forward", "backward", "fwd", "bwd"}


def _option_registered(parser) -> bool:
    """Whether any plugin/conftest has registered --print-record (pytest has no public lookup)."""
    groups = [getattr(parser, "_anonymous", None), *getattr(parser, "_groups", [])]
    for g in groups:
        for opt in getattr(g, "options", []) or []:
            names = getattr(opt, "names", lambda: [])()
            if OPTION in names:
                return True
    return False


def _add_option(parser) -> None:
    if _option_registered(parser):
        return
    try:
        parser.addoption(OPTION, action="store_true", default=False, dest=DEST,
                         help="print record_property('benchmark', ...) records after each test (cutile-diag)")
    except ValueError:
        pass   # registered meanwhile by someone else: reuse theirs


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """Add ``--print-record`` after the initial conftests, so that TileGym's own options come first."""
    # let the initial conftests (TileGym's tests/conftest.py) register their options first
    try:
        return (yield)
    finally:
        _add_option(parser)


def pytest_configure(config):
    """Register the record printer."""
    config.pluginmanager.register(_Printer(config), "cutile_diag_record_printer")


def _enabled(config) -> bool:
    try:
        return bool(config.getoption(DEST))
    except (ValueError, AttributeError):
        try:
            return bool(config.getoption(OPTION))
        except (ValueError, AttributeError):
            return False


def _framework_from_nodeid(nodeid: str) -> str | None:
    m = re.search(r"\[(.*)\]$", nodeid)
    if not m:
        return None
    joined = m.group(1).lower()
    if re.search(r"(^|[^a-z])cutile[-_]rs($|[^a-z])", joined):
        return "cutile-rs"
    params = set(re.split(r"[^a-z0-9]+", joined))
    for fw in KNOWN_FRAMEWORKS:
        if fw in params:
            return fw
    return None


def _is_phase_dict(d: Any) -> bool:
    return isinstance(d, dict) and bool(d) and all(isinstance(k, str) and k.lower() in _PHASES for k in d)


def _display_name(framework: str) -> str:
    return framework[:1].upper() + framework[1:]


def format_record_lines(record: Any, nodeid: str = "") -> list[str]:
    """The ``Framework: {...} ms`` lines for one recorded benchmark."""
    if _is_phase_dict(record):
        fw = _framework_from_nodeid(nodeid) or "benchmark"
        return [f"{_display_name(fw)}: {record!r} ms"]
    if isinstance(record, dict) and record:
        return [f"{_display_name(str(fw))}: {val!r} ms" for fw, val in record.items()]
    return [f"Benchmark: {record!r} ms"]


_LINE_RE = re.compile(r"^([A-Za-z][\w\-]*): (\{.*\}) ms\s*$")


def parse_record_lines(text: str) -> list[tuple[str, dict]]:
    """``Framework: {...} ms`` lines back to ``[(framework, record)]`` (framework lower-cased)."""
    out = []
    for line in text.splitlines():
        m = _LINE_RE.match(line.strip())
        if not m:
            continue
        try:
            val = ast.literal_eval(m.group(2))
        except (ValueError, SyntaxError):
            continue
        if isinstance(val, dict):
            out.append((m.group(1).lower(), val))
    return out


class _Printer:
    """Per-session hook object: knows its config (reports do not carry one)."""

    def __init__(self, config):
        self.config = config

    @pytest.hookimpl(trylast=True)     # after the terminal reporter wrote the test's progress mark
    def pytest_runtest_logreport(self, report):
        if report.when != "call":
            return
        records = [v for k, v in getattr(report, "user_properties", []) if k == "benchmark"]
        if not records or not _enabled(self.config):
            return
        lines = [f"{HEADER}: {report.nodeid}" + ("" if report.passed else f" ({report.outcome})")]
        for rec in records:
            lines.extend(format_record_lines(rec, report.nodeid))
        tr = self.config.pluginmanager.get_plugin("terminalreporter")
        if tr is not None:
            tr.ensure_newline()
            tw = getattr(tr, "_tw", None)
            if tw is not None and getattr(tw, "width_of_current_line", 0):
                tw.line()                  # -q progress dots leave the cursor mid-line
            for ln in lines:
                tr.write_line(ln)
        else:   # pragma: no cover - terminal reporter disabled (-p no:terminal)
            print("\n".join(lines))
