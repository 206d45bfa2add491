"""Property tests: mutated real dumps never make the parser (or the differ, on what still
parses) raise anything but ``ParseError``, and never hang."""
from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cutile_diag.diff.core import diff_modules
from cutile_diag.errors import ParseError
from cutile_diag.ir_parsers.tileir import parse_tileir

# real dumps made in this run: loops, if/else, reduce/scan, gathers, strings, -g tables
SOURCES = ["matmul", "matmul_tuned", "softmax", "gather_scale", "feature:while_loop",
           "feature:if_else", "feature:scan_rows", "feature:gather_rows", "feature:debug_print",
           "feature:histogram"]
# characters that matter to the grammar, plus some that never occur in TileIR
ALPHABET = st.sampled_from(list("%#{}()<>[],:=\"\\ \n\t-?@;x0") + ["\x00", "é", "→", "\x7f"])
SLOW_S = 2.0

_settings = settings(max_examples=150, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def texts(all_dumps):
    out = []
    for name in SOURCES:
        out.append(all_dumps[name].text())
        out.append(all_dumps[name].text(loc=True))
    return out


@st.composite
def mutated(draw, texts):
    text = draw(st.sampled_from(texts))
    lines = text.split("\n")
    for _ in range(draw(st.integers(1, 4))):
        what = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "edit", "brace", "cut"]))
        n = len(lines)
        if n == 0:
            break
        i = draw(st.integers(0, n - 1))
        if what == "delete":
            del lines[i]
        elif what == "duplicate":
            lines.insert(i, lines[i])
        elif what == "swap" and n > 1:
            j = draw(st.integers(0, n - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif what == "truncate":
            lines = lines[:i]
        elif what == "edit":
            s = lines[i]
            for _ in range(draw(st.integers(1, 3))):
                k = draw(st.integers(0, len(s)))
                op = draw(st.sampled_from(["insert", "replace", "delete"]))
                c = draw(ALPHABET)
                if op == "insert":
                    s = s[:k] + c + s[k:]
                elif op == "replace":
                    s = s[:k] + c + s[k + 1:]
                else:
                    s = s[:k] + s[k + 1:]
            lines[i] = s
        elif what == "brace":
            s = lines[i]
            ch = draw(st.sampled_from("{}()<>[]"))
            k = s.find(ch)
            if k >= 0:
                lines[i] = s[:k] + s[k + 1:]
        elif what == "cut":                 # truncated in the middle of a line
            s = "\n".join(lines)
            k = draw(st.integers(0, len(s)))
            lines = s[:k].split("\n")
    return "\n".join(lines)


def _parse_or_parse_error(text):
    t = time.perf_counter()
    try:
        mod = parse_tileir(text, path="fuzz.tileir")
    except ParseError as e:
        assert e.line is not None and e.column is not None, e
        assert e.one_line().startswith("fuzz.tileir:")
        mod = None
    assert time.perf_counter() - t < SLOW_S
    return mod


@pytest.mark.parametrize("cache", [True, False], ids=["templates", "plain"])
def test_mutated_dumps_raise_only_parse_errors(texts, cache, monkeypatch):
    import cutile_diag.ir_parsers.tileir as t
    monkeypatch.setattr(t, "TEMPLATE_CACHE", cache)

    @_settings
    @given(mutated(texts))
    def check(text):
        _parse_or_parse_error(text)

    check()


def test_mutated_bytes_raise_only_parse_errors(texts):
    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(st.sampled_from(texts), st.binary(min_size=1, max_size=8), st.floats(0, 1))
    def check(text, junk, where):
        data = text.encode()
        k = int(len(data) * where)
        _parse_or_parse_error(data[:k] + junk + data[k:])

    check()


def test_differ_survives_whatever_still_parses(texts):
    """A mutant that parses (duplicated/deleted/edited lines) diffs against its original
    without raising; diffing it with itself is equivalent."""
    originals = [parse_tileir(t) for t in texts]

    @settings(max_examples=60, deadline=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
    @given(st.data())
    def check(data):
        k = data.draw(st.integers(0, len(texts) - 1))
        text = data.draw(mutated([texts[k]]))
        mod = _parse_or_parse_error(text)
        if mod is None:
            return
        t = time.perf_counter()
        res = diff_modules(originals[k], mod)
        assert isinstance(res.equivalent, bool)
        res.to_json()
        assert diff_modules(mod, parse_tileir(text)).ir_equivalent
        assert time.perf_counter() - t < SLOW_S

    check()
