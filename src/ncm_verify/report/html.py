"""verify.html: one self-contained page (inline CSS, hand-drawn inline SVG, no network).

The page reads at laptop width: long names wrap instead of overflowing, a table
of contents links every section, claim and property (stable ids from the claim
id and node id), and a "what was not checked here" list is derived from the data.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from html import escape

from ncm_verify.evidence import BENCH_FILE
from ncm_verify.report.model import FINDINGS_TITLE, Document, Plot, Table, number

CSS = """
*,*::before,*::after{box-sizing:border-box}
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;color:#222;padding:0 1em;
overflow-wrap:break-word}
h1{margin:.2em 0 .4em}h2{margin-top:1.6em;border-bottom:1px solid #ddd;padding-bottom:.15em}
table{border-collapse:collapse;margin:.5em 0 1.5em;width:100%;font-size:13px}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f2f2f2}
tr:target,h3:target,details:target>summary{background:#fff6c8}
code,pre{font-family:ui-monospace,monospace;font-size:12px}
pre{overflow-wrap:anywhere}
pre{background:#f7f7f7;padding:.6em;white-space:pre-wrap;max-width:100%}
a{color:#1a4f8f}
.status{font-weight:bold;padding:1px 6px;border-radius:3px;white-space:nowrap}
.shown,.passed,.caught{background:#d9f2d9;color:#145214}
.failed,.error,.SURVIVED,.BROKEN-SWEEP{background:#f9d6d5;color:#7a1010}
.not-run,.skipped,.not-shown{background:#eee;color:#555}
.known-upstream-bugs{background:#fff3cd;color:#7a5a00}
.not-checkable,.not-provided{background:#e4e9f7;color:#28407a}
nav.toc{background:#f7f7f7;border:1px solid #ddd;padding:.4em 1em;margin:1em 0}
nav.toc ol{margin:.2em 0;padding-left:1.6em;columns:3 14em}nav.toc li{margin:.1em 0}
nav.toc .claims{display:flex;flex-wrap:wrap;gap:.2em .8em;list-style:none;padding-left:0}
.unchecked{border-left:4px solid #c9a227;background:#fdf8e6;padding:.3em 1em;margin:1em 0}
.unchecked ul{margin:.2em 0}
figure{display:inline-block;margin:0 1em 1em 0;max-width:100%;vertical-align:top}
figure svg{max-width:100%;height:auto}
figcaption{font-size:12px;color:#555;max-width:560px}
figcaption table{font-size:11px;margin:.4em 0}
details{margin:.3em 0}summary{cursor:pointer}
.note{color:#555}.nb{white-space:nowrap}
"""
STATUS_CELLS = {"status", "outcome", "verdict"}
LIST_CELLS = {"caught by"}
"""Columns whose comma-separated node ids read better one per line."""
PLOT_WIDTH, PLOT_HEIGHT = 540, 240
LEFT, TOP, BOTTOM = 62, 36, 40
"""Plot margins in pixels: room for the y label, the title and legend, the x labels and their axis title."""
LABELLED_BINS = 12
"""Up to this many bins each get their outcome label under the axis; past it, every few get 'bin i'."""
"""Bins listed beside a frequency plot when the record does not list its own."""
SECTIONS = (
    ("verdict", "Verdict"),
    ("not-checked", "What was not checked here"),
    ("judged", "What this run judged"),
    ("claims", "Claims"),
    ("failures", "Failures"),
    ("findings", "Findings"),
    ("suite-checks", "The suite's own checks"),
    ("policy", "Statistical policy"),
    ("statistical", "Statistical properties"),
    ("mlx-lm", "mlx-lm under test"),
    ("frequencies", "Expected vs observed frequencies"),
    ("planted-bugs", "Planted bugs"),
    ("calibration", "Calibration"),
    ("evidence", "Evidence per claim"),
    ("unclaimed", "Runs under no claim"),
    ("benchmarks", "Benchmarks"),
    ("timing", "Where the time went"),
    ("environment", "Environment"),
    ("sources", "Sources"),
)


# --- anchors ---


def slug(text: str) -> str:
    """`text` as an id fragment: letters, digits, '_' and '-' kept, every other run of characters one '-'."""
    return re.sub(r"[^A-Za-z0-9_]+", "-", text).strip("-")


def claim_anchor(claim_id: str) -> str:
    return f"claim-{slug(claim_id)}"


def property_anchor(nodeid: str) -> str:
    """A stable id for one property run: its readable node id and a short hash that keeps near-equal ids apart."""
    return f"prop-{slug(nodeid)}-{hashlib.sha1(nodeid.encode()).hexdigest()[:6]}"


LONG_TOKEN = 20
"""Characters past which a word gets break opportunities: node ids, module paths and URLs wrap at a narrow width."""


def breakable(text: str) -> str:
    """`text` escaped, with a `<wbr>` after each separator of a long word (and every `LONG_TOKEN` characters of
    a run without one), so a table column can be narrower than its longest name without overflowing."""
    words = []
    for word in re.split(r"(\s+)", str(text)):
        if len(word) <= LONG_TOKEN:
            words.append(escape(word))
            continue
        pieces = [
            piece[i : i + LONG_TOKEN]
            for piece in re.split(r"(?<=[/_.:\[\]\-,=(])", word)
            for i in range(0, len(piece), LONG_TOKEN)
        ]
        words.append("<wbr>".join(escape(piece) for piece in pieces))
    return "".join(words)


def link(text: str, anchor: str) -> str:
    return f'<a href="#{anchor}">{breakable(text)}</a>'


# --- tables ---


def status_span(value: str) -> str:
    return f'<span class="status {escape(value.replace(" ", "-"))}">{escape(value)}</span>'


def render_cell(name: str, value, anchors: dict[str, Callable[[str], str]]) -> str:
    if name in STATUS_CELLS:
        return status_span(str(value))
    if name in anchors and value not in ("", "-"):
        return link(str(value), anchors[name](str(value)))
    text = str(value)
    if name in LIST_CELLS:
        return "<br>".join(breakable(item) for item in text.split(", "))
    if len(text) <= LONG_TOKEN and " " not in text:
        # numbers such as 3.33e-06 or ranges such as 53248-61440 read wrong when a browser breaks at their '-'
        return f'<span class="nb">{escape(text)}</span>'
    return breakable(text)


def render_table(
    table: Table,
    level: int = 2,
    section: str = "",
    anchors: dict[str, Callable[[str], str]] | None = None,
    row_ids: list[str] | None = None,
) -> str:
    """A table under its heading; `anchors` links a column's cells, `row_ids` gives each row an id."""
    anchors = anchors or {}
    heading_id = f' id="{section}"' if section else ""
    parts = [f"<h{level}{heading_id}>{escape(table.title)}</h{level}>"]
    if table.note:
        parts.append(f'<p class="note">{breakable(table.note)}</p>')
    if table.rows:
        header = "".join(f"<th>{escape(h)}</th>" for h in table.header)
        body = []
        for i, row in enumerate(table.rows):
            row_id = f' id="{row_ids[i]}"' if row_ids else ""
            cells = "".join(f"<td>{render_cell(name, value, anchors)}</td>" for name, value in zip(table.header, row))
            body.append(f"<tr{row_id}>{cells}</tr>")
        parts.append(f"<table><tr>{header}</tr>{''.join(body)}</table>")
    return "\n".join(parts)


# --- plots ---


def svg_frame(title: str, y_max: float, x_title: str) -> list[str]:
    """An SVG's opening, axes, y-axis label and x-axis title, scaled to `y_max`."""
    bottom = PLOT_HEIGHT - BOTTOM
    return [
        (
            f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
            f'viewBox="0 0 {PLOT_WIDTH} {PLOT_HEIGHT}" role="img" aria-label="{escape(title)}">'
        ),
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#333"/>',
        f'<line x1="{LEFT - 4}" y1="{TOP}" x2="{LEFT}" y2="{TOP}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{bottom}" x2="{PLOT_WIDTH - 8}" y2="{bottom}" stroke="#333"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 4}" font-size="10" text-anchor="end">{number(y_max)}</text>',
        f'<text x="{LEFT - 6}" y="{bottom}" font-size="10" text-anchor="end">0</text>',
        f'<text x="4" y="14" font-size="12">{escape(clip(title, 60))}</text>',
        (
            f'<text x="{(LEFT + PLOT_WIDTH) / 2:.0f}" y="{PLOT_HEIGHT - 4}" font-size="10" '
            f'text-anchor="middle" fill="#555">{escape(x_title)}</text>'
        ),
    ]


def clip(text: str, length: int) -> str:
    """`text` cut to `length` characters with an ellipsis: SVG text does not wrap."""
    return text if len(text) <= length else text[: length - 1] + "\u2026"


def bars_svg(
    title: str,
    series: list[tuple[str, list[float]]],
    x_labels: list[str],
    reference: list[float] | None = None,
    reference_label: str = "",
    x_title: str = "",
) -> str:
    """Grouped bars, one colour per series, with an optional reference tick per group.

    Each bar carries a tooltip with its label and value; at most `LABELLED_BINS` labels are written under the axis.
    """
    colours = ("#7a9cc6", "#e0a040")
    groups = max(len(values) for _, values in series)
    y_max = max([v for _, values in series for v in values] + (reference or []) + [1e-12])
    width = (PLOT_WIDTH - LEFT - 10) / max(groups, 1)
    bar = max(width / (len(series) + 1), 0.5)
    bottom, height = PLOT_HEIGHT - BOTTOM, PLOT_HEIGHT - BOTTOM - TOP
    parts = svg_frame(title, y_max, x_title)
    for s, (name, values) in enumerate(series):
        for i, value in enumerate(values):
            h = height * value / y_max
            x = LEFT + 2 + i * width + s * bar
            tip = f"{x_labels[i]}: {name} {number(value)}" + (
                f", {reference_label} {number(reference[i])}" if reference else ""
            )
            parts.append(
                f'<rect x="{x:.2f}" y="{bottom - h:.2f}" width="{bar:.2f}" height="{h:.2f}" '
                f'fill="{colours[s % 2]}"><title>{escape(tip)}</title></rect>'
            )
    for i, value in enumerate(reference or []):
        y = bottom - height * value / y_max
        x = LEFT + 2 + i * width
        parts.append(
            f'<line x1="{x:.2f}" y1="{y:.2f}" x2="{x + width - 1:.2f}" y2="{y:.2f}" stroke="#b22" stroke-width="1.5"/>'
        )
    step = 1 if groups <= LABELLED_BINS else -(-groups // LABELLED_BINS)
    size = max(8, min(10, int(width / 6) + 4)) if step == 1 else 9
    for i in range(0, groups, step):
        text = clip(x_labels[i], max(3, int(width * step / 5.5)))
        parts.append(f'<text x="{LEFT + 2 + i * width:.2f}" y="{bottom + 12}" font-size="{size}">{escape(text)}</text>')
    legend_x = PLOT_WIDTH - 130
    for s, (name, _) in enumerate(series):
        parts.append(
            f'<rect x="{legend_x}" y="{4 + 12 * s}" width="9" height="9" fill="{colours[s % 2]}"/>'
            f'<text x="{legend_x + 12}" y="{12 + 12 * s}" font-size="10">{escape(name)}</text>'
        )
    if reference:
        parts.append(
            f'<line x1="{legend_x}" y1="{8 + 12 * len(series)}" x2="{legend_x + 9}" '
            f'y2="{8 + 12 * len(series)}" stroke="#b22"/><text x="{legend_x + 12}" '
            f'y="{12 + 12 * len(series)}" font-size="10">{escape(reference_label)}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def worst_bins_table(plot: Plot) -> str:
    rows = "".join(
        f"<tr><td>{breakable(str(row.outcome))}</td><td>{number(row.expected)}</td>"
        f"<td>{number(row.observed)}</td><td>{number(row.contribution)}</td></tr>"
        for row in plot.worst_bins
    )
    return (
        "<table><tr><th>outcome (bin)</th><th>expected</th><th>observed</th><th>chi-square part</th></tr>"
        f"{rows}</table>"
    )


def frequency_figure(document: Document, plot: Plot) -> str:
    """Expected vs observed bin counts of one statistical property, bins labelled by outcome."""
    svg = bars_svg(
        plot.name,
        [("observed", list(plot.observed))],
        list(plot.labels),
        reference=list(plot.expected),
        reference_label="expected (exact)",
        x_title="bins by outcome (hover a bar for its label)" if plot.labelled else "bins by index",
    )
    caption = (
        f"{plot.which}: n={plot.n}, df={plot.df}, statistic={number(plot.statistic)}, "
        f"p={number(plot.p_value)}, alpha={number(plot.alpha)}, "
        f"{'rejected' if plot.rejected else 'not rejected'}; "
        f"{'' if plot.labelled else 'bins by index (this record carries no outcome labels), '}"
        f"the last bin may pool rare outcomes; {document.device}"
    )
    heading = link(plot.nodeid, property_anchor(plot.nodeid))
    return (
        f"<figure><div>{heading}</div>{svg}<figcaption>{breakable(caption)}{worst_bins_table(plot)}"
        "</figcaption></figure>"
    )


def frequency_figures(document: Document) -> str:
    """One figure per statistical property, in the document's order (failed properties first)."""
    figures = [frequency_figure(document, plot) for plot in document.plots]
    if not figures:
        return ""
    return '<h2 id="frequencies">Expected vs observed frequencies</h2>\n' + "\n".join(figures)


def calibration_figure(document: Document) -> str:
    """Histogram of the calibration p-values against the uniform law they should follow."""
    histogram = document.calibration.histogram if document.calibration else None
    if histogram is None:
        return ""
    svg = bars_svg(
        "calibration p-values",
        [("runs", list(histogram.counts))],
        list(histogram.labels),
        reference=list(histogram.uniform),
        reference_label="uniform expectation",
        x_title="p-value",
    )
    caption = (
        f"{histogram.total} chi-square p-values of the correct kernels in {len(histogram.counts)} bins; a calibrated "
        f"test gives a flat histogram; {document.device}"
    )
    return f"<h3>Calibration p-values</h3>\n<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


# --- sections ---


def failures_html(document: Document, findings: bool = False) -> str:
    """The failures, or with `findings` the refuted hypotheses (results of the run, not failures)."""
    parts = []
    for f in document.findings if findings else document.failures:
        items = [f"<pre>{escape(f.message.strip())}</pre>"]
        for value, label in ((f.falsifying_example, "example"), (f.reproduce_failure, "decorator"), (f.seed, "seed")):
            if value:
                items.append(f"<p>{label}:</p><pre>{escape(str(value))}</pre>")
        items.append(f"<p>rerun:</p><pre>{escape(f.command)}</pre>")
        claims = ", ".join(link(c, claim_anchor(c)) for c in f.claims)
        parts.append(f"<h3>{link(f.nodeid, property_anchor(f.nodeid))} ({claims})</h3>" + "".join(items))
    if not parts:
        return ""
    if findings:
        return f'<h2 id="findings">{escape(FINDINGS_TITLE)}</h2>\n' + "\n".join(parts)
    return '<h2 id="failures">Failures and how to reproduce them</h2>\n' + "\n".join(parts)


def suite_checks_html(document: Document) -> str:
    """The properties that never call the module, apart from the verdict on it."""
    if not document.suite_checks:
        return ""
    rows = "".join(
        f"<li><code>{breakable(nodeid)}</code>: {status_span(outcome)}</li>"
        for nodeid, outcome in document.suite_checks
    )
    return (
        f'<h2 id="suite-checks">The suite\'s own checks</h2><p>{escape(document.suite_checks_note)}</p>'
        f"<details><summary>{len(document.suite_checks)} properties</summary><ul>{rows}</ul>"
        "</details>"
    )


def claim_details(document: Document) -> str:
    """Each claim in a collapsible block with its id as anchor; each property row anchored once, where it first
    appears (a property under several claims links there from the others). Browsers open a closed block when a
    link points inside it, so the page needs no script."""
    parts = ['<h2 id="evidence">Evidence per claim</h2>']
    placed: set[str] = set()
    for claim in document.claims:
        summary = f"{escape(claim.id)} {status_span(claim.status)} {breakable(claim.statement)}"
        body = [
            f"<p>{breakable(claim.reason)}</p>",
            (
                f"<p>sources: {breakable(', '.join(claim.sources) or '-')}; code: "
                f"{breakable(', '.join(claim.paths) or '-')}</p>"
            ),
        ]
        if claim.properties is not None:
            ids = []
            for nodeid in claim.nodeids:
                anchor = property_anchor(nodeid)
                ids.append(anchor if anchor not in placed else f"{claim_anchor(claim.id)}-{anchor}")
                placed.add(anchor)
            body.append(render_table(claim.properties, level=4, row_ids=ids, anchors={"property": property_anchor}))
        parts.append(f'<details id="{claim_anchor(claim.id)}"><summary>{summary}</summary>{"".join(body)}</details>')
    return "\n".join(parts)


def implementation_line(document: Document) -> str:
    """What was tested: the module, and its file and hash when the run recorded them."""
    facts = [f"<code>{breakable(str(document.impl))}</code>"]
    if document.implementation_path:
        facts.append(f"file <code>{breakable(document.implementation_path)}</code>")
    if document.implementation_sha256:
        facts.append(f"sha256 <code>{escape(document.implementation_sha256[:16])}\u2026</code>")
    return "Implementation under test: " + ", ".join(facts)


def unchecked_item_html(text: str, nodes: tuple[str, ...]) -> str:
    """One item; the node ids behind it fold away, since a port's run lists a hundred of them."""
    if not nodes:
        return f"<li>{breakable(text)}</li>"
    listed = "".join(f"<li><code>{breakable(node)}</code></li>" for node in nodes)
    return f"<li><details><summary>{breakable(text)}</summary><ul>{listed}</ul></details></li>"


def unchecked_html(document: Document) -> str:
    body = (
        "".join(unchecked_item_html(*item) for item in document.unchecked) or "<li>Nothing this report knows of.</li>"
    )
    return f'<div class="unchecked"><h2 id="not-checked">What was not checked here</h2><ul>{body}</ul></div>'


def contents(document: Document, present: set[str]) -> str:
    """The table of contents: every section on the page, then every claim with its status."""
    sections = "".join(f'<li><a href="#{key}">{escape(title)}</a></li>' for key, title in SECTIONS if key in present)
    claims = "".join(f"<li>{link(c.id, claim_anchor(c.id))} {status_span(c.status)}</li>" for c in document.claims)
    return (
        f'<nav class="toc" aria-label="contents"><strong>Contents</strong><ol>{sections}</ol>'
        f'<strong>Claims</strong><ul class="claims">{claims}</ul></nav>'
    )


def body_sections(document: Document) -> list[str]:
    """The page's sections in reading order; empty strings for sections with nothing to show."""
    verdict, tables = document.verdict, document.tables
    reasons = f" ({breakable('; '.join(verdict.reasons))})" if verdict.reasons else ""
    if verdict.has_parts:
        reasons = ' (<a href="#verdict-parts">why, by part</a>)'  # the table below says it once
    property_links = {"property": property_anchor}
    body = [
        f'<p id="verdict">{implementation_line(document)}; run verdict: {status_span(verdict.verdict)}{reasons}</p>',
        # a report rebuilt from older JSON may carry no parts
        render_table(verdict.parts, section="verdict-parts") if verdict.has_parts else "",
        unchecked_html(document),
        render_table(tables.judged, section="judged") if tables.judged is not None and tables.judged.rows else "",
        render_table(tables.claims, section="claims", anchors={"claim": claim_anchor}),
        failures_html(document),
        failures_html(document, findings=True),
        suite_checks_html(document),
        render_table(tables.policy, section="policy") if tables.policy is not None else "",
        render_table(tables.statistical, section="statistical", anchors=property_links)
        if tables.statistical.rows
        else "",
        render_table(tables.mlx_lm, section="mlx-lm") if tables.mlx_lm is not None else "",
        frequency_figures(document),
        render_table(tables.mutants, section="planted-bugs"),
        render_table(tables.calibration, section="calibration") + calibration_figure(document),
        claim_details(document),
    ]
    if document.unclaimed:
        body.append(
            '<h2 id="unclaimed">Runs under no claim</h2><ul>'
            + "".join(f"<li><code>{breakable(n)}</code></li>" for n in document.unclaimed)
            + "</ul>"
        )
    if tables.bench is not None:
        body.append(
            render_table(tables.bench, section="benchmarks") + f'<p><a href="{BENCH_FILE}">{BENCH_FILE}</a></p>'
        )
    if tables.timing is not None:
        body.append(render_table(tables.timing, section="timing"))
    if tables.environment is not None:
        body.append(render_table(tables.environment, section="environment"))
    body.append(render_table(tables.sources, section="sources"))
    return [part for part in body if part]


def render_html(document: Document) -> str:
    """The whole page; a pure function of `document`."""
    body = body_sections(document)
    present = {key for key, _ in SECTIONS if any(f'id="{key}"' in part for part in body)}
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>ncm-verify report</title><style>{CSS}</style></head><body>\n"
        "<h1>ncm-verify report</h1>\n" + contents(document, present) + "\n" + "\n".join(body) + "\n</body></html>\n"
    )
