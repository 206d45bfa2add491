"""The Backend abstract class declares everything the loop and the campaign ask of a backend:
optional parts are methods and attributes with defaults, called without probing (issue 33)."""
import ast
import re
from pathlib import Path

from cutile_diag.loop import proc
from cutile_diag.loop.backends.base import Backend, Verification, Version, closing

SRC = Path(__file__).resolve().parents[2] / "src" / "cutile_diag"
CALLERS = [SRC / "loop", SRC / "campaign"]
BACKEND = re.compile(r"\bbackend\b|\binner\b|_active\(\)")       # what names a backend in the callers


def probes(source: str) -> list[str]:
    """``getattr``/``hasattr`` on a backend: a part of the protocol the ABC does not declare."""
    return [ast.unparse(n) for n in ast.walk(ast.parse(source))
            if isinstance(n, ast.Call) and getattr(n.func, "id", None) in ("getattr", "hasattr") and n.args
            and BACKEND.search(ast.unparse(n.args[0]))]


def used(source: str) -> set[str]:
    """The attributes read on a backend (``self.backend.x``, ``backend.x``, ``self.inner.x``)."""
    return {n.attr for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Attribute)
            and re.fullmatch(r"(self\.|runner\.)?(backend|inner)|self\._active\(\)", ast.unparse(n.value))}


def _files():
    return [p for d in CALLERS for p in sorted(d.rglob("*.py"))]


def test_no_caller_probes_a_backend():
    found = [f"{p.relative_to(SRC)}: {c}" for p in _files() for c in probes(p.read_text())]
    assert not found, "\n".join(found)
    # the probes this replaced are found by the scan
    assert probes('own = getattr(backend, "ceiling", None)\nkeep = getattr(self.inner, "keep_spares", None)')


def test_every_part_a_caller_uses_is_declared_on_the_abc():
    declared = set(dir(Backend)) | set(Backend.__annotations__)
    missing = {f"{p.relative_to(SRC)}: {a}" for p in _files() for a in used(p.read_text()) - declared}
    assert not missing, "\n".join(sorted(missing))


class _Bare(Backend):
    name, alternates = "bare", True
    closed = aborted = False

    def describe(self):
        return {}

    def configs(self):
        return ["c"]

    def workload_info(self):
        return {}

    def verify(self, v, ws, deadline):
        return Verification(True, "ok")

    def measure(self, versions, ws, deadline, rounds):
        return {}

    def roofline(self, v, latencies):
        return "no roofline"

    def retain(self, versions):
        pass

    def close(self):
        self.closed = True


def test_the_optional_parts_default_to_not_supported():
    b, v, dl = _Bare(), Version("v", {"k.py": "x"}), proc.Deadline(None)
    assert not (b.prepares or b.suite or b.own_ceiling or b.observes or b.costly_runs or b.uses_preset)
    assert b.prepare([v], None, dl) is None and b.keep_spares(None, 3) is None
    assert b.confirm_keep(v, None, dl) is None and b.suite_bench(v, None, dl) is None
    assert b.launch_block(Verification(True, "ok"), "k") == (None, "the bare backend records no launches")
    try:                                   # an error in the block: abort(), whose default is close()
        with closing(b):
            raise KeyError("boom")
    except KeyError:
        pass
    assert b.closed
