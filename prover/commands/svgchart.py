"""Small charts as SVG text, with no plotting library: line charts inline in self-contained HTML reports
(``prover view``), and forest plots, stacked bars and line charts as files of their own for the documentation
(``standalone``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from html import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"]


def _ticks(lo: float, hi: float, n: int = 4, whole: bool = False) -> list[float]:
    """About ``n`` round tick values covering [lo, hi]; whole numbers only with ``whole`` (steps)."""
    if hi <= lo:
        return [lo]
    raw = (hi - lo) / n
    step = 10 ** math.floor(math.log10(raw))
    step *= next(m for m in (1, 2, 2.5, 5, 10) if step * m >= raw)
    if whole:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9) * step
    return [first + k * step for k in range(int((hi - first) / step + 1e-9) + 1)]


def _label(v: float) -> str:
    return f"{v:.4g}" if abs(v) < 1e4 else f"{v / 1000:.4g}k"


def line_chart(title: str, series: list[tuple[str, list[tuple[float, float]]]], width: int = 420,
               height: int = 240, y_range: tuple[float, float] | None = None) -> str:
    """An ``<svg>`` with one polyline (and markers) per named series of (x, y) points, axes with ticks and a
    legend. Series without points are left out; with none at all the chart says so."""
    series = [(name, [(float(x), float(y)) for x, y in pts if math.isfinite(y)]) for name, pts in series]
    series = [(name, pts) for name, pts in series if pts]
    left, right, top, bottom = 52, 12, 26, 34 + 14 * ((len(series) + 1) // 2)
    full = height + bottom - 34  # the legend's rows below the plot
    out = [f'<svg class="chart" xmlns="http://www.w3.org/2000/svg" width="{width}" height="{full}" '
           f'viewBox="0 0 {width} {full}" role="img" aria-label="{escape(title)}">',
           f'<text x="{width / 2}" y="16" text-anchor="middle" class="chart-title">{escape(title)}</text>']
    if not series:
        out.append(f'<text x="{width / 2}" y="{height / 2}" text-anchor="middle" class="chart-empty">'
                   "no data</text>")
        return "\n".join(out + ["</svg>"])
    xs = [x for _, pts in series for x, _ in pts]
    ys = [y for _, pts in series for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = y_range if y_range else (min(ys), max(ys))
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        y0, y1 = y0 - (abs(y0) or 1) * 0.1, y1 + (abs(y1) or 1) * 0.1
    pw, ph = width - left - right, height - top - 34

    def px(x: float) -> float:
        return left + (x - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="chart-frame"/>')
    for t in _ticks(y0, y1):
        y = f"{py(t):.1f}"
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y}" y2="{y}" class="chart-grid"/>'
                   f'<text x="{left - 4}" y="{py(t) + 4:.1f}" text-anchor="end" class="chart-tick">'
                   f"{_label(t)}</text>")
    for t in _ticks(x0, x1, 5, whole=all(x == int(x) for x in xs)):
        out.append(f'<text x="{px(t):.1f}" y="{top + ph + 14}" text-anchor="middle" class="chart-tick">'
                   f'{_label(t)}</text>')
    for k, (name, pts) in enumerate(series):
        color = COLORS[k % len(COLORS)]
        coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.8"/>')
        out += [f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.6" fill="{color}"><title>{escape(name)}: '
                f'step {x:g}, {y:.4g}</title></circle>' for x, y in pts]
        lx, ly = left + (k % 2) * (pw / 2), top + ph + 30 + 14 * (k // 2)
        out.append(f'<rect x="{lx:.1f}" y="{ly - 8}" width="10" height="10" fill="{color}"/>'
                   f'<text x="{lx + 14:.1f}" y="{ly + 1}" class="chart-legend">{escape(name)}</text>')
    return "\n".join(out + ["</svg>"])


# -- figures for the documentation: standalone SVG files (an <img> on a page, so they carry their own style) --

STYLE = (
    "text { font-family: system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif; fill: #222; }"
    " .chart-title { font-size: 14px; font-weight: 600; }"
    " .chart-tick, .chart-legend, .chart-note { font-size: 11px; fill: #444; }"
    " .chart-label { font-size: 12px; } .chart-heading { font-size: 12px; font-weight: 600; }"
    " .chart-axis { font-size: 11.5px; fill: #333; }"
    " .chart-frame { fill: none; stroke: #999; } .chart-grid { stroke: #e4e4e4; }"
    " .chart-zero { stroke: #555; stroke-dasharray: 4 3; } .chart-empty { fill: #999; }")
BETTER, WORSE, NEITHER = "#2ca02c", "#d62728", "#1f77b4"  # an interval above 0, below 0, across it


def standalone(svg: str) -> str:
    """An ``<svg>`` of this module as a file of its own: its style inside, on white (a page's dark theme
    would otherwise show dark text on dark), ending in a newline."""
    head, rest = svg.split(">", 1)
    return (f'{head}><style>{STYLE}</style><rect width="100%" height="100%" fill="#fff"/>{rest}').rstrip() + "\n"


def _size(svg: str) -> tuple[float, float]:
    opening = svg[:svg.index(">")]
    width, height = (re.search(rf' {name}="([\d.]+)"', opening) for name in ("width", "height"))
    if width is None or height is None:
        raise ValueError(f"an <svg> of this module states its width and height: {opening[:80]!r}")
    return float(width.group(1)), float(height.group(1))


def side_by_side(title: str, svgs: list[str], gap: int = 16) -> str:
    """Several charts of this module in one ``<svg>``, left to right."""
    sizes = [_size(s) for s in svgs]
    width, height = sum(w for w, _ in sizes) + gap * (len(svgs) - 1), max(h for _, h in sizes)
    out, x = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:g}" height="{height:g}" '
              f'viewBox="0 0 {width:g} {height:g}" role="img" aria-label="{escape(title)}">'], 0.0
    for svg, (w, _) in zip(svgs, sizes):
        out.append(svg.replace("<svg ", f'<svg x="{x:g}" ', 1))
        x += w + gap
    return "\n".join(out + ["</svg>"])


def _text_width(texts: list[str], font_px: float) -> int:
    """About how wide the longest of ``texts`` is drawn in a sans-serif font of ``font_px`` (0.56 em a
    character, a little over the average of such fonts), so that labels are not cut off."""
    return math.ceil(0.56 * font_px * max((len(t) for t in texts), default=0))


@dataclass(frozen=True)
class ForestRow:
    """One row of a forest plot: an estimate and its interval in the axis' units (no interval: ``lo`` and
    ``hi`` None), with ``note`` printed at its right; a row without ``mean`` is a heading (an env's name)."""

    label: str
    mean: float | None = None
    lo: float | None = None
    hi: float | None = None
    note: str = ""


def _interval_color(row: ForestRow) -> str:
    if row.lo is not None and row.lo > 0:
        return BETTER
    if row.hi is not None and row.hi < 0:
        return WORSE
    return NEITHER


def forest_chart(title: str, rows: list[ForestRow], axis_label: str, width: int = 760) -> str:
    """An ``<svg>`` with one row per estimate: a dot at ``mean``, a line from ``lo`` to ``hi``, a dashed line at
    0; green when the interval lies above 0, red below, blue across it."""
    label_w = _text_width([r.label for r in rows if r.mean is not None], 12) + 16
    note_w = _text_width([r.note for r in rows], 11) + 16
    width = max(width, label_w + note_w + 280)  # room for the plot between the labels and the notes
    row_h, top = 22, 34
    left, right = label_w, width - note_w
    values = [0.0, *(v for r in rows for v in (r.mean, r.lo, r.hi) if v is not None and math.isfinite(v))]
    v0, v1 = min(values), max(values)
    pad = (v1 - v0) * 0.06 or 1.0
    v0, v1 = v0 - pad, v1 + pad
    height = top + row_h * max(1, len(rows)) + 48

    def px(v: float) -> float:
        return left + (v - v0) / (v1 - v0) * (right - left)

    bottom = top + row_h * max(1, len(rows))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
           f'{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="chart-title">{escape(title)}</text>']
    for t in _ticks(v0, v1, 6):
        out.append(f'<line x1="{px(t):.1f}" x2="{px(t):.1f}" y1="{top}" y2="{bottom}" class="chart-grid"/>'
                   f'<text x="{px(t):.1f}" y="{bottom + 14}" text-anchor="middle" class="chart-tick">'
                   f'{_label(t)}</text>')
    out += [f'<line x1="{px(0):.1f}" x2="{px(0):.1f}" y1="{top}" y2="{bottom}" class="chart-zero"/>',
            f'<rect x="{left}" y="{top}" width="{right - left}" height="{bottom - top}" class="chart-frame"/>',
            f'<text x="{(left + right) / 2}" y="{bottom + 32}" text-anchor="middle" class="chart-axis">'
            f'{escape(axis_label)}</text>']
    for k, row in enumerate(rows):
        y = top + row_h * k + row_h / 2
        if row.mean is None:
            out.append(f'<text x="8" y="{y + 4:.1f}" class="chart-heading">{escape(row.label)}</text>')
            continue
        color = _interval_color(row)
        out.append(f'<g class="forest-row"><title>{escape(row.label)}: {escape(row.note)}</title>'
                   f'<text x="{left - 8}" y="{y + 4:.1f}" text-anchor="end" class="chart-label">'
                   f'{escape(row.label)}</text>')
        if row.lo is not None and row.hi is not None:
            out.append(f'<line class="interval" x1="{px(row.lo):.2f}" x2="{px(row.hi):.2f}" y1="{y:.1f}" '
                       f'y2="{y:.1f}" stroke="{color}" stroke-width="2"/>')
            out += [f'<line x1="{px(v):.2f}" x2="{px(v):.2f}" y1="{y - 5:.1f}" y2="{y + 5:.1f}" stroke="{color}" '
                    'stroke-width="2"/>' for v in (row.lo, row.hi)]
        out.append(f'<circle class="estimate" cx="{px(row.mean):.2f}" cy="{y:.1f}" r="4.5" fill="{color}"/>'
                   f'<text x="{right + 8}" y="{y + 4:.1f}" class="chart-note">{escape(row.note)}</text></g>')
    return "\n".join(out + ["</svg>"])


@dataclass(frozen=True)
class StackedBar:
    """One bar: its parts' values (seconds, say) by part name; ``note`` is printed at its right."""

    label: str
    parts: dict[str, float]
    note: str = ""


def stacked_bars(title: str, bars: list[StackedBar], parts: list[str], axis_label: str, width: int = 760) -> str:
    """An ``<svg>`` with one horizontal bar per ``StackedBar``, each its parts' shares of its total (100%),
    in the order of ``parts`` (one color each, a legend below); a part of 4% or more is labelled."""
    label_w, note_w = _text_width([b.label for b in bars], 12) + 16, _text_width([b.note for b in bars], 11) + 16
    width = max(width, label_w + note_w + 280)
    bar_h, gap, top = 26, 10, 34
    left, right = label_w, width - note_w
    bottom = top + (bar_h + gap) * len(bars)
    legend_rows = (len(parts) + 2) // 3
    height = bottom + 40 + 16 * legend_rows
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" viewBox="0 0 {width} '
           f'{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{width / 2}" y="18" text-anchor="middle" class="chart-title">{escape(title)}</text>']
    for t in range(0, 101, 20):
        x = left + t / 100 * (right - left)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top - 4}" y2="{bottom - gap + 4}" class="chart-grid"/>'
                   f'<text x="{x:.1f}" y="{bottom + 8}" text-anchor="middle" class="chart-tick">{t}%</text>')
    out.append(f'<text x="{(left + right) / 2}" y="{bottom + 24}" text-anchor="middle" class="chart-axis">'
               f'{escape(axis_label)}</text>')
    for k, bar in enumerate(bars):
        y, total, x = top + (bar_h + gap) * k, sum(bar.parts.get(p, 0.0) for p in parts), float(left)
        out.append(f'<text x="{left - 8}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="end" class="chart-label">'
                   f'{escape(bar.label)}</text>'
                   f'<text x="{right + 8}" y="{y + bar_h / 2 + 4:.1f}" class="chart-note">{escape(bar.note)}</text>')
        for i, part in enumerate(parts):
            value = bar.parts.get(part, 0.0)
            if total <= 0 or value <= 0:
                continue
            w = value / total * (right - left)
            out.append(f'<rect class="part" x="{x:.2f}" y="{y}" width="{w:.2f}" height="{bar_h}" '
                       f'fill="{COLORS[i % len(COLORS)]}"><title>{escape(bar.label)}, {escape(part)}: '
                       f'{value:.4g} ({value / total:.1%})</title></rect>')
            if value / total >= 0.04:
                out.append(f'<text x="{x + w / 2:.1f}" y="{y + bar_h / 2 + 4:.1f}" text-anchor="middle" '
                           f'class="chart-legend" style="fill: #fff">{value / total:.0%}</text>')
            x += w
    for i, part in enumerate(parts):
        lx, ly = 12 + (i % 3) * (width - 24) / 3, bottom + 44 + 16 * (i // 3)
        out.append(f'<rect x="{lx:.1f}" y="{ly - 9}" width="10" height="10" fill="{COLORS[i % len(COLORS)]}"/>'
                   f'<text x="{lx + 14:.1f}" y="{ly}" class="chart-legend">{escape(part)}</text>')
    return "\n".join(out + ["</svg>"])
