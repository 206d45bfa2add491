"""The playbook TOMLs, the fact vocabulary and the references: consistent with each other."""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from cutile_diag.diagnose.classes import CLASSES
from cutile_diag.diagnose.evidence import FACTS, Evidence, EvidenceError, facts_markdown
from cutile_diag.transforms.registry import TRANSFORMS
from cutile_diag.diagnose.playbook import (REFERENCES_ENV, PlaybookError, load_playbook,
                                           references_dir)

REFS = references_dir()


@pytest.fixture(scope="module")
def playbook():
    return load_playbook(REFS)


def test_entries_a_to_l_and_additions(playbook):
    ids = playbook.ids
    for i in "ABCDEFGHIJKL":
        assert i in ids
    assert {"M", "N", "O"} <= set(ids), "register pressure, tail effect and host overhead entries"
    assert len(ids) == len(set(ids))


def test_expected_transforms(playbook):
    want = {"A": "gather_to_load", "B": "persistent_grid", "C": "kernel_hints", "D": "tf32_guard",
            "E": "latency_hints", "F": "store_allow_tma_false", "G": "tile_size_sweep", "H": "flush_to_zero",
            "I": "group_m_swizzle", "Q": "exp_to_exp2", "R": "approx_div", "J": "", "K": "", "L": "",
            "P": "tma_zero_padding", "W": "read_once", "X": "rows_per_block"}
    for i, t in want.items():
        assert playbook.by_id(i).transform == t, i
    for e in playbook.entries:
        assert e.transform == "" or e.transform in TRANSFORMS
        assert e.automatic == bool(e.transform)


def test_every_entry_is_complete(playbook):
    for e in playbook.entries:
        assert e.summary and e.changes and e.verify and e.references, e.id
        assert e.risk in ("none", "low", "medium", "high")
        assert e.effect_low <= e.effect_high
        assert all(k == "default" or k in CLASSES for k in e.priority)
        assert e.clauses and all(c.reason for c in e.clauses)


RECIPE = {"memory-bound": "ABCFGEH",      # TMA, persistent, autotune, store allow_tma, tiles, latency, FTZ
          "compute-bound": "DGCIBE"}       # TF32, tiles, autotune, GROUP_SIZE_M, persistent, latency


@pytest.mark.parametrize("cls", sorted(RECIPE))
def test_recipe_orders(playbook, cls):
    """Memory- and compute-bound orders as in the perf recipe, for every clause a kernel without
    pinned hints can hit (a weak-evidence penalty never moves an entry past a recipe neighbour).
    Only the re-sweep clauses of an already tuned kernel (ir.kernel_hints_set) may rank later."""
    from cutile_diag.diagnose.predicates import UNKNOWN
    untuned = {"ir.kernel_hints_set": False}

    def ranks(i):
        e = playbook.by_id(i)
        rs = [e.rank(cls) + c.penalty for c in e.clauses if c.penalty >= 0 and (
              c.predicate.evaluate(untuned).value is UNKNOWN or c.predicate.evaluate(untuned).true)]
        assert rs, i
        return min(rs), max(rs)
    order = RECIPE[cls]
    for a, b in zip(order, order[1:]):
        assert ranks(a)[1] < ranks(b)[0], (cls, a, ranks(a), b, ranks(b))
    # the one finding that moves an entry up: small tiles in a streaming kernel (no MMA) take the tile sweep
    # before the occupancy sweep, still after TMA loads and the persistent grid
    ups = [(e, c) for e in playbook.entries for c in e.clauses if c.penalty < 0]
    assert [(e.id, sorted(c.predicate.names)) for e, c in ups] == [
        ("G", ["ir.kernel_hints_set", "ir.max_tile_elems", "ir.mma_ops"])]
    if cls == "memory-bound":
        small = playbook.by_id("G").rank(cls) + ups[0][1].penalty
        assert ranks("B")[1] < small < ranks("C")[0]
    # the re-sweeps of a tuned kernel come after every recipe entry with concrete evidence
    for i in "CG":
        resweep = [c for c in playbook.by_id(i).clauses if c.penalty >= 10]
        assert resweep and all("ir.kernel_hints_set" in c.predicate.names for c in resweep)


def test_root_causes_are_the_fma_fallback_and_tma_warp_specialisation(playbook):
    d = playbook.by_id("D")
    assert all(c.root_cause for c in d.clauses)
    # F: TMA warp-specialises a kernel without mma down to one resident block per SM
    f = [c for c in playbook.by_id("F").clauses if c.root_cause]
    assert len(f) == 1 and {"cubin.warp_specialised", "cubin.resident_ctas", "ir.mma_ops"} <= f[0].predicate.names
    assert not any(c.root_cause for e in playbook.entries if e.id not in "DF" for c in e.clauses)


def test_predicate_keys_are_in_the_vocabulary(playbook):
    used = set().union(*(e.fact_keys() for e in playbook.entries))
    assert used <= set(FACTS), sorted(used - set(FACTS))


def test_reason_placeholders_are_facts(playbook):
    for e in playbook.entries:
        for c in e.clauses:
            for key in re.findall(r"\{([a-z][a-z0-9_.]+)(?::[^}]*)?\}", c.reason):
                assert key in FACTS, (e.id, key)


def test_evidence_rejects_keys_outside_the_vocabulary():
    with pytest.raises(EvidenceError):
        Evidence().add("ir.not_a_fact", 1, "test")


def test_evidence_facts_md_is_generated_from_the_vocabulary():
    text = (REFS / "evidence-facts.md").read_text()
    assert text == facts_markdown(), "regenerate references/evidence-facts.md (see its header)"
    keys = set(re.findall(r"^\| `([^`]+)` \|", text, re.M))
    assert keys == set(FACTS)


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def test_references_point_at_existing_sections(playbook):
    for e in playbook.entries:
        for ref in e.references:
            fname, _, anchor = ref.partition("#")
            path = REFS / fname
            assert path.exists(), (e.id, ref)
            if anchor:
                heads = {_slug(h) for h in re.findall(r"^#+ (.+)$", path.read_text(), re.M)}
                assert anchor in heads, (e.id, ref, sorted(heads)[:5])


def test_references_files_exist():
    for f in ("optimization-playbook.md", "knob-catalog.md", "cutile-api-rules.md", "performance-model.md",
              "ir-inspection-guide.md", "patterns.md", "evidence-facts.md", "playbook/README.md"):
        assert (REFS / f).stat().st_size > 1000, f


def test_playbook_prose_covers_every_entry(playbook):
    text = (REFS / "optimization-playbook.md").read_text()
    for e in playbook.entries:
        assert re.search(rf"^## {e.id}\. ", text, re.M), e.id


# --- malformed playbooks fail loudly, naming the file ----------------------------------------------

def _copy(tmp_path) -> Path:
    dst = tmp_path / "references"
    shutil.copytree(REFS, dst)
    return dst


@pytest.mark.parametrize("edit, message", [
    (lambda s: s.replace('expr = "ir.block_contiguous_gathers > 0"', 'expr = "ir.block_contiguous_gathrs > 0"'),
     "unknown fact ir.block_contiguous_gathrs"),
    (lambda s: s.replace('expr = "ir.block_contiguous_gathers > 0"', 'expr = "ir.block_contiguous_gathers >"'),
     "does not parse"),
    (lambda s: s.replace("memory-bound = 10", "memory-bandwidth = 10"), "unknown class 'memory-bandwidth'"),
    (lambda s: s.replace('transform = "gather_to_load"', 'transform = "gather_to_loads"'), "unknown transform"),
    (lambda s: s.replace('id = "A"', 'id = "Z"'), "id is 'Z'"),
    (lambda s: s + "\n[[[", "not valid TOML"),
    (lambda s: s.replace("[expected_effect]\nlow = 0.1", "[expected_effect]\nlow = 99"), "low > high"),
    (lambda s: s.replace('"{ops:gather,scatter}"', '"rewrite the gathers of {kernal}"'), "unknown placeholder kernal"),
    (lambda s: s.replace('[recipe]\nsteps', '[recipe]\nstep'), "[recipe] holds 'steps' and 'when_autotuned'"),
])
def test_malformed_entries(tmp_path, edit, message):
    refs = _copy(tmp_path)
    f = refs / "playbook" / "A-tma-loads.toml"
    f.write_text(edit(f.read_text()))
    with pytest.raises(PlaybookError) as ei:
        load_playbook(refs)
    assert message in ei.value.message
    assert "A-tma-loads.toml" in ei.value.message


def test_references_ship_with_the_package(monkeypatch):
    """The package's references/ (a symlink to the top-level folder in a checkout, a copy in a
    wheel) is what the loader finds, through importlib.resources."""
    import importlib.resources

    from cutile_diag.diagnose import playbook as pb
    res = importlib.resources.files("cutile_diag.diagnose") / "references" / "playbook"
    assert res.is_dir()
    assert sorted(p.name for p in res.iterdir() if p.name.endswith(".toml")) == \
        sorted(p.name for p in (REFS / "playbook").glob("*.toml"))
    monkeypatch.delenv(REFERENCES_ENV, raising=False)
    assert references_dir() == pb.packaged_references() == REFS.resolve()


def test_pyproject_packages_the_references():
    """package-data globs cover every file the loader and the prose links read."""
    import fnmatch
    import tomllib
    root = Path(__file__).resolve().parents[2]
    globs = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["cutile_diag"]
    for f in REFS.rglob("*"):
        if f.is_file():
            rel = "diagnose/references/" + f.relative_to(REFS).as_posix()
            assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


@pytest.mark.slow
def test_installed_wheel_runs_diagnose(tmp_path, example_captures):
    """Build the wheel, unpack it, and diagnose from the unpacked copy (no checkout in reach)."""
    import os
    import subprocess
    import sys
    import zipfile
    root = Path(__file__).resolve().parents[2]
    src = tmp_path / "src-copy"
    for part in ("src", "references"):
        shutil.copytree(root / part, src / part, symlinks=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for f in ("pyproject.toml", "README.md", "LICENSE"):
        if (root / f).exists():
            shutil.copy(root / f, src / f)
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-build-isolation", "--no-deps", "-q",
                        "-w", str(tmp_path / "whl"), str(src)], capture_output=True, text=True)
    if r.returncode != 0 and "No module named pip" in r.stderr:
        pytest.skip("pip is not available")
    assert r.returncode == 0, r.stderr
    site = tmp_path / "site"
    zipfile.ZipFile(next((tmp_path / "whl").glob("cutile_diag-*.whl"))).extractall(site)
    assert (site / "cutile_diag/diagnose/references/playbook/A-tma-loads.toml").is_file()
    env = {k: v for k, v in os.environ.items() if k != REFERENCES_ENV}
    env["PYTHONPATH"] = str(site)
    ir = example_captures["gather_scale"].path / "kernel.loc.tileir"
    r = subprocess.run([sys.executable, "-c", "import cutile_diag, sys; print(cutile_diag.__file__); "
                        "from cutile_diag.cli import main; sys.exit(main(sys.argv[1:]))",
                        "diagnose", str(ir), "--json"], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    where, doc = r.stdout.split("\n", 1)
    assert where.startswith(str(site))
    assert json.loads(doc)["recommendations"][0]["id"] == "A"


def test_env_override(tmp_path, monkeypatch):
    refs = _copy(tmp_path)
    (refs / "playbook" / "V-debug-ops.toml").unlink()
    monkeypatch.setenv(REFERENCES_ENV, str(refs))
    assert references_dir() == refs
    assert "V" not in load_playbook().ids
    monkeypatch.setenv(REFERENCES_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(PlaybookError):
        references_dir()
