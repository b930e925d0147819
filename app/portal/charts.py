"""Bar charts drawn on the server as inline SVG: no script, no CDN, no inline style
(colours are classes of portal.css), so they work offline and under the portal's CSP.

Each chart is an ``<svg role="img">`` named by its ``<title>`` and ``<desc>``; every bar
carries its own ``<title>`` (a tooltip, and read by screen readers), and the page shows
the same figures as a table for whoever prefers one.
"""
from __future__ import annotations

from markupsafe import Markup, escape

WIDTH, HEIGHT = 760, 220
LEFT, RIGHT, TOP, BOTTOM = 44, 12, 12, 34


def _nice_max(value: int) -> int:
    """The axis top: four equal whole steps, each a round number, reaching at least ``value``."""
    need = max(1, -(-value // 4))
    scale = 1
    while True:
        for mantissa in (1, 1.5, 2, 2.5, 3, 4, 5, 6, 8):
            step = mantissa * scale
            if step >= need and step == int(step):
                return int(step) * 4
        scale *= 10


def bar_chart(chart_id: str, title: str, description: str, labels: list[str], series: list[tuple[str, str, list[int]]],
              *, short: list[str] | None = None, tick_every: int = 1) -> Markup:
    """Grouped bars: one group per label, one bar per series ``(name, css class, values)``;
    ``short`` labels the axis (every ``tick_every``-th group), ``labels`` the bars' titles."""
    short = short or labels
    top = _nice_max(max([max(values, default=0) for _, _, values in series] + [0]))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    group_w = plot_w / max(1, len(labels))
    bar_w = max(1.0, (group_w * 0.8) / max(1, len(series)))
    parts = [f'<svg class="chart" id="{escape(chart_id)}" role="img" viewBox="0 0 {WIDTH} {HEIGHT}" '
             f'aria-labelledby="{escape(chart_id)}-t {escape(chart_id)}-d" xmlns="http://www.w3.org/2000/svg">',
             f'<title id="{escape(chart_id)}-t">{escape(title)}</title>',
             f'<desc id="{escape(chart_id)}-d">{escape(description)}</desc>']
    for i in range(5):  # grid lines and the value axis
        value = top * i // 4
        y = TOP + plot_h - plot_h * i / 4
        parts.append(f'<line class="grid" x1="{LEFT}" x2="{WIDTH - RIGHT}" y1="{y:.1f}" y2="{y:.1f}"/>')
        parts.append(f'<text class="axis" x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">{value}</text>')
    for g, label in enumerate(labels):
        x0 = LEFT + g * group_w + group_w * 0.1
        for s, (name, css, values) in enumerate(series):
            value = values[g]
            h = plot_h * max(0, value) / top
            x, y = x0 + s * bar_w, TOP + plot_h - h
            parts.append(f'<rect class="bar {escape(css)}" x="{x:.1f}" y="{y:.1f}" width="{bar_w:.1f}" '
                         f'height="{h:.1f}"><title>{escape(label)}: {value} {escape(name)}</title></rect>')
        if g % tick_every == 0:
            parts.append(f'<text class="axis" x="{x0 + group_w * 0.4:.1f}" y="{HEIGHT - BOTTOM + 16}" '
                         f'text-anchor="middle">{escape(short[g])}</text>')
    parts.append("</svg>")
    return Markup("".join(parts))  # noqa: S704 - every text in it went through escape() above
