"""The campaign's report of a simulated campaign: its chart plots every kernel (bandwidth-only specs
too), one "% of ceiling" figure per kernel in chart, table and stop reason, and simulation named
wherever a figure comes from it (a simulation spec's ceiling is not "measured")."""
from __future__ import annotations

import re
import sys
from pathlib import Path

from cutile_diag.campaign.demo import SPECS, make_repo

sys.path.insert(0, str(Path(__file__).parent))
from test_campaign import simulated_campaign  # noqa: E402


def test_a_simulated_campaign_report_agrees_with_itself(tmp_path):
    from cutile_diag.campaign.executors.local import LocalExecutor
    from cutile_diag.campaign.report import write_report
    from cutile_diag.campaign.run import run_campaign
    repo = make_repo(tmp_path, ("vector_add", "row_norm"))
    out = repo / "cutile-diag-out" / "campaign"
    # row_norm on a simulated GPU with a ceiling of its own
    specs = {**SPECS, "row_norm": {**SPECS["row_norm"], "ceiling": {"dram_tbps": 4.0, "cached": True}}}
    c, _ks = simulated_campaign(repo, tmp_path, {"max_iterations": 4, "capture": False}, specs)
    run_campaign(c, LocalExecutor())
    rep = write_report(c)
    rows = {r["kernel"]: r for r in rep["kernels"]}
    assert rows["row_norm"]["pct_of"] == "simulated ceiling" and rows["vector_add"]["pct_of"] == "datasheet roof"
    md = (out / "campaign.md").read_text()
    assert "measured" not in md
    for name, r in rows.items():
        # the stop reason's figure is the table's final one (both stop below the 2 % threshold)
        assert f"at {r['final_pct']:.0f}% of the {r['pct_of']}" in r["stopped"], r["stopped"]
        assert f"| {r['start_pct']:.1f} | {r['final_pct']:.1f} |" in md
        assert f"{r['start_ms']:.6f} (simulated)" in md and f"{r['final_ms']:.6f} (simulated)" in md
    # the chart plots each kernel at the table's figures
    svg = Path(rep["chart"]).read_text()
    for name, r in rows.items():
        assert name in svg and f"{r['start_pct']:.1f} -&gt; {r['final_pct']:.1f}" in svg
    assert re.search(r"simulated ceiling / datasheet roof|datasheet roof / simulated ceiling", svg)
    html = (out / "campaign.html").read_text()
    assert 'id="chart"' in html and "(simulated)</td>" in html
