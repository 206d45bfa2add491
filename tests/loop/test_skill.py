"""skills/cutile-diag/SKILL.md says what the code does: the simulation spec's keys (the block
loads as a SimSpec), what --simulate needs without specs, and the TMA ranking of the engine."""
import dataclasses
import json
import re
from pathlib import Path

SKILL = Path(__file__).resolve().parents[2] / "skills" / "cutile-diag" / "SKILL.md"


def _section(title: str) -> str:
    text = SKILL.read_text()
    start = text.index(title)
    return text[start:text.index("\n## ", start + 1)]


def test_the_simulation_spec_in_the_skill_loads_and_names_every_key():
    from cutile_diag.loop.backends.simulated import SimSpec, SimulatedBackend
    sec = _section("## On a machine without a GPU")
    block = re.search(r"```json\n(.*?)```", sec, re.S).group(1)
    spec = SimSpec.from_json(json.loads(block))
    fields = {f.name for f in dataclasses.fields(SimSpec)}
    assert set(json.loads(block)) == fields
    prose = sec.split("```")[2]
    assert all(f"`{f}`" in prose for f in fields), sorted(f for f in fields if f"`{f}`" not in prose)
    # the documented key forms do what the prose says: a marker gives a manual edit its effect
    from cutile_diag.loop.backends import Version
    b = SimulatedBackend(spec.to_json())
    plain = Version("a", {"k.py": "x"}, None, ())
    marked = Version("b", {"k.py": "x # MY_EDIT"}, None, ())
    assert b.latency(marked, "1M") < b.latency(plain, "1M")


def test_the_skill_says_simulate_needs_capture_workload_without_specs():
    sec = " ".join(_section("## On a machine without a GPU").split())
    assert "A kernel without `CAPTURE_SPECS` needs `--capture-workload REF`" in sec
    text = SKILL.read_text()
    assert "**clean tree**" not in text and "Untracked files (a log, notes) do not block it" in " ".join(text.split())


def test_the_skill_s_tma_advice_is_the_engine_s_ranking():
    """F is the root cause (ranked first in every class) for a warp-specialised kernel without
    mma; P's transform screens its ZERO-padded load with TMA off too.  The prose says both."""
    from cutile_diag.diagnose.playbook import default_playbook
    from cutile_diag.transforms import tma_padding
    pb = default_playbook()
    f = pb.by_id("F")
    assert any(c.root_cause and "cubin.warp_specialised" in c.predicate.names for c in f.clauses)
    assert not any(c.root_cause for c in pb.by_id("P").clauses)
    t = next(v for v in vars(tma_padding).values() if isinstance(v, type) and getattr(v, "playbook_id", "") == "P")
    from cutile_diag.examples import EXAMPLES_DIR
    assert {"tma": "off"} in t().candidates((EXAMPLES_DIR / "row_lse.py").read_text(), "row_lse")
    prose = " ".join(SKILL.read_text().split())
    assert "F (`allow_tma=False` on its stores and tile loads) is a root cause and ranks first" in prose
    assert "P (make the access TMA-eligible) may rank first" in prose
    assert "take loads off TMA first" not in prose
