"""The HTML report in a real browser: headless Chromium (Debian's ``chromium`` package,
driven by Playwright through the system browser; ``./dev test`` installs both).

Without a browser these tests skip with the reason, except under ``CI=true``, where they
fail: CI must not pass by skipping them.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from cutile_diag.diff import synth
from cutile_diag.diff.core import diff_paths, diff_texts
from cutile_diag.diff.output import render_html

pytestmark = pytest.mark.browser

CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def _unavailable(reason: str):
    if _in_ci():
        pytest.fail(f"browser tests cannot run under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


def _chromium() -> str | None:
    for c in (os.environ.get("CUTILE_DIAG_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium"):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


@pytest.fixture(scope="module")
def browser():
    exe = _chromium()
    if exe is None:
        _unavailable("no chromium executable (Debian: apt-get install chromium chromium-driver; "
                     "./dev test does it as root)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _unavailable("the playwright package is not installed (pip install -e '.[test]')")
    with sync_playwright() as p:
        try:
            b = p.chromium.launch(executable_path=exe, args=CHROMIUM_ARGS)
        except Exception as e:       # a broken install: say what failed
            _unavailable(f"{exe} does not start: {str(e).splitlines()[0]}")
        yield b
        b.close()


@pytest.fixture()
def open_report(browser, tmp_path):
    """``open_report(html) -> (page, console errors, load ms)``."""
    pages = []

    def open_(page_html: str):
        f = tmp_path / f"report{len(pages)}.html"
        f.write_text(page_html)
        page = browser.new_page()
        page.set_default_timeout(15000)
        pages.append(page)
        errors: list[str] = []
        page.on("console", lambda m: errors.append(f"console.{m.type}: {m.text}") if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: errors.append(f"page error: {e}"))
        page.on("requestfailed", lambda r: errors.append(f"request failed: {r.url}"))
        page.goto(f.as_uri(), wait_until="load")
        ms = page.evaluate("() => { const n = performance.getEntriesByType('navigation')[0];"
                           " return n.loadEventEnd - n.startTime; }")
        return page, errors, ms

    yield open_
    for p in pages:
        p.close()


def test_report_renders_without_errors_and_marks_changes(open_report, ir_dump):
    res = diff_paths(ir_dump("gather_scale").loc, ir_dump("knob:scale_load").loc)
    page, errors, _ms = open_report(render_html(res))
    assert errors == []
    assert page.title() == "cutile-diag ir-diff"
    assert page.locator(".verdict.ne").inner_text().startswith("DIFFERENT")
    # changed ops are marked by kind, with their own colour
    sbs = page.locator("table.sbs").first
    marked = {k: sbs.locator(f"tr[data-change={k}]").count() for k in ("added", "removed", "attribute", "rewired")}
    assert marked["added"] > 0 and marked["removed"] > 0, marked
    colour = lambda sel: sbs.locator(sel).first.evaluate("e => getComputedStyle(e).backgroundColor")  # noqa: E731
    assert colour("tr[data-change=added]") != colour("tr[data-change=same]")
    assert colour("tr[data-change=added]") != colour("tr[data-change=removed]")
    # the semantic changes' impact slices open and list the store they reach
    imp = page.locator("table.changes details.impact").first
    assert "store_ptr_tko" in imp.locator("summary").inner_text() or "store_view_tko" in imp.inner_text()
    imp.locator("summary").click()
    assert imp.locator("div.mono").is_visible()


def test_side_by_side_toggle_and_collapsible_sections(open_report, ir_dump):
    res = diff_paths(ir_dump("softmax").loc, ir_dump("knob:softmax_pad_zero").loc)
    page, errors, _ms = open_report(render_html(res))
    assert errors == []
    sbs = page.locator("table.sbs").first
    same = sbs.locator("tr.same").first
    changed = sbs.locator("tr.attribute").first
    impacted = sbs.locator("tr.impact").first
    assert same.is_visible() and changed.is_visible() and impacted.is_visible()
    # "only changed rows" hides unchanged rows, keeps changed and impacted ones, and undoes
    box = page.get_by_label("only changed rows").first
    box.check()
    assert not same.is_visible() and changed.is_visible() and impacted.is_visible()
    box.uncheck()
    assert same.is_visible()
    # every section folds and unfolds from its heading
    sections = page.locator("details.section")
    titles = [s.strip() for s in sections.locator(":scope > summary").all_inner_texts()]
    assert {"Semantic changes", "Structural deltas", "Side by side (canonical names)"} <= set(titles)
    deltas = sections.filter(has_text="Structural deltas").first
    body = deltas.locator(":scope > div").first
    assert body.is_visible()
    deltas.locator(":scope > summary").click()
    assert not body.is_visible()
    deltas.locator(":scope > summary").click()
    assert body.is_visible()


def test_a_10k_op_report_loads_fast(open_report, all_dumps):
    """Two ~10,000-op programs (an unrolled matmul, a latency hint on every 10th load):
    the page is usable in under 2 s, and the toggle works on all its rows."""
    a = synth.unroll(all_dumps["matmul"].text(), 10 ** 6, max_ops=10000)
    b = synth.renumber(a, 2, style="shuffle")
    b = synth.set_op_hint(b, synth.op_lines(b, "load_view_tko")[::10], "latency", 3)
    res = diff_texts(a, b)
    assert res.before.ops >= 9000 and len(res.semantic()) > 100
    page_html = render_html(res)
    t0 = time.perf_counter()
    page, errors, ms = open_report(page_html)
    wall = time.perf_counter() - t0
    assert errors == []
    assert ms < 2000, f"load took {ms:.0f} ms ({len(page_html) / 1e6:.1f} MB)"
    assert wall < 4, wall                 # the navigation as a user waits for it
    det = page.locator("details:not(.section):has(table.sbs)").first
    if not det.evaluate("d => d.open"):
        det.locator(":scope > summary").click()
    rows = page.locator("table.sbs tr[data-change]")
    assert rows.count() >= 9000
    page.get_by_label("only changed rows").first.check()
    hidden = page.evaluate("() => [...document.querySelectorAll('table.sbs tr.same')]"
                           ".filter(r => r.offsetParent !== null).length")
    assert hidden == 0


@pytest.mark.parametrize("ci,outcome", [("true", pytest.fail.Exception), ("1", pytest.fail.Exception),
                                        ("", pytest.skip.Exception), ("false", pytest.skip.Exception)])
def test_a_missing_browser_fails_under_ci_and_skips_elsewhere(monkeypatch, ci, outcome):
    monkeypatch.setenv("CI", ci)
    with pytest.raises(outcome, match="no chromium"):
        _unavailable("no chromium here")


PICTURES = Path(__file__).parent / "pictures"


def test_a_large_diff_fits_a_1400_pixel_window(open_report, ir_dump, tmp_path):
    """A realistic large diff (an unrolled matmul of ~1,900 ops with a latency hint on every
    40th load, under a capture folder's long paths) at 1,400 × 1,000: no horizontal scrollbar
    (long names wrap, the side-by-side panel scrolls inside itself).
    ``CUTILE_DIAG_PICTURES=1`` rewrites the committed screenshot ``pictures/ir_diff_1400.png``."""
    a = synth.unroll(ir_dump("matmul").text(loc=True), 10 ** 6, max_ops=1900)
    b = synth.set_op_hint(a, synth.op_lines(a, "load_view_tko")[::40], "latency", 3)
    where = tmp_path / "captures" / "matmul_kernel-f16-4096x4096x4096-TM128-TN128-TK64-ws"
    (where / "before").mkdir(parents=True)
    (where / "after").mkdir()
    (where / "before" / "matmul_kernel.tileir.txt").write_text(a)
    (where / "after" / "matmul_kernel.tileir.txt").write_text(b)
    res = diff_paths(where / "before" / "matmul_kernel.tileir.txt", where / "after" / "matmul_kernel.tileir.txt")
    assert len(res.semantic()) >= 15 and res.before.ops >= 1800
    page, errors, _ms = open_report(render_html(res))
    page.set_viewport_size({"width": 1400, "height": 1000})
    assert errors == []
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    assert width[0] <= width[1], width
    # the side-by-side listing scrolls inside its own panel, both halves within the window
    panel = page.locator(".sbs-panel").first
    right, scrolls = panel.evaluate("p => [p.getBoundingClientRect().right, p.scrollHeight > p.clientHeight]")
    after = panel.locator("th", has_text="after").evaluate("h => h.getBoundingClientRect().right")
    assert panel.is_visible() and right <= 1400 and after <= right and scrolls
    # the picture: the structural deltas folded, so that the side-by-side panel shows under the changes
    page.locator("details.section", has_text="Structural deltas").locator(":scope > summary").click()
    shot = PICTURES / "ir_diff_1400.png" if os.environ.get("CUTILE_DIAG_PICTURES") else tmp_path / "shot.png"
    page.screenshot(path=str(shot), full_page=True, clip={"x": 0, "y": 0, "width": 1400, "height": 2000})
