"""The TileIR parser against real dumps made in this test run (examples, feature and knob
kernels, with and without ``-g``), the H200 JIT dumps, and bad input."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from cutile_diag.errors import CutileDiagError, ParseError
from cutile_diag.ir_parsers.tileir import parse_tileir, parse_tileir_file
from cutile_diag.ir_parsers.tileir_ops import KNOWN_OPS, REGION_OPS

from .conftest import FEATURES, JIT_DUMPS

JIT_FILES = sorted(JIT_DUMPS.glob("*.tileir"))
ALIASES = {"matmul_f32": "matmul"}        # examples/matmul.py: matmul_f32 = matmul


def line_of(path: Path, snippet: str, exact: bool = False) -> int:
    """1-based line of the only source line containing (or, exact, equal to) ``snippet``."""
    hits = [i for i, s in enumerate(Path(path).read_text().splitlines(), 1)
            if (s == snippet if exact else snippet in s)]
    assert len(hits) == 1, (snippet, hits)
    return hits[0]


def ops(entry, name):
    return [o for o in entry.walk() if o.name == name]


def one(entry, name):
    (o,) = ops(entry, name)
    return o


# ---------------------------------------------------------------------------------------
# every real dump

def test_every_dump_parses_cleanly(all_dumps):
    assert len(all_dumps) >= 20
    for name, d in all_dumps.items():
        plain = parse_tileir_file(d.plain)
        loc = parse_tileir_file(d.loc)
        for mod in (plain, loc):
            assert mod.warnings == [], (name, mod.warnings[:3])
            assert len(mod.entries) == 1
            e = mod.entries[0]
            base = name.split(":")[-1]
            assert e.function_name == ALIASES.get(base, base)
            names = {o.name for o in e.walk()}
            assert names <= KNOWN_OPS, names - KNOWN_OPS
            assert e.body.ops[-1].name == "return"
        assert not plain.has_locations and loc.has_locations
        # -g adds locations and nothing else
        a = [(o.name, o.results, o.operands, o.attrs, o.keywords, o.hints, o.region_path)
             for o in plain.walk()]
        b = [(o.name, o.results, o.operands, o.attrs, o.keywords, o.hints, o.region_path)
             for o in loc.walk()]
        assert a == b, name


@pytest.mark.parametrize("path", JIT_FILES, ids=lambda p: p.stem)
def test_jit_dumps_parse(path):
    mod = parse_tileir_file(path)
    assert mod.warnings == []
    (e,) = mod.entries
    assert e.function_name == ALIASES.get(path.stem, path.stem)
    assert sum(1 for _ in e.walk()) > 20


def test_plain_text_and_bytes_agree(all_dumps):
    d = all_dumps["softmax"]
    a = parse_tileir(d.text(), path="x")
    b = parse_tileir(d.plain.read_bytes(), path="x")
    assert [o.text for o in a.walk()] == [o.text for o in b.walk()]


def test_template_cache_gives_the_same_model(all_dumps, monkeypatch):
    """Op lines are parsed once per shape and instantiated; plain parsing must agree."""
    import cutile_diag.ir_parsers.tileir as t
    for name in ("matmul_tuned", "feature:while_loop", "feature:scan_rows", "feature:debug_print"):
        text = all_dumps[name].text(loc=True)
        monkeypatch.setattr(t, "TEMPLATE_CACHE", True)
        fast = parse_tileir(text)
        monkeypatch.setattr(t, "TEMPLATE_CACHE", False)
        slow = parse_tileir(text)
        key = lambda o: (o.name, o.results, o.operands, o.operand_roles, o.keywords, o.attrs,  # noqa: E731
                         o.hints, [x.text for x in o.operand_types], [x.text for x in o.result_types],
                         o.result_group, o.line, str(o.source))
        assert [key(o) for o in fast.walk()] == [key(o) for o in slow.walk()], name
        # the per-shape label the differ uses is the line with its names erased
        from cutile_diag.diff.graph import erase_ssa
        assert all(o.erased is None or o.erased == erase_ssa(o.text) for o in fast.walk())
        assert sum(o.erased is not None for o in fast.walk()) > 0.9 * sum(1 for _ in fast.walk()) - 5


# ---------------------------------------------------------------------------------------
# entries, arguments, results

def test_entry_and_arguments(all_dumps):
    (e,) = parse_tileir_file(all_dumps["matmul"].plain).entries
    assert e.symbol.startswith("matmul_K") and e.symbol.endswith("_I128_I128_I64")
    assert e.hints == {"default": {}}
    # three 2-D arrays: base pointer, 2 shapes, 2 strides each
    assert [a.name for a in e.args] == [f"%arg{i}" for i in range(15)]
    for k in range(3):
        base, *rest = e.args[5 * k: 5 * k + 5]
        assert base.type.kind == "tile" and base.type.is_pointer and base.type.pointee == "f16"
        assert base.type.is_scalar
        assert [a.type.text for a in rest] == ["tile<i32>"] * 4


def test_multi_results(all_dumps):
    e = parse_tileir_file(all_dumps["matmul"].plain).entries[0]
    shape = one(e, "get_index_space_shape")
    # '%1:2 = get_index_space_shape' -> %1#0, %1#1; the loop bound uses '%1#1'
    assert shape.result_group == "%1" and shape.results == ["%1#0", "%1#1"]
    assert [t.text for t in shape.result_types] == ["tile<i32>", "tile<i32>"]
    loop = one(e, "for")
    assert loop.operands[loop.operand_roles.index("upper")] == "%1#1"
    bid = ops(e, "get_tile_block_id")[0]
    assert bid.results == ["%blockId_x", "%blockId_y", "%blockId_z"]
    assert [t.text for t in bid.result_types] == ["tile<i32>"] * 3
    load = ops(e, "load_view_tko")[0]
    assert len(load.results) == 2
    assert [t.kind for t in load.result_types] == ["tile", "token"]
    # a Python while loop carries (index, token): '%1:2 = loop ...'
    w = parse_tileir_file(all_dumps["feature:while_loop"].plain).entries[0]
    lp = one(w, "loop")
    assert lp.result_group is not None and len(lp.results) == 2
    assert [t.text for t in lp.result_types] == ["tile<i32>", "token"]


# ---------------------------------------------------------------------------------------
# types

def test_tile_and_tensor_view_types(all_dumps):
    e = parse_tileir_file(all_dumps["matmul"].plain).entries[0]
    mma = one(e, "mmaf")
    a, b, acc = mma.operand_types
    assert (a.shape, a.elem, a.nbytes()) == ((128, 64), "f16", 128 * 64 * 2)
    assert (b.shape, acc.shape, acc.elem) == ((64, 128), (128, 128), "f32")
    assert mma.result_types[0].text == "tile<128x128xf32>"
    tv = ops(e, "make_tensor_view")[0].result_types[0]
    assert tv.kind == "tensor_view" and tv.shape == (None, None) and tv.elem == "f16"
    assert tv.param["strides"] == "[?,1]"
    assert ops(e, "make_token")[0].result_types[0].kind == "token"


def test_partition_view_padding_and_dim_map(all_dumps):
    e = parse_tileir_file(all_dumps["softmax"].plain).entries[0]
    pv = ops(e, "make_partition_view")[0].result_types[0]
    assert pv.kind == "partition_view" and pv.tile_shape == (1, 1024)
    assert pv.padding == "neg_inf"
    assert pv.inner.kind == "tensor_view" and pv.view_elem == "f16"
    e = parse_tileir_file(all_dumps["knob:softmax_pad_zero"].plain).entries[0]
    assert ops(e, "make_partition_view")[0].result_types[0].padding == "zero"
    e = parse_tileir_file(all_dumps["feature:transpose_f"].plain).entries[0]
    load_view, store_view = (o.result_types[0] for o in ops(e, "make_partition_view"))
    assert load_view.param["dim_map"] == "[1, 0]"
    assert "dim_map" not in store_view.param and store_view.padding is None


def test_gather_scatter_view(all_dumps):
    e = parse_tileir_file(all_dumps["feature:gather_rows"].plain).entries[0]
    gs = one(e, "make_gather_scatter_view").result_types[0]
    assert gs.kind == "gather_scatter_view"
    assert gs.tile_shape == (64, 256) and gs.padding == "zero" and gs.param["sparse_dim"] == "0"
    assert gs.inner.kind == "tensor_view" and gs.view_elem == "f16"
    load = [o for o in ops(e, "load_view_tko") if o.operand_types[0].kind == "gather_scatter_view"]
    (load,) = load
    # the gather's indices are a tile operand: index role, typed tile<64xi32>
    assert load.operand_roles.count("index") == 2
    assert [t.text for t in load.operand_types[1:]] == ["tile<64xi32>", "tile<i32>"]


def test_strided_view(all_dumps):
    """``tiled_view(traversal_steps=...)`` is printed as a strided_view in cuTile 1.7."""
    e = parse_tileir_file(all_dumps["feature:strided_tiles"].plain).entries[0]
    sv = one(e, "make_strided_view").result_types[0]
    assert sv.kind == "strided_view" and sv.tile_shape == (64, 256)
    assert sv.param["traversal_strides"] == "[32,256]"
    assert sv.inner.kind == "tensor_view"


# ---------------------------------------------------------------------------------------
# hints

def test_entry_hints(ir_dump):
    import cuda.tile as ct
    e = parse_tileir_file(ir_dump("matmul", hints={"num_ctas": 2, "occupancy": 2,
                                                   "num_worker_warps": 8}).plain).entries[0]
    assert e.hints == {"default": {"num_cta_in_cga": 2, "occupancy": 2, "num_worker_warps_per_cta": 8}}
    assert e.hint("occupancy") == 2
    e = parse_tileir_file(ir_dump("matmul", hints={"occupancy": ct.ByTarget(sm_100=2, default=1)}).plain).entries[0]
    assert e.hints == {"default": {"occupancy": 1}, "sm_100": {"occupancy": 2}}
    assert e.hint("occupancy", "sm_100") == 2 and e.hint("occupancy", "sm_90") == 1


def test_op_hints(all_dumps):
    e = parse_tileir_file(all_dumps["knob:matmul_latency"].plain).entries[0]
    loads = ops(e, "load_view_tko")
    assert [o.hints for o in loads] == [{"default": {"latency": 3}}] * 2
    assert loads[0].hint("latency") == 3 and loads[0].hint("allow_tma") is None
    e = parse_tileir_file(all_dumps["knob:matmul_no_tma"].plain).entries[0]
    for o in ops(e, "load_view_tko") + ops(e, "store_view_tko"):
        assert o.hints == {"default": {"allow_tma": False}}
    # the hint is no operand and no attribute
    assert all("optimization_hints" not in o.attrs for o in e.walk())
    assert all(len(o.operands) == len(o.operand_roles) for o in e.walk())


# ---------------------------------------------------------------------------------------
# regions

def test_for_region(all_dumps):
    e = parse_tileir_file(all_dumps["matmul"].plain).entries[0]
    loop = one(e, "for")
    assert loop.operand_roles == ["lower", "upper", "step", "init"]
    (body,) = loop.regions
    assert [a.type.text for a in body.args] == ["tile<i32>", "tile<128x128xf32>"]
    assert body.args[0].name.startswith("%loopIdx")
    assert [o.name for o in body.ops] == ["load_view_tko", "load_view_tko", "mmaf", "continue"]
    assert all(o.parent is loop and o.region_path == ("for[0]",) and o.loop_depth == 1 for o in body.ops)
    assert loop.result_types[0].text == "tile<128x128xf32>"
    # the accumulator flows in through the block argument
    mma = one(e, "mmaf")
    assert mma.operands[2] == body.args[1].name


def test_nested_for_region(all_dumps):
    e = parse_tileir_file(all_dumps["matmul_tuned"].plain).entries[0]
    outer, inner = ops(e, "for")
    assert inner.parent is outer and inner.region_path == ("for[0]",)
    assert all(o.loop_depth == 2 for o in inner.regions[0].ops)
    assert outer.result_types[0].kind == "token"          # persistent loop carries a token


def test_loop_if_else_break(all_dumps):
    e = parse_tileir_file(all_dumps["feature:while_loop"].plain).entries[0]
    lp = one(e, "loop")
    assert lp.operand_roles == ["init", "init"]
    (body,) = lp.regions
    assert [a.type.text for a in body.args] == ["tile<i32>", "token"]
    cond = one(e, "if")
    assert cond.parent is lp and cond.operand_roles == ["cond"]
    then, other = cond.regions
    assert (then.label, other.label) == ("then", "else")
    assert then.ops == [] and [o.name for o in other.ops] == ["break"]
    assert other.ops[0].region_path == ("loop[0]", "if[1]")
    assert body.ops[-1].name == "continue"


def test_if_else_with_results(all_dumps):
    e = parse_tileir_file(all_dumps["feature:if_else"].plain).entries[0]
    cond = one(e, "if")
    assert [t.text for t in cond.result_types] == ["tile<1024xf32>"]
    then, other = cond.regions
    assert [o.name for o in then.ops][-2:] == ["mulf", "yield"]
    assert [o.name for o in other.ops][-2:] == ["subf", "yield"]
    # both branches reuse the printer names %reshape/%bcast: scoped per region
    assert then.ops[1].results == other.ops[1].results


def test_reduce_and_scan_block_args(all_dumps):
    e = parse_tileir_file(all_dumps["softmax"].plain).entries[0]
    mx, sm = ops(e, "reduce")
    assert mx.attrs["dim"] == "1" and "0xFF800000" in mx.attrs["identities"]
    assert [a.name for a in mx.regions[0].args] == ["%reduce_lhs", "%reduce_rhs"]
    assert [o.name for o in mx.regions[0].ops] == ["maxf", "yield"]
    assert [o.name for o in sm.regions[0].ops] == ["addf", "yield"]
    assert mx.result_types[0].text == "tile<1xf32>"
    e = parse_tileir_file(all_dumps["feature:scan_rows"].plain).entries[0]
    sc = one(e, "scan")
    assert sc.attrs["dim"] == "1" and sc.attrs["reverse"] == "false"
    assert [a.type.text for a in sc.regions[0].args] == ["tile<f32>", "tile<f32>"]
    assert sc.result_types[0].text == "tile<1x1024xf32>"
    assert [o.name for o in sc.regions[0].ops] == ["addf", "yield"]


def test_region_ops_all_have_regions(all_dumps):
    for name, d in all_dumps.items():
        for o in parse_tileir_file(d.plain).walk():
            if o.name in REGION_OPS:
                assert o.regions, (name, o.text)
            else:
                assert not o.regions, (name, o.text)


# ---------------------------------------------------------------------------------------
# constants, keywords, strings, atomics

def test_constants_and_keywords(all_dumps):
    e = parse_tileir_file(all_dumps["matmul"].plain).entries[0]
    consts = {o.attrs["value"] for o in ops(e, "constant")}
    assert {"i32: 0", "i32: 1", "f32: 0.000000e+00"} <= consts
    zero = [o for o in ops(e, "constant") if o.attrs["value"] == "f32: 0.000000e+00"][0]
    assert zero.result_types[0].text == "tile<128x128xf32>"
    assert {o.attrs.get("div_by") for o in ops(e, "assume")} >= {"16", "8"}
    assert any(o.attrs.get("bounded") == "0, ?" for o in ops(e, "assume"))
    assert all(o.keywords == ["weak"] for o in ops(e, "load_view_tko"))
    e = parse_tileir_file(all_dumps["knob:softmax_fast_div"].plain).entries[0]
    div = one(e, "divf")
    assert div.attrs["rounding"] == "approx" and "flush_to_zero" in div.keywords
    e = parse_tileir_file(all_dumps["feature:while_loop"].plain).entries[0]
    assert one(e, "cmpi").keywords == ["less_than", "signed"]


def test_atomics_and_token_joins(all_dumps):
    e = parse_tileir_file(all_dumps["feature:histogram"].plain).entries[0]
    at = one(e, "atomic_rmw_tko")
    assert {"acq_rel", "device", "add"} <= set(at.keywords)
    assert at.operand_roles[-1] == "token"
    assert [t.kind for t in at.result_types] == ["tile", "token"]
    joins = ops(e, "join_tokens")
    assert joins and all(o.result_types[0].kind == "token" for o in joins)


def test_strings_with_percent_signs(all_dumps):
    e = parse_tileir_file(all_dumps["feature:debug_print"].plain).entries[0]
    pr = one(e, "print_tko")
    assert pr.attrs["string"] == '"bid %d: %f {x}\\0A"'
    # '%d' / '%f' inside the format are not values
    assert pr.operand_roles == ["", "", "token"] and all(not x.startswith(("%d", "%f")) for x in pr.operands)
    asrt = one(e, "assert")
    assert asrt.attrs["string"] == '"negative sum (%d)"' and len(asrt.operands) == 1


# ---------------------------------------------------------------------------------------
# source locations (-g)

def test_source_locations(all_dumps):
    mod = parse_tileir_file(all_dumps["feature:while_loop"].loc)
    e = mod.entries[0]
    src = str(FEATURES)
    assert e.source is not None and e.source.file == src
    assert e.source.line == line_of(FEATURES, "def while_loop(")
    assert one(e, "loop").source.line == line_of(FEATURES, "while i < n:")
    load = one(e, "load_view_tko")
    assert (load.source.file, load.source.line) == (src, line_of(FEATURES, "t = ct.load(x, index=(i,)"))
    assert load.source.column > 0
    assert one(e, "store_view_tko").source.line == line_of(FEATURES, "ct.store(y, index=(i,)")
    assert one(e, "get_num_tile_blocks").source.line == line_of(FEATURES, "i = i + ct.num_blocks(0)")
    # every op but 'return' (loc(unknown)) has a location
    assert [o.name for o in e.walk() if o.source is None] == ["return"]


def test_locations_inside_cutile_stubs_point_at_the_user_line(all_dumps):
    """``acc.astype(...)`` is inlined from cuTile's _stub.py (callsite locations): the op is
    reported at the user's line."""
    from cutile_diag.examples import EXAMPLES_DIR
    text = all_dumps["matmul"].text(loc=True)
    assert "_stub.py" in text and "callsite(" in text
    e = parse_tileir(text).entries[0]
    mm = EXAMPLES_DIR / "matmul.py"
    ftof = one(e, "ftof")
    assert (Path(ftof.source.file), ftof.source.line) == \
        (mm, line_of(mm, "    ct.store(C, index=(bm, bn), tile=acc.astype(C.dtype))", exact=True))
    for o in e.walk():
        assert o.source is None or "/cuda/tile/" not in o.source.file, o.text


# ---------------------------------------------------------------------------------------
# bad input: ParseError with file:line:column

def _err(text, path="in.tileir") -> ParseError:
    with pytest.raises(ParseError) as ei:
        parse_tileir(text, path=path)
    e = ei.value
    assert isinstance(e, CutileDiagError) and e.path == path
    assert e.line is not None and e.column is not None and e.line >= 1 and e.column >= 1
    assert e.one_line().startswith(f"{path}:{e.line}:{e.column}: ")
    assert "\n" not in e.one_line()
    return e


def test_empty_and_blank_files():
    for text in ("", "\n\n", "   \n"):
        e = _err(text)
        assert "empty" in e.message and (e.line, e.column) == (1, 1)


def test_cubin_and_bytecode_are_rejected(example_captures, all_dumps):
    cubin = example_captures["matmul"].file("cubin", "sm_90").read_bytes()
    e = _err(cubin, "kernel.cubin")
    assert "cubin" in e.message and (e.line, e.column) == (1, 1)
    e = _err(all_dumps["matmul"].bytecode.read_bytes(), "kernel.tileirbc")
    assert "bytecode" in e.message
    # other binary data: the first byte that is not UTF-8
    e = _err(b"entry @k() {\n  \xff\xfe\n}\n")
    assert (e.line, e.column) == (2, 3)


def test_python_file_is_rejected():
    from cutile_diag.examples import EXAMPLES_DIR
    src = (EXAMPLES_DIR / "matmul.py").read_text()
    e = _err(src, "matmul.py")
    first = next(i for i, s in enumerate(src.splitlines(), 1) if s.strip())
    assert e.line == first and "TileIR" in e.message


def test_truncated_text(all_dumps):
    text = all_dumps["matmul"].text()
    lines = text.split("\n")
    # cut after a complete line inside the for loop: regions are still open
    cut = next(i for i, s in enumerate(lines) if "mmaf" in s) + 1
    e = _err("\n".join(lines[:cut]))
    assert "end of text" in e.message and "2 region(s)" in e.message and e.line == cut
    # cut in the middle of a line: that line is reported
    for frac in (0.3, 0.5, 0.8):
        k = int(len(text) * frac)
        k = text.index("=", k) + 2        # 'x = ' with its op missing
        e = _err(text[:k])
        assert e.line == text[:k].count("\n") + 1


def test_unbalanced_braces(all_dumps):
    text = all_dumps["feature:if_else"].text()
    lines = text.split("\n")
    # a region closer missing: the entry's own '}' closes the if, and the text ends open
    i = lines.index("  }")
    e = _err("\n".join(lines[:i] + lines[i + 1:]))
    assert "end of text" in e.message and e.line >= i
    # 'else' after a region that is no if
    j = lines.index("  } else {")
    e = _err("\n".join(lines[:j] + ["  }", "  %x = constant <i32: 0> : tile<i32>", "} else {"] + lines[j + 1:]))
    assert e.line == j + 3
    # an extra closing brace after the entry
    e = _err(text.rstrip("\n") + "\n}\n")
    assert "unbalanced '}'" in e.message and e.line == len(lines)
    # a bracket missing inside a line: the column of the unclosed bracket
    j = next(k for k, s in enumerate(lines) if "make_partition_view" in s)
    bad = lines[j].replace("tile=(1024)", "tile=(1024", 1)
    e = _err("\n".join(lines[:j] + [bad] + lines[j + 1:]))
    assert e.line == j + 1 and e.column == bad.index("(1024") + 1


def test_errors_from_files_name_the_file(tmp_path, all_dumps):
    p = tmp_path / "broken.tileir"
    p.write_text(all_dumps["vector_add"].text()[:-30])
    with pytest.raises(ParseError) as ei:
        parse_tileir_file(p)
    assert ei.value.one_line().startswith(f"{p}:")


# ---------------------------------------------------------------------------------------
# syntax from a newer compiler: parsed generically, with a warning

def test_unknown_op_parses_generically(all_dumps):
    text = all_dumps["vector_add"].text()
    line = next(s for s in text.split("\n") if " = addf " in s)
    new = line.replace(" addf ", " addf_sat ").replace(" : ", " saturate<4> : ")
    mod = parse_tileir(text.replace(line, new), path="v.tileir")
    (op,) = [o for o in mod.walk() if o.name == "addf_sat"]
    assert len(op.operands) == 2 and op.attrs["saturate"] == "4"
    assert op.result_types[0].text == "tile<1024xf32>"
    (w,) = mod.warnings
    assert "unknown op 'addf_sat'" in w and w.startswith(f"v.tileir:{op.line}:")


def test_unknown_region_op_parses_generically(all_dumps):
    text = all_dumps["matmul"].text()
    mod = parse_tileir(text.replace(" = for %", " = for_pipelined %"), path="m.tileir")
    (op,) = [o for o in mod.walk() if o.name == "for_pipelined"]
    assert op.regions and op.regions[0].ops[-1].name == "continue"
    assert any("unknown op 'for_pipelined'" in w for w in mod.warnings)


def test_unknown_type_parses_generically(all_dumps):
    text = all_dumps["vector_add"].text()
    new = re.sub(r"partition_view<tile=\(1024\), ", "swizzled_view<tile=(1024), swizzle=128B, ", text)
    new = new.replace("swizzled_view<tile=(1024), swizzle=128B, tensor_view<?xf32, strides=[1]>>",
                      "swizzled_view<tile=(1024), swizzle=128B, tensor_view<?xf32, strides=[1]>>")
    mod = parse_tileir(new, path="v.tileir")
    pv = [o for o in mod.walk() if o.name == "make_partition_view"][0]
    t = pv.result_types[0]
    assert t.kind == "other" and t.text.startswith("swizzled_view<")
    assert any("unknown type syntax 'swizzled_view<" in w for w in mod.warnings)


def test_unknown_entry_attribute_warns(all_dumps):
    text = all_dumps["vector_add"].text()
    new = text.replace("optimization_hints=<default = {}>", "optimization_hints=<default = {}> launch_bounds<128>", 1)
    mod = parse_tileir(new, path="v.tileir")
    assert mod.entries[0].hints == {"default": {}}
    assert any("unrecognised entry attributes" in w for w in mod.warnings)


def test_module_wrapper_is_accepted(all_dumps):
    text = all_dumps["vector_add"].text()
    wrapped = "module {\n" + "".join("  " + s + "\n" for s in text.strip("\n").split("\n")) + "}\n"
    mod = parse_tileir(wrapped)
    assert sum(1 for _ in mod.walk()) == sum(1 for _ in parse_tileir(text).walk())
    with pytest.raises(ParseError, match="never closed"):
        parse_tileir(wrapped[:wrapped.rindex("}")])
