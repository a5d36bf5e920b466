"""The HTML report at laptop width: anchors, labelled counterexample plots, what was not checked, and no
horizontal overflow in a real headless Chromium at 1400 px and 1024 px."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from synthetic import POLICY, greedy_and_uncheckable_claims, node  # one shape of evidence for every report test

from ncm_verify.report import document as doc
from ncm_verify.report import tables
from ncm_verify.report.html import (
    breakable,
    claim_anchor,
    property_anchor,
    render_cell,
    render_html,
    unchecked_html,
)

WIDTHS = (1400, 1024)
BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
LONG_ID = "properties/test_chain.py::test_chain_verification_samples_the_target_joint_" + "x" * 60
SEARCH_BINS = 229
"""Bins of the first failing test Hypothesis met while searching: the plot must not show this one."""
MINIMAL_LABELS = [
    "tokens (0,)",
    "tokens (1,)",
    "tokens (0, 1)",
    "tokens (1, 1, 2)",
    "3 pooled outcomes (tokens (2,), ...)",
]


def chi_square_record(test: str, bins: int, passed: bool, n: int, labels: list[str] | None = None) -> dict:
    expected = [1000.0 / bins] * bins
    observed = [e * (1.5 if i == 0 and not passed else 1.0) for i, e in enumerate(expected)]
    context = {"seed": 3}
    if labels:
        context.update(
            bin_labels=labels,
            worst_bins=[{"outcome": labels[0], "expected": expected[0], "observed": observed[0], "contribution": 50.0}],
        )
    return {
        "name": "chain output",
        "n": n,
        "df": bins - 1,
        "statistic": 90.0 if not passed else 2.0,
        "p_value": 1e-9 if not passed else 0.4,
        "alpha": 1e-5,
        "min_detectable_tv": 0.02,
        "pooled_mass": 0.01,
        "impossible_count": 0,
        "expected": expected,
        "observed": observed,
        "context": context,
        "passed": passed,
        "test": test,
    }


def make_ledger() -> dict:
    """A ledger whose names are as long and unbroken as real ones get, and longer."""
    supports = "the identity min(p,q)/q " + "https://example.org/" + "a" * 120 + " and its residual " * 6
    claim = {"sources": ["S01"], "paths": ["src/ncm_verify/kernels/chain_with_a_long_module_path_name.py"]}
    failing = LONG_ID.split("[", 1)[0] + "_fails"
    return {
        "schema": "ncm-verify/ledger/1",
        "sources": [
            {
                "id": "S01",
                "authors": "A. Author, B. Author, C. Author",
                "title": "A paper " * 8,
                "version": "v2",
                "url": "https://arxiv.org/abs/2401.00001" + "/x" * 40,
                "kind": "paper",
                "read_scope": "abstract and section 3",
                "supports": supports,
            }
        ],
        "claims": [
            {"id": "C1", "statement": "prefix isolated " * 10, **claim, "properties": [LONG_ID.split("[", 1)[0]]},
            {"id": "C5", "statement": "chain preserves the target", **claim, "properties": [failing]},
            *greedy_and_uncheckable_claims(claim),
        ],
    }


def make_evidence(device: str = "Device(cpu, 0)") -> dict:
    failing = LONG_ID.split("[", 1)[0] + "_fails[float32]"
    search = chi_square_record(failing, SEARCH_BINS, passed=False, n=99_001)
    minimal = chi_square_record(failing, len(MINIMAL_LABELS), passed=False, n=4_242, labels=MINIMAL_LABELS)
    failure = {
        "phase": "call",
        "message": "AssertionError: chi-square rejects " + "x" * 300,
        "falsifying_example": "Failing test case: test(\n    seed=" + "9" * 200 + ",\n)",
        "seed": None,
        "reproduce_failure": "@reproduce_failure('6.170.17', b'" + "A" * 250 + "')",
    }
    return {
        "schema": "ncm-verify/evidence/1",
        "impl": "my_package.kernels_with_a_rather_long_module_name",
        "profile": "ci",
        "exit_status": 1,
        "environment": {"mlx": "0.32.4", "mlx_default_device": device, "platform": "Linux-" + "6.18.44-fc-" * 12},
        "policy": {**POLICY},
        "budget": {
            "planned_tests": 60,
            "chi_square_tests_run": 3,
            "within_plan": True,
            "run_failed_by_budget": False,
            "note": "3 chi-square tests run of 60 planned",
        },
        "properties": [
            node(LONG_ID + "[float32-" + "G" * 40 + "]", ["C1"]),
            node(
                failing,
                ["C5"],
                outcome="failed",
                failure=failure,
                stats=[search, chi_square_record(failing, 4, passed=True, n=800), minimal],
            ),
            node("properties/test_unlisted_" + "y" * 90 + ".py::test_z", ["C9"]),
        ],
    }


def make_mutants() -> dict:
    return {
        "profile": "selftest",
        "mutants": [
            {
                "name": "bonus_wrong_row_" + "z" * 40,
                "module": "ncm_verify.mutants.bonus",
                "caught": True,
                "caught_by": [LONG_ID.split("[", 1)[0] + f"[case{i}]" for i in range(4)],
                "description": "draws the bonus token from the last draft's target row " * 5,
            },
        ],
    }


def make_report(device: str = "Device(cpu, 0)") -> dict:
    calibration = {
        "alpha": 0.05,
        "runs": 100,
        "rejections": 4,
        "binomial_p_value": 0.74,
        "p_values": [i / 100 for i in range(100)],
    }
    return doc.build_report(make_ledger(), make_evidence(device), make_mutants(), calibration)


def figure_of(page: str, nodeid: str) -> str:
    """The <figure> whose heading links to `nodeid`."""
    start = page.index(f'<figure><div><a href="#{property_anchor(nodeid)}">')
    return page[start : page.index("</figure>", start)]


# --- the page's structure ---


def test_every_claim_and_property_has_one_stable_anchor_the_contents_and_tables_link_to():
    report = make_report()
    page = render_html(doc.build_document(report))
    ids = re.findall(r' id="([^"]+)"', page)
    assert len(ids) == len(set(ids)), "an id appears twice"
    dangling = sorted(set(re.findall(r'href="#([^"]+)"', page)) - set(ids))
    assert not dangling, f"links to no anchor: {dangling[:5]}"
    for claim in report["claims"]:
        assert claim_anchor(claim["id"]) in ids and f'href="#{claim_anchor(claim["id"])}"' in page
        for p in claim["properties"]:
            assert property_anchor(p["nodeid"]) in ids
    assert page == render_html(doc.build_document(make_report())), "the same report gives the same page"


def test_property_anchors_are_stable_and_keep_near_equal_node_ids_apart():
    assert property_anchor("a.py::t[x y]") == property_anchor("a.py::t[x y]")
    assert property_anchor("a.py::t[x y]") != property_anchor("a.py::t[x-y]")
    assert re.fullmatch(r"prop-[A-Za-z0-9_-]+", property_anchor("properties/t.py::test[a/b, c]"))


def test_the_failing_plot_is_the_minimal_counterexample_with_bins_labelled_by_outcome():
    page = render_html(doc.build_document(make_report()))
    figure = figure_of(page, LONG_ID.split("[", 1)[0] + "_fails[float32]")
    assert "minimal counterexample" in figure and "n=4242" in figure and "n=99001" not in figure
    assert figure.count("<rect") - 1 == len(MINIMAL_LABELS)  # one bar per bin, plus the legend swatch
    for label in MINIMAL_LABELS[:3]:
        assert f">{label}<" in figure.replace("<wbr>", "")


def test_bins_of_a_record_without_labels_are_named_by_index():
    report = make_report()
    for p in tables.statistical_rows(report):
        p["statistics"]["counterexample"]["context"] = {}
    figure = figure_of(render_html(doc.build_document(report)), LONG_ID.split("[", 1)[0] + "_fails[float32]")
    assert ">bin 0<" in figure and "bins by index" in figure


def unchecked_texts(report: dict) -> list[str]:
    return [text for text, _ in doc.unchecked_items(report)]


def test_what_was_not_checked_is_derived_from_the_run():
    on_cpu, on_gpu = unchecked_texts(make_report()), unchecked_texts(make_report("Device(gpu, 0)"))
    assert any("no Metal/GPU kernel path was run" in item for item in on_cpu)
    assert not any("GPU" in item for item in on_gpu)
    assert any("not checkable" in item and "C10" in item for item in on_cpu)
    assert any(item.startswith("Claims not run: C7") for item in on_cpu)
    assert any("no bench.json" in item for item in on_cpu)
    report = make_report()
    report["mutants"] = None
    report["claims"][0]["properties"][0]["implementation_use"] = "inherited"
    items = doc.unchecked_items(report)
    assert any("planted-bug sweep did not run" in text for text, _ in items)
    file_of_long_id = LONG_ID.split("::")[0].rsplit("/", 1)[-1]
    assert any(
        "not provided by the implementation" in text and f"{file_of_long_id} (1)" in text and LONG_ID in nodes[0]
        for text, nodes in items
    ), "the item counts the inherited run under its file and lists its node id"
    folded = unchecked_html(doc.build_document(report)).replace("<wbr>", "")
    assert LONG_ID in folded, "the folded list still names every node id"
    report["run_facts"] = {"reuse": {"reused": 7, "why": "7 of 9 properties read only names this module inherits"}}
    assert any(text.startswith("7 property runs did not run here: 7 of 9") for text in unchecked_texts(report))
    report["run_facts"] = {"implementation": {"inherits": ["verify_greedy", "apply_chain"]}}
    assert any("inherits" in text and "verify_greedy, apply_chain" in text for text in unchecked_texts(report))


def test_long_words_get_break_opportunities_and_stay_escaped():
    assert breakable("short words <b> stay") == "short words &lt;b&gt; stay"
    broken = breakable(LONG_ID + "<")
    assert "<wbr>" in broken and broken.replace("<wbr>", "") == LONG_ID + "&lt;"
    assert all(len(piece) <= 21 for piece in re.split(r"<wbr>|::|/", broken))
    assert render_cell("alpha", "3.33e-06", {}) == '<span class="nb">3.33e-06</span>', "a number breaks at its '-'"


# --- a real browser ---


def find_browser() -> str:
    """Chromium's path: a missing browser fails under CI (which installs it in .ci/run) and skips elsewhere."""
    named = os.environ.get("NCM_VERIFY_CHROMIUM")
    found = named or next((path for path in map(shutil.which, BROWSERS) if path), None)
    if found:
        return found
    message = "no headless Chromium on PATH (apt-get install -y chromium, or set NCM_VERIFY_CHROMIUM)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"{message}: CI must check the report's layout in a real browser")
    pytest.skip(message)


OVERFLOW_PROBE = """<script>
for (const d of document.querySelectorAll('details')) d.open = true;
const limit = document.documentElement.clientWidth, wide = [];
for (const e of document.body.querySelectorAll('*')) {
  const right = e.getBoundingClientRect().right;
  const scrolls = e.scrollWidth > e.clientWidth + 1 && getComputedStyle(e).overflowX !== 'visible';
  if (right > limit + 0.5 || scrolls) {
    wide.push(`${e.tagName}${e.id ? '#' + e.id : ''} right=${Math.round(right)}${scrolls ? ' scrolls' : ''}: `
              + (e.textContent || '').slice(0, 80));
  }
}
const out = document.createElement('pre');
out.id = 'overflow-probe';
out.textContent = JSON.stringify({innerWidth, clientWidth: limit,
  scrollWidth: document.documentElement.scrollWidth, count: wide.length, wide: wide.slice(0, 8)});
document.body.appendChild(out);
</script>"""
"""Opens every collapsed block, then writes into the page each element that reaches past the viewport or
scrolls inside itself."""


def measure_overflow(page: str, width: int, folder: Path) -> dict:
    """Load `page` in headless Chromium `width` px wide and return what the probe measured."""
    browser = find_browser()
    path = folder / f"page-{width}.html"
    path.write_text(page.replace("</body>", OVERFLOW_PROBE + "</body>"), encoding="utf-8")
    command = [
        browser,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={folder / f'profile-{width}'}",
        f"--window-size={width},900",
        "--dump-dom",
        path.as_uri(),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    found = re.search(r'<pre id="overflow-probe">(.*?)</pre>', result.stdout, re.DOTALL)
    assert found, f"the probe wrote nothing (exit {result.returncode}): {result.stderr[-2000:]}\n  {' '.join(command)}"
    return json.loads(found.group(1).replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def test_the_overflow_probe_sees_a_page_wider_than_the_window(tmp_path):
    measured = measure_overflow('<html><body><div id="wide" style="width:3000px">x</div></body></html>', 1024, tmp_path)
    assert measured["innerWidth"] == 1024 and measured["scrollWidth"] >= 3000
    assert any(row.startswith("DIV#wide") for row in measured["wide"])


@pytest.mark.parametrize("width", WIDTHS)
def test_nothing_in_the_report_overflows_horizontally_in_chromium(tmp_path, width):
    measured = measure_overflow(render_html(doc.build_document(make_report())), width, tmp_path)
    assert measured["innerWidth"] == width, f"the window is {measured['innerWidth']} px wide, not {width}"
    assert measured["count"] == 0 and measured["scrollWidth"] <= measured["clientWidth"], (
        f"at {width} px the page is {measured['scrollWidth']} px wide; {measured['count']} elements overflow, "
        "the first:\n  "
        + "\n  ".join(measured["wide"])
        + f"\n  reproduce: .venv/bin/python -m pytest 'tests/test_report_html.py' -p no:xdist -k {width}"
    )
