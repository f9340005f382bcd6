"""Small line charts as inline SVG text, for self-contained HTML reports (no plotting library needed)."""

from __future__ import annotations

import math
from html import escape

COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]


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
