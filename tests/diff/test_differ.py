"""The structural differ on real dumps made in this run: renumbered / reordered copies are
equivalent, each knob variant reports exactly its semantic change, capture folders add the
cubin side, and the CLI's JSON / HTML / exit codes."""
from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from cutile_diag.cli import main
from cutile_diag.diff.core import diff_modules, diff_paths, diff_texts
from cutile_diag.diff.synth import renumber, shuffle
from cutile_diag.ir_parsers.tileir import parse_tileir
from cutile_diag.ir_parsers.tileir_ops import TERMINATORS

from .conftest import JIT_DUMPS, KNOBS

JIT_FILES = sorted(JIT_DUMPS.glob("*.tileir"))


# ---------------------------------------------------------------------------------------
# helpers: an independent renamer and op swapper (not the ones in diff/synth.py)

_NAME_OR_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|%([A-Za-z0-9_$.\-]+)')


def rename_all(text: str, seed: int, mode: str = "fresh") -> str:
    """Rename every SSA name with one global bijection (``%x#1`` / ``%x:2`` keep their
    suffix).  ``permute`` maps the dump's own names onto each other."""
    names = list(dict.fromkeys(m.group(1) for m in _NAME_OR_STRING.finditer(text) if m.group(1)))
    rng = random.Random(seed)
    if mode == "permute":
        new = names[:]
        rng.shuffle(new)
    else:
        idx = list(range(len(names)))
        rng.shuffle(idx)
        new = [f"v{k}_{rng.choice('abc')}" for k in idx]
    table = dict(zip(names, new))
    return _NAME_OR_STRING.sub(lambda m: "%" + table[m.group(1)] if m.group(1) else m.group(0), text)


def swap_adjacent(text: str, seed: int) -> tuple[str, int]:
    """Swap adjacent single-line ops of one region when the second does not use the first
    (tokens are SSA values, so memory order is kept); returns (text, swaps made)."""
    mod = parse_tileir(text)
    lines = text.split("\n")
    rng = random.Random(seed)
    swaps = 0

    def bases(names):
        return {n.split("#")[0] for n in names}

    def visit(region):
        nonlocal swaps
        ops = region.ops
        k = 0
        while k + 1 < len(ops):
            a, b = ops[k], ops[k + 1]
            ok = (not a.regions and not b.regions and b.line == a.line + 1
                  and a.name not in TERMINATORS and b.name not in TERMINATORS
                  and "assert" not in (a.name, b.name)
                  and not (bases(a.results) | ({a.result_group} if a.result_group else set()))
                  & bases(b.operands))
            if ok and rng.random() < 0.6:
                lines[a.line - 1], lines[b.line - 1] = lines[b.line - 1], lines[a.line - 1]
                swaps += 1
                k += 2
            else:
                k += 1
        for op in ops:
            for r in op.regions:
                visit(r)

    for e in mod.entries:
        visit(e.body)
    return "\n".join(lines), swaps


def op_lines(text: str) -> list[str]:
    return [s for s in text.split("\n") if s.startswith("  ")]


def semantic(res) -> Counter:
    return Counter((c.kind, repr(c.before), repr(c.after)) for c in res.changes if c.level == "semantic")


def assert_only(res, expected: list[tuple], *, cubin_ok: bool = False) -> None:
    """Exactly the expected semantic changes, nothing unclassified, every delta explained."""
    got = semantic(res)
    want = Counter((k, repr(b), repr(a)) for k, b, a in expected)
    assert got == want, [c.detail for c in res.changes]
    assert [c.detail for c in res.changes if c.level == "structural"] == []
    if not cubin_ok:
        assert [c for c in res.changes if c.level == "cubin"] == []
    for d in res.structural:
        assert d.explained_by or d.dead, (d.kind, d.op, d.before, d.after)
    assert not res.equivalent
    assert res.summary()["unclassified_changes"] == 0


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    code = main(["ir-diff", *map(str, argv)])
    out = capsys.readouterr()
    return code, out.out, out.err


# ---------------------------------------------------------------------------------------
# equivalence

def test_renumbered_copies_of_every_dump_are_equivalent(all_dumps):
    texts = [(n, d.text(loc)) for n, d in all_dumps.items() for loc in (False, True)]
    texts += [(p.stem, p.read_text()) for p in JIT_FILES]
    total_swaps = 0
    for k, (name, text) in enumerate(texts):
        for mode in ("fresh", "permute"):
            new = rename_all(text, k, mode)
            new, swaps = swap_adjacent(new, k)
            total_swaps += swaps
            changed = sum(1 for x, y in zip(op_lines(text), op_lines(new)) if x != y)
            assert changed > 0.8 * len(op_lines(text)), name
            res = diff_texts(text, new)
            assert res.equivalent, (name, mode, [c.detail for c in res.changes][:5])
            assert res.structural == [] and res.changes == [] and res.regions == []
            (e,) = res.entries
            assert e.matched == e.ops_before == e.ops_after
    assert total_swaps > 5 * len(texts)


def test_synth_renumber_and_shuffle_are_equivalent(all_dumps):
    """The rewrites the benchmark builds on (diff/synth.py) keep programs equivalent, and
    do change the text: names everywhere, op order inside regions."""
    for k, (name, d) in enumerate(all_dumps.items()):
        text = d.text(loc=k % 2 == 1)
        for style in ("fresh", "shuffle"):
            new = shuffle(renumber(text, k, style=style), k)
            assert diff_texts(text, new).equivalent, (name, style)
    text = all_dumps["matmul"].text()
    a = [o.name for o in parse_tileir(text).walk()]
    b = [o.name for o in parse_tileir(shuffle(text, 3)).walk()]
    assert a != b and sorted(a) == sorted(b)


def test_a_single_edit_in_a_renumbered_copy_is_found(all_dumps):
    """The equivalence above is no accident of a differ that matches everything."""
    text = all_dumps["gather_scale"].text()
    new = rename_all(text, 1, "permute")
    assert diff_texts(text, new).equivalent
    edited = new.replace("<f32: 2.000000e+00>", "<f32: 3.000000e+00>", 1)
    assert edited != new
    res = diff_texts(text, edited)
    assert_only(res, [("constant", "f32: 2.000000e+00", "f32: 3.000000e+00")])


def test_plain_loc_and_bytecode_inputs_are_equivalent(capsys, all_dumps):
    d = all_dumps["matmul_tuned"]
    assert diff_paths(d.plain, d.loc).equivalent
    code, out, err = run_cli(capsys, d.bytecode, d.plain)
    assert code == 0, err
    assert "EQUIVALENT" in out


@pytest.mark.parametrize("path", JIT_FILES, ids=lambda p: p.stem)
def test_jit_dump_files_match_the_aot_dumps(capsys, path, ir_dump):
    """Files written by CUDA_TILE_DUMP_TILEIR during a JIT launch on an H200 diff as
    equivalent to this run's AOT export of the same kernel."""
    aot = ir_dump(path.stem)
    code, out, err = run_cli(capsys, path, aot.loc)
    assert code == 0, out + err


def test_capture_folders_equivalent_to_themselves_and_their_dumps(capsys, example_captures, tmp_path):
    cap = example_captures["softmax"]
    code, out, _ = run_cli(capsys, cap.path, cap.path, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["equivalent"] is True and doc["cubin"]["archs"].keys() == {"sm_90", "sm_100"}
    # a renumbered copy of its dump, written as a file
    f = tmp_path / "softmax.renamed.tileir"
    f.write_text(rename_all(cap.tileir_text(), 7, "permute"))
    code, out, _ = run_cli(capsys, cap.path, f, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["equivalent"] is True
    assert any("only one input is a capture folder" in w for w in doc["warnings"])


# ---------------------------------------------------------------------------------------
# knob variants: exactly the intended semantic change

FP8 = {"A": "f8e4m3fn[4096,4096]", "B": "f8e4m3fn[4096,4096]", "C": "f16[4096,4096]"}   # knob_kernels.FP8
F16_VECTORS = {"a": "f16[16777216]", "b": "f16[16777216]", "c": "f16[16777216]"}
CASES = {
    # id: (before, after, expected semantic changes (kind, before, after))
    "tile_size": (("matmul",), ("matmul", {"TM": 64}),
                  [("tile_shape", "128x64", "64x64"), ("tile_shape", "128x128", "64x128"),
                   ("tile_shape", "128x128x64", "64x128x64")]),
    "num_ctas": (("matmul",), ("matmul", None, {"num_ctas": 2}), [("entry_hint", None, 2)]),
    "occupancy": (("matmul",), ("matmul", None, {"occupancy": 2}), [("entry_hint", None, 2)]),
    "num_worker_warps": (("matmul",), ("matmul", None, {"num_worker_warps": 8}), [("entry_hint", None, 8)]),
    "latency": (("matmul",), ("knob:matmul_latency",), [("op_hint", None, 3)] * 2),
    "allow_tma": (("matmul",), ("knob:matmul_no_tma",), [("op_hint", None, False)] * 3),
    "padding": (("softmax",), ("knob:softmax_pad_zero",), [("padding", "neg_inf", "zero")]),
    "ftz_approx": (("softmax",), ("knob:softmax_fast_div",),
                   [("flush_to_zero", False, True), ("rounding", "nearest_even", "approx")]),
    "exp2": (("softmax",), ("knob:softmax_exp2",), [("math_function", "exp", "exp2")]),
    "persistent": (("vector_add",), ("vector_add_persistent",), [("persistent_loop", None, "*")]),
    "gather_vs_load": (("gather_scale",), ("knob:scale_load",),
                       [("access_pattern", "pointer gather load_ptr_tko (per-element addresses)",
                         "tile view (partition_view) load_view_tko, TMA-eligible"),
                        ("access_pattern", "pointer scatter store_ptr_tko (per-element addresses)",
                         "tile view (partition_view) store_view_tko, TMA-eligible")]),
    "tf32": (("matmul_f32",), ("knob:matmul_tf32",), [("mma_dtype", "f32 x f32 + f32", "tf32 x tf32 + f32")]),
    "fast_acc": (("matmul", FP8), ("knob:matmul_fast_acc",), [("fast_acc", False, True)]),
    "check_bounds": (("vector_add",), ("knob:vector_add_unchecked",), [("bounds_check", None, "[true]")]),
    "memory_order": (("vector_add",), ("knob:vector_add_acquire",),
                     [("memory_order", ["weak"], ["acquire"]), ("memory_scope", [], ["device"]),
                      ("token_chain", "*", "*")]),
    "dtype": (("vector_add",), ("vector_add", F16_VECTORS), [("dtype", "f32", "f16")]),
}
KNOB_NAMES = {"num_ctas": "num_ctas", "occupancy": "occupancy", "num_worker_warps": "num_worker_warps",
              "latency": "latency", "allow_tma": "allow_tma", "persistent": "persistent"}


def _dump(ir_dump, spec):
    name, specs, hints = (tuple(spec) + (None, None))[:3]
    return ir_dump(name, specs=specs, hints=hints)


def _fill(expected, res):
    """'*' in an expectation: any value (the loop text of a new persistent loop)."""
    out = []
    for k, b, a in expected:
        if "*" in (b, a):
            c = next(c for c in res.changes if c.kind == k)
            b, a = (c.before if b == "*" else b), (c.after if a == "*" else a)
        out.append((k, b, a))
    return out


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("direction", ["forward", "reverse"])
def test_knob_variant_reports_exactly_its_change(ir_dump, case, direction):
    before, after, expected = CASES[case]
    a, b = _dump(ir_dump, before), _dump(ir_dump, after)
    if direction == "reverse":
        a, b = b, a
        expected = [(k, y, x) for k, x, y in expected]
    res = diff_paths(a.loc, b.loc)
    assert_only(res, _fill(expected, res))
    if case in KNOB_NAMES:
        assert {c.knob for c in res.semantic()} == {KNOB_NAMES[case]}
    # every op-level change points at a Python line of the changed kernel
    for c in res.semantic():
        assert c.source and c.source.rsplit(":", 1)[0].endswith(".py"), c


def test_two_knobs_at_once(ir_dump):
    res = diff_paths(ir_dump("matmul").loc, ir_dump("knob:matmul_latency", specs={"TM": 64}).loc)
    assert_only(res, CASES["tile_size"][2] + CASES["latency"][2])
    res = diff_paths(ir_dump("matmul").plain,
                     ir_dump("matmul", hints={"num_ctas": 2, "occupancy": 2, "num_worker_warps": 8}).plain)
    assert_only(res, [("entry_hint", None, 2), ("entry_hint", None, 2), ("entry_hint", None, 8)])
    assert {c.knob for c in res.changes} == {"num_ctas", "occupancy", "num_worker_warps"}


def test_matmul_to_matmul_tuned_tells_the_real_story(ir_dump):
    """The demo's pair: the K loop is nested in a new persistent loop and its loads get a
    latency hint; the K loop itself is matched (not reported as added)."""
    res = diff_paths(ir_dump("matmul").loc, ir_dump("matmul_tuned").loc)
    kinds = Counter(c.kind for c in res.semantic())
    assert kinds == {"persistent_loop": 1, "op_hint": 2}
    assert res.summary()["unclassified_changes"] == 0
    (p,) = [c for c in res.semantic() if c.kind == "persistent_loop"]
    assert p.after and "added" in p.detail
    (e,) = res.details
    fors_a = [v for v in e.matching.a.op_nodes if e.matching.a.name[v] == "for"]
    (k_loop,) = fors_a
    b = e.matching.a2b[k_loop]
    assert b >= 0 and e.matching.b.depth[b] == 1           # the inner loop of the tuned kernel


def test_knob_changes_carry_python_lines(ir_dump):
    from .test_tileir_parser import line_of
    res = diff_paths(ir_dump("matmul").loc, ir_dump("knob:matmul_latency").loc)
    lines = {int(c.source.rsplit(":", 1)[1]) for c in res.semantic()}
    assert lines == {line_of(KNOBS, "a = ct.load(A, index=(bm, k), shape=(TM, TK), latency=3)"),
                     line_of(KNOBS, "b = ct.load(B, index=(k, bn), shape=(TK, TN), latency=3)")}
    assert all(c.region_path.startswith("for ") for c in res.semantic())
    assert res.summary()["structural"] == {"attribute": 2}


def test_arch_keyed_entry_hint(ir_dump):
    import cuda.tile as ct
    res = diff_paths(ir_dump("matmul").plain,
                     ir_dump("matmul", hints={"occupancy": ct.ByTarget(sm_100=2)}).plain)
    (c,) = res.semantic()
    assert (c.kind, c.knob, c.arch, c.before, c.after) == ("entry_hint", "occupancy", "sm_100", None, 2)


def test_text_edits_of_real_dumps(all_dumps):
    """Changes no knob kernel makes, applied to real dumps: a view's dim_map, a memory
    order, a comparison predicate, a make_token."""
    t = all_dumps["feature:transpose_f"].text()
    assert_only(diff_texts(t, t.replace(", dim_map=[1, 0]>", ">")),
                [("dim_map", "[1, 0]", "identity")])
    t = all_dumps["feature:while_loop"].text()
    assert_only(diff_texts(t, t.replace("less_than %", "less_than_or_equal %")),
                [("predicate", ["less_than", "signed"], ["less_than_or_equal", "signed"])])
    t = all_dumps["vector_add"].text()
    new = t.replace("store_view_tko weak", "store_view_tko relaxed", 1)
    assert_only(diff_texts(t, new), [("memory_order", ["weak"], ["relaxed"])])


def test_token_chain_change_is_named(all_dumps):
    """A store ordered after a fresh token instead of the entry's make_token."""
    t = all_dumps["vector_add"].text()
    lines = t.split("\n")
    i = next(k for k, s in enumerate(lines) if "store_view_tko" in s)
    new = lines[:i] + ["  %tok_new = make_token : token"] + \
        [re.sub(r"token = %\w+", "token = %tok_new", lines[i])] + lines[i + 1:]
    res = diff_texts(t, "\n".join(new))
    assert {c.kind for c in res.semantic()} == {"token_chain"}
    assert res.summary()["unclassified_changes"] == 0


def test_region_op_counts(ir_dump):
    res = diff_paths(ir_dump("vector_add").plain, ir_dump("vector_add_persistent").plain)
    regions = {r.region_path or "entry": r for r in res.regions}
    top = regions.pop("entry")
    assert top.delta["for"] == 1 and top.delta["load_view_tko"] == -2
    (loop,) = regions.values()
    assert loop.before == {} and loop.after == {"load_view_tko": 2, "addf": 1, "store_view_tko": 1}
    # the loads moved into the loop: topology deltas, kept apart from attribute deltas
    kinds = res.summary()["structural"]
    assert kinds.get("moved", 0) >= 3 and "attribute" not in kinds


def test_entries_added_and_removed(all_dumps):
    mm, sm = all_dumps["matmul"].text(), all_dumps["softmax"].text()
    both = mm + sm
    assert diff_texts(both, sm + mm).equivalent          # entries pair by symbol, not order
    res = diff_texts(both, mm)
    assert [(c.kind, c.level) for c in res.changes] == [("entry_removed", "semantic")]
    assert not res.equivalent
    res = diff_texts(mm, both, entry="matmul")
    assert res.equivalent and len(res.entries) == 1


# ---------------------------------------------------------------------------------------
# capture folders: the cubin side

HINT_CUBIN = {
    # hint: cubin facts (sm_90) that must change
    "num_ctas": ({"num_ctas": 2}, {"cluster_shape": ([1, 1, 1], [2, 1, 1])}),
    "occupancy": ({"occupancy": 2}, {"registers": (255, 128)}),
    "num_worker_warps": ({"num_worker_warps": 8}, {"threads_per_cta": ([256, 1, 1], [384, 1, 1])}),
}


@pytest.mark.parametrize("knob", sorted(HINT_CUBIN))
def test_hint_variants_change_the_cubin(capsys, example_captures, capture, knob):
    hints, facts = HINT_CUBIN[knob]
    base, var = example_captures["matmul"], capture("matmul", hints=hints)
    code, out, err = run_cli(capsys, base.path, var.path, "--json")
    assert code == 1, err
    doc = json.loads(out)
    ir = [c for c in doc["changes"] if c["level"] != "cubin"]
    assert [(c["kind"], c["knob"], c["before"], c["after"]) for c in ir] == \
        [("entry_hint", knob, None, next(iter(hints.values())))]
    cub = {c["op"]: (c["before"], c["after"]) for c in doc["changes"] if c["level"] == "cubin"}
    assert all(c["arch"] == "sm_90" for c in doc["changes"] if c["level"] == "cubin")
    for key, (b, a) in facts.items():
        assert cub[key] == (b, a), cub
    assert doc["cubin"]["only_before"] == ["sm_100"]
    arch = doc["cubin"]["archs"]["sm_90"]
    for key, (b, a) in facts.items():
        assert (arch["before"][key], arch["after"][key]) == (b, a)
    assert doc["summary"]["ir_equivalent"] is False and doc["summary"]["cubin_changes"] == len(cub)


def test_allow_tma_capture_shows_the_tma_remarks(example_captures, capture):
    """allow_tma=False: three op hints in the IR; the cubin loses its TMA loads and store."""
    res = diff_paths(example_captures["matmul"].path, capture("knob:matmul_no_tma").path)
    assert [(c.kind, c.knob) for c in res.changes if c.level == "semantic"] == [("op_hint", "allow_tma")] * 3
    cub = {c.op: (c.before, c.after) for c in res.changes if c.level == "cubin"}
    assert cub["remarks.tma_loads"] == (2, 0) and cub["remarks.tma_stores"] == (1, 0)
    assert cub["remarks.global_loads"][1] == 2
    assert res.cubin["archs"]["sm_90"]["sass"]["classes"]["tma"]["after"] == 0


def test_no_cubin_flag_and_persistent_capture(capsys, example_captures):
    a, b = example_captures["vector_add"].path, example_captures["vector_add_persistent"].path
    code, out, _ = run_cli(capsys, a, b, "--json", "--no-cubin")
    doc = json.loads(out)
    assert code == 1 and doc["cubin"] is None
    assert [c["kind"] for c in doc["changes"]] == ["persistent_loop"]
    code, out, _ = run_cli(capsys, a, b, "--json")
    doc = json.loads(out)
    assert {c["arch"] for c in doc["changes"] if c["level"] == "cubin"} <= {"sm_90", "sm_100"}
    assert set(doc["cubin"]["archs"]) == {"sm_90", "sm_100"}


# ---------------------------------------------------------------------------------------
# output: JSON, HTML, rich

def test_json_shape(capsys, ir_dump):
    code, out, _ = run_cli(capsys, ir_dump("softmax").loc, ir_dump("knob:softmax_fast_div").loc, "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["equivalent"] is False and isinstance(doc["summary"], dict)
    assert doc["summary"]["semantic_changes"] == 2
    for c in doc["changes"]:
        assert {"kind", "where", "before", "after", "entry", "region_path", "op", "line_before",
                "line_after", "source", "detail", "level"} <= set(c)
        assert c["where"].startswith("knob_kernels.py:") or c["where"].startswith("softmax.py:")
    (div,) = {c["op"] for c in doc["changes"]}
    assert div == "divf"
    (d,) = doc["structural"]
    assert d["kind"] == "attribute" and set(d["fields"]) == {"attrs.rounding", "keywords"}
    assert sorted(d["explained_by"]) == sorted(c["id"] for c in doc["changes"])
    code, out, _ = run_cli(capsys, ir_dump("softmax").plain, ir_dump("softmax").loc, "--json")
    doc = json.loads(out)
    assert code == 0 and doc["equivalent"] is True and doc["changes"] == []


def test_html_report_is_self_contained(capsys, ir_dump, tmp_path):
    out_file = tmp_path / "report.html"
    code, out, err = run_cli(capsys, ir_dump("gather_scale").loc, ir_dump("knob:scale_load").loc,
                             "--html", out_file)
    assert code == 1
    assert str(out_file) in err
    page = out_file.read_text()
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "access_pattern" in page and "Side by side" in page and "load_ptr_tko" in page
    # nothing fetched: no external scripts, styles, images or fonts
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "<link" not in page and "@import" not in page
    # with --json the report is still written and stdout stays JSON
    out2 = tmp_path / "r2.html"
    code, out, _ = run_cli(capsys, ir_dump("matmul").plain, ir_dump("matmul").plain, "--json", "--html", out2)
    assert code == 0 and json.loads(out)["equivalent"] and "EQUIVALENT" in out2.read_text()


def test_rich_output_lists_summary_then_changes(capsys, ir_dump):
    code, out, _ = run_cli(capsys, ir_dump("matmul").loc, ir_dump("knob:matmul_no_tma").loc)
    assert code == 1
    i_verdict, i_sem, i_struct = out.index("DIFFERENT"), out.index("Semantic changes"), out.index("Structural diff")
    assert i_verdict < i_sem < i_struct
    # the two loads' identical changes share a row
    assert "load_view_tko allow_tma: unset → false  (×2)" in out
    assert "store_view_tko allow_tma: unset → false" in out and "knob_kernels.py:" in out


# ---------------------------------------------------------------------------------------
# CLI errors: one line, exit 2

@pytest.fixture()
def bad_inputs(tmp_path, all_dumps, example_captures):
    good = all_dumps["vector_add"].text()
    files = {
        "empty": "",
        "python": Path(__file__).read_text(),
        "truncated": good[: len(good) // 2],
        "unbalanced": good.replace("  return\n}", "  return\n"),
    }
    out = {}
    for k, v in files.items():
        p = tmp_path / f"{k}.tileir"
        p.write_text(v)
        out[k] = p
    out["cubin"] = example_captures["vector_add"].file("cubin", "sm_90")
    out["missing"] = tmp_path / "nope.tileir"
    out["many_captures"] = example_captures["vector_add"].path.parent
    return out


@pytest.mark.parametrize("kind,message", [
    ("empty", r"empty\.tileir:1:1: empty file"),
    ("python", r"python\.tileir:\d+:1: expected 'entry @"),
    ("truncated", r"truncated\.tileir:\d+:\d+: "),
    ("unbalanced", r"unbalanced\.tileir:\d+:\d+: unexpected end of text"),
    ("cubin", r"kernel\.cubin:1:1: not TileIR text: a cubin"),
    ("missing", r"nope\.tileir: no such file"),
    ("many_captures", r"holds \d+ captures; name one"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, bad_inputs, all_dumps, kind, message):
    good = all_dumps["vector_add"].plain
    for argv in ((bad_inputs[kind], good), (good, bad_inputs[kind])):
        code, out, err = run_cli(capsys, *argv)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("cutile-diag: error: ")
        assert re.search(message, err), err
        assert "Traceback" not in err


def test_bad_options_exit_2(capsys, all_dumps, tmp_path):
    good = all_dumps["vector_add"].plain
    code, _, err = run_cli(capsys, good, good, "--entry", "nosuch")
    assert code == 2 and "no entry named nosuch" in err
    code, _, err = run_cli(capsys, good, good, "--html", tmp_path)
    assert code == 2 and "is a directory" in err


def test_console_script_exit_codes(all_dumps, tmp_path):
    """The installed entry point, as a user runs it: 0 / 1 / 2 and no traceback."""
    exe = Path(sys.executable).with_name("cutile-diag")
    a, b = all_dumps["softmax"].plain, all_dumps["knob:softmax_pad_zero"].plain
    empty = tmp_path / "e.tileir"
    empty.write_text("")
    codes = []
    for x, y in ((a, a), (a, b), (a, empty)):
        p = subprocess.run([str(exe), "ir-diff", str(x), str(y)], capture_output=True, text=True, timeout=120)
        codes.append(p.returncode)
        assert "Traceback" not in p.stderr
    assert codes == [0, 1, 2]


def test_diff_modules_api_on_parsed_modules(all_dumps):
    a = parse_tileir(all_dumps["softmax"].text())
    b = parse_tileir(all_dumps["knob:softmax_pad_zero"].text())
    res = diff_modules(a, b)
    assert_only(res, [("padding", "neg_inf", "zero")])
    assert res.to_json()["schema"] == "cutile-diag.ir-diff/1"


def test_a_hint_the_compiler_ignores_is_the_same_machine_code(capture, example_captures):
    """occupancy=1 on vector_add (28 registers): the TileIR gains the hint, the SASS (encodings and
    control bits included) and the resources stay — ``same_code``, the loop's no-op test; a real
    hint (occupancy=2 on matmul: 255 -> 128 registers) is not."""
    from cutile_diag.diff import diff_paths
    from cutile_diag.ir_parsers.sass import parse_sass
    base = capture("vector_add")
    res = diff_paths(base.path, capture("vector_add", hints={"occupancy": 1}).path)
    sm90 = res.cubin["archs"]["sm_90"]
    assert not res.equivalent and sm90["same_code"] is True
    assert [c for c in res.changes if c.level == "cubin"] == []
    hinted = diff_paths(example_captures["matmul"].path, capture("matmul", hints={"occupancy": 2}).path)
    assert hinted.cubin["archs"]["sm_90"]["same_code"] is False
    # the digest: addresses and the symbol's name do not count, one control bit does
    text = (base.path / "sm_90" / "kernel.sass").read_text()
    digest = next(iter(parse_sass(text).values())).digest
    renamed = text.replace("Function : vector_add", "Function : other").replace("/*0010*/", "/*9990*/")
    assert next(iter(parse_sass(renamed).values())).digest == digest
    enc = re.search(r"/\* (0x[0-9a-f]{16}) \*/", text.split("Function")[1]).group(1)
    flipped = text.replace(enc, enc[:-1] + ("0" if enc[-1] != "0" else "1"), 1)
    assert next(iter(parse_sass(flipped).values())).digest != digest
