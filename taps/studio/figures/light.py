"""A tree figure drawn as plain SVG markup, for pages that must stay light in the browser.

A class on one laptop (issue 49) runs every student's browser on the server's own cores, and a
plotly chart is most of what a Step page costs there: the chart library itself (about a second of a
core to load and compile on a page's first tree) and each redraw. This draws the same figure (the
plotly `Figure` a page would show, built once per round: `taps.studio.drawn`) as static SVG: the
same traces at the same pixels (the tree figures put one y unit on one pixel and give every range,
margin and size), the title, the depth axis, the legend and the colour bar in the right margin. A
node's hover box becomes its SVG `<title>` (the browser's tooltip); there is no zoom or pan. It
draws what the tree figures use (`taps.studio.figures.trees`): line, marker and text traces on one
x/y axis pair, one colour axis; anything else raises, so a figure never silently loses a part.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Sequence

from plotly.colors import get_colorscale, sample_colorscale

from .style import INK, PAPER

TITLE_CLASS = "gtitle"                 # plotly's class for a figure's title: pages and tests find a round by it
_DASHES = {"dot": (1, 2), "dash": (4, 3), "dashdot": (4, 2, 1, 2), "longdash": (7, 3)}
_TAG = re.compile(r"<(/?)(b|i|br|sup|sub|span)\b[^>]*>", re.IGNORECASE)
_FIELD = re.compile(r"%\{([^}:]+)(?::([^}]*))?\}")


class LightFigureError(ValueError):
    """The figure has a part this drawing does not draw."""


def _esc(text) -> str:
    return html.escape(str(text), quote=True)


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".") if value == value else "0"


def _plain(markup: str) -> str:
    """Plotly text markup as plain text (<br> a new line, other tags dropped, entities read)."""
    text = re.sub(r"<br\s*/?>", "\n", str(markup), flags=re.IGNORECASE)
    return html.unescape(_TAG.sub("", text))


def _spans(markup: str) -> list[list[tuple[str, bool]]]:
    """Plotly text markup as lines of (text, bold) runs."""
    lines: list[list[tuple[str, bool]]] = [[]]
    bold, at = False, 0
    for match in _TAG.finditer(str(markup)):
        if match.start() > at:
            lines[-1].append((html.unescape(markup[at:match.start()]), bold))
        tag = match.group(2).lower()
        if tag == "br":
            lines.append([])
        elif tag == "b":
            bold = not match.group(1)
        at = match.end()
    if at < len(markup):
        lines[-1].append((html.unescape(markup[at:]), bold))
    return lines


def _text(x: float, y: float, markup: str, size: float, colour: str, anchor: str = "start",
          baseline: str = "auto", family: str | None = None, line_px: float | None = None,
          halo: str | None = None, cls: str | None = None) -> str:
    """An SVG <text> of plotly markup (bold runs, <br> lines), its first line's baseline at y."""
    attrs = [f'class="{cls}"'] if cls else []
    attrs += [f'x="{_num(x)}"', f'y="{_num(y)}"', f'font-size="{_num(size)}"', f'fill="{_esc(colour)}"',
              f'text-anchor="{anchor}"']
    if baseline != "auto":
        attrs.append(f'dominant-baseline="{baseline}"')
    if family:
        attrs.append(f'font-family="{_esc(family)}"')
    if halo:           # the labels' halo: the background's colour round every glyph, drawn under it
        attrs.append(f'stroke="{_esc(halo)}" stroke-width="3" stroke-linejoin="round" style="paint-order:stroke"')
    parts = []
    for n, line in enumerate(_spans(markup)):
        runs = "".join(f'<tspan font-weight="bold">{_esc(t)}</tspan>' if b else _esc(t) for t, b in line)
        dy = "" if n == 0 else f' dy="{_num(line_px or size * 1.3)}"'
        parts.append(f'<tspan x="{_num(x)}"{dy}>{runs}</tspan>' if n else runs)
    return f'<text {" ".join(attrs)}>{"".join(parts)}</text>'


def _label(x: float, y: float, text: str, size: float, colour: str, anchor: str = "start", extra: str = "") -> str:
    """One line of plain text (plotly markup read as text) at (x, y)."""
    return (f'<text x="{_num(x)}" y="{_num(y)}" font-size="{_num(size)}" fill="{_esc(colour)}" text-anchor="{anchor}"'
            f'{extra}>{_esc(_plain(text))}</text>')


def _hover(template: str | None, trace: dict, i: int) -> str:
    """A node's hover text (its hovertemplate filled in for point i), plain."""
    if not template or trace.get("hoverinfo") == "skip":
        return ""
    template = re.sub(r"<extra>.*?</extra>", "", template)

    def field(match: re.Match) -> str:
        name, spec = match.group(1).strip(), match.group(2)
        value = _point_field(trace, name, i)
        if spec and isinstance(value, (int, float)):
            try:
                return format(value, spec)
            except ValueError:
                return str(value)
        return "" if value is None else str(value)

    return _plain(_FIELD.sub(field, template))


def _point_field(trace: dict, name: str, i: int):
    found = re.fullmatch(r"customdata\[(\d+)\]", name)
    if found:
        row = (trace.get("customdata") or [])[i]
        return row[int(found.group(1))] if row is not None and int(found.group(1)) < len(row) else None
    if name in ("x", "y", "text"):
        values = trace.get(name)
        if isinstance(values, (list, tuple)):
            return values[i] if i < len(values) else None
        return values
    return None


class _Axes:
    """Data to pixels on the figure's one x/y pair (both ranges given, as the tree figures give them)."""

    def __init__(self, layout: dict, width: float, height: float):
        margin = layout.get("margin", {})
        self.left, self.right = float(margin.get("l", 80)), width - float(margin.get("r", 80))
        self.top, self.bottom = float(margin.get("t", 100)), height - float(margin.get("b", 80))
        xr, yr = layout.get("xaxis", {}).get("range"), layout.get("yaxis", {}).get("range")
        if not xr or not yr:
            raise LightFigureError("a light figure needs both axes' ranges given")
        self.xr, self.yr = [float(v) for v in xr], [float(v) for v in yr]

    def x(self, value: float) -> float:
        return self.left + (value - self.xr[0]) / (self.xr[1] - self.xr[0]) * (self.right - self.left)

    def y(self, value: float) -> float:       # a range given top-down ([high, low]) draws y downwards
        return self.bottom - (value - self.yr[0]) / (self.yr[1] - self.yr[0]) * (self.bottom - self.top)


def _symbol(symbol: str, x: float, y: float, size: float, fill: str, line_colour: str, line_width: float,
            opacity: float) -> str:
    """One marker (plotly's `size` is its diameter in px) as an SVG shape."""
    r = size / 2
    open_ = symbol.endswith("-open") or "-open-" in symbol
    base = symbol.split("-")[0]
    paint = (f'fill="none" stroke="{_esc(fill)}" stroke-width="{_num(max(line_width, 1))}"' if open_ else
             f'fill="{_esc(fill)}" stroke="{_esc(line_colour)}" stroke-width="{_num(line_width)}"'
             if line_width > 0 else f'fill="{_esc(fill)}"')
    if opacity < 1:
        paint += f' opacity="{opacity:.2f}"'
    if base == "circle":
        shape = f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(r)}" {paint}/>'
        if symbol.endswith("-dot"):
            shape += f'<circle cx="{_num(x)}" cy="{_num(y)}" r="{_num(max(r / 4, 1.5))}" fill="{_esc(fill)}"/>'
        return shape
    if base == "square":
        return f'<rect x="{_num(x - r)}" y="{_num(y - r)}" width="{_num(size)}" height="{_num(size)}" {paint}/>'
    if base == "diamond":
        d = r * 1.3
        points = [(x, y - d), (x + d, y), (x, y + d), (x - d, y)]
    elif base == "x":
        a, b = r, r / 2.4
        points = [(x - a, y - a + b), (x - a + b, y - a), (x, y - b), (x + a - b, y - a), (x + a, y - a + b),
                  (x + b, y), (x + a, y + a - b), (x + a - b, y + a), (x, y + b), (x - a + b, y + a),
                  (x - a, y + a - b), (x - b, y)]
    elif base == "star":
        outer, inner = r * 1.2, r * 1.2 * 0.45
        points = [(x + (outer if k % 2 == 0 else inner) * math.sin(k * math.pi / 5),
                   y - (outer if k % 2 == 0 else inner) * math.cos(k * math.pi / 5)) for k in range(10)]
    else:
        raise LightFigureError(f"a light figure draws no {symbol!r} markers")
    return f'<polygon points="{" ".join(f"{_num(px)},{_num(py)}" for px, py in points)}" {paint}/>'


class _Colours:
    """A colour axis: values to colours on its scale between cmin and cmax."""

    def __init__(self, axis: dict | None):
        self.axis = axis or {}
        scale = self.axis.get("colorscale") or "Cividis"
        self.scale = get_colorscale(scale) if isinstance(scale, str) else [list(s) for s in scale]
        self.low, self.high = float(self.axis.get("cmin", 0.0)), float(self.axis.get("cmax", 1.0))

    def __call__(self, values: Sequence[float]) -> list[str]:
        span = (self.high - self.low) or 1.0
        shares = [min(1.0, max(0.0, (float(v) - self.low) / span)) for v in values]
        return sample_colorscale(self.scale, shares, colortype="rgb") if shares else []


def _each(value, count: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * count


def light_svg(fig, width: int) -> str:
    """`fig` (a tree figure: `round_tree_figure`, `lesson_figure`'s tree stages, the toy tree) as
    SVG markup `width` px wide, scaling to its container's width."""
    spec = fig.to_plotly_json()
    layout, traces = spec.get("layout", {}), spec.get("data", [])
    template = (layout.get("template") or {}).get("layout", {})
    height = float(layout.get("height") or 450)
    paper = layout.get("paper_bgcolor") or template.get("paper_bgcolor") or PAPER
    plot_bg = layout.get("plot_bgcolor") or template.get("plot_bgcolor") or paper
    font = layout.get("font", {})
    ink = font.get("color") or INK
    family = font.get("family") or "sans-serif"
    if (layout.get("yaxis") or {}).get("visible") is not False:
        raise LightFigureError("a light figure draws the depth axis only: its y axis must be hidden")
    axes = _Axes(layout, width, height)
    colours = _Colours(layout.get("coloraxis"))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {_num(height)}" width="100%" '
           f'style="max-width:{width}px;height:auto;display:block" font-family="{_esc(family)}" role="img" '
           f'class="taps-light-figure" data-height="{_num(height)}">',
           f'<rect width="{width}" height="{_num(height)}" fill="{_esc(paper)}"/>',
           f'<rect x="{_num(axes.left)}" y="{_num(axes.top)}" width="{_num(axes.right - axes.left)}" '
           f'height="{_num(axes.bottom - axes.top)}" fill="{_esc(plot_bg)}"/>']
    out += _title(layout, ink, width)
    out += _x_axis(layout, axes, ink)
    for trace in traces:
        if trace.get("type", "scatter") != "scatter" or trace.get("visible") is False:
            raise LightFigureError(f"a light figure draws scatter traces, not {trace.get('type')!r}")
        out += _trace(trace, axes, colours, paper)
    out += _legend(layout, traces, axes, colours, ink)
    out += _colour_bar(layout, traces, axes, colours, ink, width)
    out.append("</svg>")
    return "".join(out)


def _title(layout: dict, ink: str, width: int) -> list[str]:
    title = layout.get("title") or {}
    if not title.get("text"):
        return []
    size = float((title.get("font") or {}).get("size", 20))
    colour = (title.get("font") or {}).get("color") or ink
    x = float(title.get("x", 0.01)) * width + 6
    top = float((title.get("pad") or {}).get("t", 10))
    out = [_text(x, top + size * 0.9, title["text"], size, colour, line_px=size * 1.2, cls=TITLE_CLASS)]
    subtitle = title.get("subtitle") or {}
    if subtitle.get("text"):
        sub_size = float((subtitle.get("font") or {}).get("size", 15))
        lines = len(_spans(title["text"]))
        out.append(_text(x, top + size * 0.9 + size * 1.2 * (lines - 1) + sub_size * 1.75, subtitle["text"], sub_size,
                         (subtitle.get("font") or {}).get("color") or colour, line_px=20))
    return out


def _x_axis(layout: dict, axes: _Axes, ink: str) -> list[str]:
    axis = layout.get("xaxis") or {}
    if axis.get("visible") is False:
        return []
    size = float((axis.get("tickfont") or {}).get("size", 12))
    values = axis.get("tickvals") or []
    labels = axis.get("ticktext") or [_num(v) for v in values]
    out = [_label(axes.x(v), axes.bottom + 6 + size, t, size, ink, "middle") for v, t in zip(values, labels)]
    title = axis.get("title") or {}
    if title.get("text"):
        title_size = float((title.get("font") or {}).get("size", 14))
        out.append(_label((axes.left + axes.right) / 2, axes.bottom + 12 + size + title_size * 1.3, title["text"],
                          title_size, ink, "middle"))
    return out


def _dash(dash: str | None, width: float) -> str:
    if not dash or dash == "solid":
        return ""
    pattern = _DASHES.get(dash)
    if pattern is None:
        return f' stroke-dasharray="{_esc(dash)}"'
    return f' stroke-dasharray="{",".join(_num(p * max(width, 1)) for p in pattern)}"'


def _trace(trace: dict, axes: _Axes, colours: _Colours, paper: str) -> list[str]:
    mode = trace.get("mode") or "markers"
    xs, ys = list(trace.get("x") or []), list(trace.get("y") or [])
    out = []
    if "lines" in mode:
        line = trace.get("line") or {}
        width = float(line.get("width", 2))
        segments, points = [], []
        for x, y in zip(xs + [None], ys + [None]):
            if x is None or y is None:
                if len(points) > 1:
                    segments.append("M" + "L".join(points))
                points = []
            else:
                points.append(f"{_num(axes.x(x))},{_num(axes.y(y))}")
        if segments:
            out.append(f'<path d="{"".join(segments)}" fill="none" stroke="{_esc(line.get("color", "#444444"))}" '
                       f'stroke-width="{_num(width)}" stroke-linejoin="round"{_dash(line.get("dash"), width)}/>')
    points = [(i, x, y) for i, (x, y) in enumerate(zip(xs, ys)) if x is not None and y is not None]
    if "markers" in mode:
        marker = trace.get("marker") or {}
        colour = marker.get("color", "#444444")
        fills = colours(colour) if isinstance(colour, (list, tuple)) and marker.get("coloraxis") else \
            _each(colour, len(xs))
        sizes, symbols = _each(marker.get("size", 6), len(xs)), _each(marker.get("symbol", "circle"), len(xs))
        outline = marker.get("line") or {}
        opacity = float(marker.get("opacity", 1.0))
        template = trace.get("hovertemplate")
        for i, x, y in points:
            if opacity == 0:
                continue
            shape = _symbol(str(symbols[i]), axes.x(x), axes.y(y), float(sizes[i]), str(fills[i]),
                            str(outline.get("color", "#444444")), float(outline.get("width", 0)), opacity)
            hover = _hover(template, trace, i)
            out.append(f"<g><title>{_esc(hover)}</title>{shape}</g>" if hover else shape)
    if "text" in mode and trace.get("text") is not None:
        out += _trace_text(trace, points, axes, paper)
    return out


def _trace_text(trace: dict, points, axes: _Axes, paper: str) -> list[str]:
    texts = _each(trace.get("text"), len(trace.get("x") or []))
    font = trace.get("textfont") or {}
    size, colour = float(font.get("size", 12)), font.get("color") or INK
    position = trace.get("textposition") or "middle center"
    marker = trace.get("marker") or {}
    sizes = _each(marker.get("size", 6), len(texts))
    halo = paper if font.get("shadow") else None
    out = []
    for i, x, y in points:
        if not texts[i]:
            continue
        gap = (float(sizes[i]) / 2 + 2) if "markers" in (trace.get("mode") or "") else 0
        px, py = axes.x(x), axes.y(y)
        vertical, _, horizontal = position.partition(" ")
        anchor = {"left": "end", "right": "start"}.get(horizontal, "middle")
        px += {"left": -gap, "right": gap}.get(horizontal, 0)
        lines = len(_spans(texts[i]))
        if vertical == "top":
            py -= gap + size * 0.3 + size * 1.2 * (lines - 1)
            baseline = "auto"
        elif vertical == "bottom":
            py += gap + size * 0.9
            baseline = "auto"
        else:
            py -= size * 1.2 * (lines - 1) / 2
            baseline = "central"
        out.append(_text(px, py, texts[i], size, colour, anchor, baseline, font.get("family"), halo=halo,
                         line_px=size * 1.2))
    return out


def _legend_entries(traces: list[dict]) -> list[dict]:
    """The traces plotly lists in the legend: those not kept out of it that have points and a name."""
    return [t for t in traces if t.get("showlegend") is not False and t.get("x") and t.get("name")]


def _legend(layout: dict, traces: list[dict], axes: _Axes, colours: _Colours, ink: str) -> list[str]:
    if layout.get("showlegend") is False:
        return []
    legend = layout.get("legend") or {}
    entries = _legend_entries(traces)
    if len(entries) < 1:
        return []
    size = float((legend.get("font") or {}).get("size", 14))
    colour = (legend.get("font") or {}).get("color") or ink
    row = size + 8
    x0 = axes.left + float(legend.get("x", 1.02)) * (axes.right - axes.left)
    y = axes.top + float(1 - legend.get("y", 1)) * (axes.bottom - axes.top) + row / 2 + 2
    out = []
    for trace in entries:
        mode = trace.get("mode") or "markers"
        if "markers" in mode:
            marker = trace.get("marker") or {}
            colour_of = marker.get("color", "#444444")
            if isinstance(colour_of, (list, tuple)):
                colour_of = colours([sum(colour_of) / len(colour_of)])[0] if marker.get("coloraxis") else colour_of[0]
            size_of = marker.get("size", 6)
            size_of = 12.0 if legend.get("itemsizing") == "constant" else \
                min(float(size_of[0] if isinstance(size_of, (list, tuple)) else size_of), 16)
            symbol = marker.get("symbol", "circle")
            symbol = symbol[0] if isinstance(symbol, (list, tuple)) else symbol
            outline = marker.get("line") or {}
            out.append(_symbol(str(symbol), x0 + 18, y, size_of, str(colour_of), str(outline.get("color", "#444444")),
                               min(float(outline.get("width", 0)), 2.5), float(marker.get("opacity", 1.0))))
        else:
            line = trace.get("line") or {}
            width = min(float(line.get("width", 2)), 5)
            out.append(f'<path d="M{_num(x0 + 4)},{_num(y)}L{_num(x0 + 34)},{_num(y)}" '
                       f'stroke="{_esc(line.get("color", "#444"))}" stroke-width="{_num(width)}"'
                       f'{_dash(line.get("dash"), width)}/>')
        out.append(_label(x0 + 40, y, trace["name"], size, colour, extra=' dominant-baseline="central"'))
        y += row
    return out


def _colour_bar(layout: dict, traces: list[dict], axes: _Axes, colours: _Colours, ink: str, width: int) -> list[str]:
    markers = [t.get("marker") or {} for t in traces if t.get("x")]
    used = any(m.get("coloraxis") and isinstance(m.get("color"), (list, tuple)) for m in markers)
    bar = colours.axis.get("colorbar")
    if not used or not bar or colours.axis.get("showscale") is False:
        return []
    length, thickness = float(bar.get("len", 150)), float(bar.get("thickness", 12))
    x0 = axes.left + float(bar.get("x", 1.01)) * (axes.right - axes.left)
    ticks, labels = bar.get("tickvals") or [], bar.get("ticktext") or []
    tick_size = float((bar.get("tickfont") or {}).get("size", 12))
    title = bar.get("title") or {}
    title_size = float((title.get("font") or {}).get("size", 14))
    y_bottom = axes.bottom - tick_size - 6
    y0 = y_bottom - thickness
    steps = 24
    shades = colours([colours.low + (colours.high - colours.low) * k / (steps - 1) for k in range(steps)])
    out = ['<defs><linearGradient id="taps-colour-bar">'
           + "".join(f'<stop offset="{k / (steps - 1):.3f}" stop-color="{c}"/>' for k, c in enumerate(shades))
           + "</linearGradient></defs>",
           f'<rect x="{_num(x0)}" y="{_num(y0)}" width="{_num(min(length, width - x0 - 4))}" '
           f'height="{_num(thickness)}" fill="url(#taps-colour-bar)"/>']
    span = (colours.high - colours.low) or 1.0
    for value, label in zip(ticks, labels):
        tx = x0 + (float(value) - colours.low) / span * min(length, width - x0 - 4)
        out.append(_label(tx, y_bottom + tick_size + 2, label, tick_size, ink, "middle"))
    if title.get("text"):
        out.append(_label(x0, y0 - 6, title["text"], title_size, ink))
    return out


__all__ = ["LightFigureError", "TITLE_CLASS", "light_svg"]
