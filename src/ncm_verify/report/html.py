"""verify.html: one self-contained page (inline CSS, hand-drawn inline SVG, no network)."""

from __future__ import annotations

from html import escape

from ncm_verify.report import document as doc
from ncm_verify.report import mlx_lm_section

CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:.5em 0 1.5em;width:100%}
th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f2f2f2}
code,pre{font-family:ui-monospace,monospace;font-size:12px}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;white-space:pre-wrap}
.status{font-weight:bold;padding:1px 6px;border-radius:3px}
.shown,.passed,.caught{background:#d9f2d9;color:#145214}
.failed,.error,.SURVIVED{background:#f9d6d5;color:#7a1010}
.not-run,.skipped{background:#eee;color:#555}
.not-checkable{background:#e4e9f7;color:#28407a}
figure{display:inline-block;margin:0 1em 1em 0}
figcaption{font-size:12px;color:#555;max-width:520px}
.note{color:#555}
"""
STATUS_CELLS = {"status", "outcome", "verdict"}
PLOT_WIDTH, PLOT_HEIGHT = 520, 220
LEFT, TOP, BOTTOM = 54, 36, 22
"""Plot margins in pixels: room for the y label, the title and legend, the x labels."""


def status_span(value: str) -> str:
    return f'<span class="status {escape(value.replace(" ", "-"))}">{escape(value)}</span>'


def render_table(table: doc.Table, level: int = 2) -> str:
    parts = [f"<h{level}>{escape(table.title)}</h{level}>"]
    if table.note:
        parts.append(f'<p class="note">{escape(table.note)}</p>')
    if table.rows:
        header = "".join(f"<th>{escape(h)}</th>" for h in table.header)
        body = []
        for row in table.rows:
            cells = [
                status_span(value) if name in STATUS_CELLS else escape(str(value))
                for name, value in zip(table.header, row)
            ]
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
        parts.append(f"<table><tr>{header}</tr>{''.join(body)}</table>")
    return "\n".join(parts)


def svg_frame(title: str, y_max: float) -> list[str]:
    """An SVG's opening, axes and y-axis label, scaled to `y_max`."""
    bottom = PLOT_HEIGHT - BOTTOM
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{PLOT_WIDTH}" height="{PLOT_HEIGHT}" '
        f'role="img" aria-label="{escape(title)}">',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{bottom}" stroke="#333"/>',
        f'<line x1="{LEFT - 4}" y1="{TOP}" x2="{LEFT}" y2="{TOP}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{bottom}" x2="{PLOT_WIDTH - 8}" y2="{bottom}" stroke="#333"/>',
        f'<text x="{LEFT - 6}" y="{TOP + 4}" font-size="10" text-anchor="end">{doc.number(y_max)}</text>',
        f'<text x="{LEFT - 6}" y="{bottom}" font-size="10" text-anchor="end">0</text>',
        f'<text x="4" y="14" font-size="12">{escape(title)}</text>',
    ]


def bars_svg(title: str, series: list[tuple[str, list[float]]], x_labels: list[str],
             reference: list[float] | None = None, reference_label: str = "") -> str:
    """Grouped bars, one colour per series, with an optional reference tick per group."""
    colours = ("#7a9cc6", "#e0a040")
    groups = max(len(values) for _, values in series)
    y_max = max([v for _, values in series for v in values] + (reference or []) + [1e-12])
    width = (PLOT_WIDTH - LEFT - 10) / max(groups, 1)
    bar = max(width / (len(series) + 1), 0.5)
    bottom, height = PLOT_HEIGHT - BOTTOM, PLOT_HEIGHT - BOTTOM - TOP
    parts = svg_frame(title, y_max)
    for s, (_, values) in enumerate(series):
        for i, value in enumerate(values):
            h = height * value / y_max
            x = LEFT + 2 + i * width + s * bar
            parts.append(f'<rect x="{x:.2f}" y="{bottom - h:.2f}" width="{bar:.2f}" height="{h:.2f}" fill="{colours[s % 2]}"/>')
    for i, value in enumerate(reference or []):
        y = bottom - height * value / y_max
        x = LEFT + 2 + i * width
        parts.append(f'<line x1="{x:.2f}" y1="{y:.2f}" x2="{x + width - 1:.2f}" y2="{y:.2f}" stroke="#b22" stroke-width="1.5"/>')
    step = max(1, groups // 12)
    for i in range(0, groups, step):
        parts.append(f'<text x="{LEFT + 2 + i * width:.2f}" y="{bottom + 12}" font-size="9">{escape(x_labels[i])}</text>')
    legend_x = PLOT_WIDTH - 130
    for s, (name, _) in enumerate(series):
        parts.append(f'<rect x="{legend_x}" y="{4 + 12 * s}" width="9" height="9" fill="{colours[s % 2]}"/>'
                     f'<text x="{legend_x + 12}" y="{12 + 12 * s}" font-size="10">{escape(name)}</text>')
    if reference:
        parts.append(f'<line x1="{legend_x}" y1="{8 + 12 * len(series)}" x2="{legend_x + 9}" '
                     f'y2="{8 + 12 * len(series)}" stroke="#b22"/><text x="{legend_x + 12}" '
                     f'y="{12 + 12 * len(series)}" font-size="10">{escape(reference_label)}</text>')
    parts.append("</svg>")
    return "".join(parts)


def device_note(report: dict) -> str:
    environment = report["environment"] or {}
    return f"MLX {environment.get('mlx', '?')} on {environment.get('mlx_default_device', '?')}"


def frequency_figures(report: dict) -> str:
    """Expected vs observed bin counts of each statistical property's least likely test."""
    figures = []
    for p in doc.statistical_rows(report):
        worst = p["statistics"]["worst"]
        labels = [str(i) for i in range(len(worst["expected"]))]
        svg = bars_svg(worst["name"], [("observed", worst["observed"])], labels,
                       reference=worst["expected"], reference_label="expected (exact)")
        caption = (
            f"{p['nodeid']}: test with the smallest p-value of {p['statistics']['tests']}: "
            f"n={worst['n']}, df={worst['df']}, statistic={doc.number(worst['statistic'])}, "
            f"p={doc.number(worst['p_value'])}, alpha={doc.number(worst['alpha'])}; "
            f"bins by index, the last may pool rare outcomes; {device_note(report)}"
        )
        figures.append(f"<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>")
    if not figures:
        return ""
    return "<h2>Expected vs observed frequencies</h2>\n" + "\n".join(figures)


def calibration_figure(report: dict, bins: int = 20) -> str:
    """Histogram of the calibration p-values against the uniform law they should follow."""
    calibration = report["calibration"]
    if not calibration or not calibration.get("p_values"):
        return ""
    p_values = calibration["p_values"]
    counts = [0] * bins
    for p in p_values:
        counts[min(int(p * bins), bins - 1)] += 1
    labels = [f"{i / bins:.2f}" for i in range(bins)]
    uniform = [len(p_values) / bins] * bins
    svg = bars_svg("calibration p-values", [("runs", counts)], labels,
                   reference=uniform, reference_label="uniform expectation")
    caption = (
        f"{len(p_values)} chi-square p-values of the correct kernels in {bins} bins; a calibrated test "
        f"gives a flat histogram; {device_note(report)}"
    )
    return f"<h2>Calibration p-values</h2>\n<figure>{svg}<figcaption>{escape(caption)}</figcaption></figure>"


def failures_html(report: dict) -> str:
    parts = []
    for p in doc.failures(report):
        failure = p["failure"]
        items = [f"<pre>{escape(failure['message'].strip())}</pre>"]
        for key, label in (("falsifying_example", "example"), ("reproduce_failure", "decorator"), ("seed", "seed")):
            if failure.get(key):
                items.append(f"<p>{label}:</p><pre>{escape(str(failure[key]))}</pre>")
        items.append(f"<p>rerun:</p><pre>{escape(failure['command'])}</pre>")
        parts.append(f"<h3>{escape(p['nodeid'])} ({escape(', '.join(p['claims']))})</h3>" + "".join(items))
    if not parts:
        return ""
    return "<h2>Failures and how to reproduce them</h2>\n" + "\n".join(parts)


def claim_details(report: dict) -> str:
    parts = ["<h2>Evidence per claim</h2>"]
    for claim in report["claims"]:
        summary = f"{escape(claim['id'])} {status_span(claim['status'])} {escape(claim['statement'])}"
        body = [
            f"<p>{escape(claim['reason'])}</p>",
            f"<p>sources: {escape(', '.join(claim['sources']) or '-')}; code: "
            f"{escape(', '.join(claim['paths']) or '-')}</p>",
        ]
        if claim["properties"]:
            body.append(render_table(doc.properties_table(claim), level=4))
        parts.append(f"<details><summary>{summary}</summary>{''.join(body)}</details>")
    return "\n".join(parts)


def render_html(report: dict) -> str:
    """The whole page; a pure function of `report`."""
    run = report["run"]
    reasons = f" ({escape('; '.join(run['reasons']))})" if run["reasons"] else ""
    body = [
        "<h1>ncm-verify report</h1>",
        f"<p>Implementation under test: <code>{escape(str(report['impl']))}</code>; run verdict: "
        f"{status_span(run['verdict'])}{reasons}</p>",
        render_table(doc.claims_table(report)),
        failures_html(report),
    ]
    for table in (doc.policy_table(report), doc.statistical_table(report), mlx_lm_section.make_table(report)):
        if table is not None:
            body.append(render_table(table))
    body += [frequency_figures(report), render_table(doc.mutants_table(report)),
             render_table(doc.calibration_table(report)), calibration_figure(report), claim_details(report)]
    if report["unclaimed"]:
        body.append("<h2>Runs under no claim</h2><ul>"
                    + "".join(f"<li><code>{escape(n)}</code></li>" for n in report["unclaimed"]) + "</ul>")
    bench = doc.bench_table(report)
    if bench is not None:
        body.append(render_table(bench) + f'<p><a href="{doc.BENCH_FILE}">{doc.BENCH_FILE}</a></p>')
    for table in (doc.environment_table(report), doc.sources_table(report)):
        if table is not None:
            body.append(render_table(table))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>ncm-verify report</title><style>{CSS}</style></head><body>\n"
        + "\n".join(part for part in body if part)
        + "\n</body></html>\n"
    )
