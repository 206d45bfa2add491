"""Real TileIR dumps for the parser and differ tests, produced in the test run.

``ir_dump`` exports a kernel to bytecode (cuTile, no tileiras: ~0.02 s) and disassembles it
twice (``tileirdisasm`` and ``tileirdisasm -g``), which is all the IR-side tests need;
``capture`` makes a real capture folder (tileiras, cuobjdump, ptxas) for the cubin-side
tests.  Both are session-scoped caches keyed by (kernel, specs, hints), so a knob variant
used by several tests is built once.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from cutile_diag.examples import EXAMPLE_KERNELS, EXAMPLES_DIR

FIXTURES = Path(__file__).parent / "fixtures"
KNOBS = FIXTURES / "knob_kernels.py"
FEATURES = FIXTURES / "feature_kernels.py"
JIT_DUMPS = Path(__file__).parents[1] / "capture" / "fixtures" / "jit-h200"

EXAMPLE_FILE = {k: f for f, ks in EXAMPLE_KERNELS.items() for k in ks}


def ref(name: str) -> str:
    """``matmul`` (an example), ``knob:matmul_latency``, ``feature:while_loop`` -> file::kernel."""
    if name.startswith("knob:"):
        return f"{KNOBS}::{name[5:]}"
    if name.startswith("feature:"):
        return f"{FEATURES}::{name[8:]}"
    return f"{EXAMPLES_DIR / EXAMPLE_FILE[name]}::{name}"


def fixture_kernels(path: Path) -> list[str]:
    """Kernel names of a fixture module, from its CAPTURE_SPECS (read without importing)."""
    text = path.read_text()
    block = text[text.index("CAPTURE_SPECS = {"):]
    return re.findall(r'^    "(\w+)":', block, re.M)


@dataclass(frozen=True)
class Dump:
    name: str
    plain: Path          # tileirdisasm
    loc: Path            # tileirdisasm -g
    bytecode: Path

    def text(self, loc: bool = False) -> str:
        return (self.loc if loc else self.plain).read_text()


def _key(name: str, specs: dict | None, hints: dict | None) -> str:
    return json.dumps([name, specs or {}, hints or {}], sort_keys=True, default=repr)


def _slug(key: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", key).strip("_")[:80]


@pytest.fixture(scope="session")
def ir_dump(tmp_path_factory):
    """``ir_dump(name, specs=None, hints=None) -> Dump``; ``specs`` overrides single
    parameters of the module's CAPTURE_SPECS (e.g. ``{"TM": 64}``)."""
    from cutile_diag.capture import loader, spec as spec_mod
    from cutile_diag.capture.aot import export_bytecode, specs_for
    from cutile_diag.toolchain import run_tool
    root = tmp_path_factory.mktemp("ir-dumps")
    cache: dict[str, Dump] = {}

    def make(name: str, specs: dict | None = None, hints: dict | None = None) -> Dump:
        key = _key(name, specs, hints)
        if key in cache:
            return cache[key]
        loaded = loader.load_kernel(ref(name))
        full = dict(specs_for(loaded, None))
        for k, v in (specs or {}).items():
            full[k] = spec_mod.parse_spec(str(v), where=k)
        bc = export_bytecode(loaded, spec_mod.bind(loaded, full), hints=hints)
        d = root / _slug(key)
        d.mkdir()
        bcf = d / "kernel.tileirbc"
        bcf.write_bytes(bc)
        plain, loc = d / "kernel.tileir", d / "kernel.loc.tileir"
        plain.write_text(run_tool("tileirdisasm", [str(bcf)]).stdout)
        loc.write_text(run_tool("tileirdisasm", ["-g", str(bcf)]).stdout)
        cache[key] = Dump(name, plain, loc, bcf)
        return cache[key]

    return make


@pytest.fixture(scope="session")
def capture(tmp_path_factory):
    """``capture(name, specs=None, hints=None) -> CaptureFolder`` for sm_90 (tileiras runs)."""
    from cutile_diag.capture.aot import capture_aot
    from cutile_diag.capture import loader, spec as spec_mod
    from cutile_diag.capture.aot import specs_for
    root = tmp_path_factory.mktemp("diff-captures")
    cache: dict = {}

    def make(name: str, specs: dict | None = None, hints: dict | None = None):
        key = _key(name, specs, hints)
        if key not in cache:
            full = None
            if specs:
                loaded = loader.load_kernel(ref(name))
                full = dict(specs_for(loaded, None))
                full.update({k: spec_mod.parse_spec(str(v), where=k) for k, v in specs.items()})
            cache[key] = capture_aot(ref(name), full, archs=["sm_90"], out_dir=root, hints=hints,
                                     name=_slug(key))
        return cache[key]

    return make


@pytest.fixture(scope="session")
def all_dumps(ir_dump) -> dict[str, Dump]:
    """Every example, feature and knob kernel, dumped with its CAPTURE_SPECS."""
    names = [k for ks in EXAMPLE_KERNELS.values() for k in ks]
    names += [f"feature:{k}" for k in fixture_kernels(FEATURES)]
    names += [f"knob:{k}" for k in fixture_kernels(KNOBS)]
    return {n: ir_dump(n) for n in names}
