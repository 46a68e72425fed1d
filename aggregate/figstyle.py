"""How the figures draw (aggregate.figures): one colour, marker and line style per method; coinciding points
set side by side (`dodge`); progress and percentage axes; labels placed clear of markers (`place_labels`)."""

from __future__ import annotations

import numpy as np


def _finite(x) -> bool:
    import math

    return x is not None and isinstance(x, (int, float)) and math.isfinite(x)


def color(method: str) -> str:
    """One colour per method across every panel and figure."""
    from aggregate.pipeline import method_rank

    return f"C{method_rank(method)[0] % 10}"


_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<")
_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1)), (0, (3, 1, 1, 1, 1, 1)), (0, (1, 1)))


def style(method: str) -> dict:
    """Colour, marker and line style of a method, the same in every figure: series that coincide stay
    distinguishable by their markers and dashes."""
    from aggregate.pipeline import method_rank

    r = method_rank(method)[0]
    return {"color": color(method), "marker": _MARKERS[r % len(_MARKERS)],
            "ls": _LINESTYLES[r % len(_LINESTYLES)]}


def dodge(series: dict[str, tuple[np.ndarray, np.ndarray]], width: float, tol: float) -> dict[str, np.ndarray]:
    """x positions that keep coinciding points apart: at each x, the series whose y values agree within `tol`
    are spread sideways over `width` (in order of the series), the others keep their x. Visual only."""
    out = {k: np.asarray(x, float).copy() for k, (x, _) in series.items()}
    names = list(series)
    xs = sorted({float(v) for x, _ in series.values() for v in np.asarray(x, float)})
    for xv in xs:
        here = [(k, i) for k in names for i, v in enumerate(np.asarray(series[k][0], float)) if v == xv]
        groups: list[list[tuple[str, int]]] = []
        for k, i in here:
            y = float(series[k][1][i])
            for g in groups:
                if abs(float(series[g[0][0]][1][g[0][1]]) - y) <= tol:
                    g.append((k, i))
                    break
            else:
                groups.append([(k, i)])
        for g in groups:
            if len(g) > 1:
                step = width / (len(g) - 1)
                for j, (k, i) in enumerate(g):
                    out[k][i] = xv - width / 2 + j * step
    return out


def progress_axis(ax, xmax: float) -> None:
    """The normalised-progress axis of every trace figure: from 0 (the base policy) to the end of the run."""
    end = max(1.0, float(xmax))
    ax.set_xlim(-0.05 * end, 1.05 * end)


def dodge_traces(series: dict[str, tuple[np.ndarray, np.ndarray]], xmax: float) -> dict[str, np.ndarray]:
    """`dodge` as the trace figures use it: over 6% of the progress axis, for values within 1% of their span
    (closer than a marker)."""
    ys = np.concatenate([np.asarray(y, float) for _, y in series.values()]) if series else np.zeros(0)
    span = float(np.ptp(ys)) if ys.size else 0.0
    return dodge(series, 0.06 * max(1.0, xmax), 0.01 * span if span > 0 else 1e-12)


def dodge_note(series: dict, dodged: dict, inline: bool = False) -> str:
    moved = any(np.any(dodged[k] != np.asarray(x, float)) for k, (x, _) in series.items())
    if not moved:
        return ""
    return "; coinciding points set side by side" if inline else "\n(coinciding points set side by side)"


def percent_axis(ax, values: list[float], pad: float = 5.0) -> None:
    """A percentage axis that shows only values a percentage can take: [0, 100], around the data."""
    vals = [v for v in values if _finite(v)]
    if not vals:
        return
    percent_limits(ax, vals, "y", min_span=2 * pad, margin=0.1)
    for c in ax.collections + ax.lines:
        c.set_clip_on(False)   # a point at 0% or 100% sits on the frame, drawn whole


# Label offsets (points) tried in order around a marker: right, left, above, below, the diagonals, then
# the same directions further out (joined to the marker by a thin leader line).
_OFFSETS = [(dx * r, dy * r) for r in (1, 2, 3.2) for dx, dy in
            ((1, 0), (-1, 0), (0, 1), (0, -1), (1, 1), (-1, 1), (1, -1), (-1, -1))]


def _overlap(a, b) -> float:
    """Overlap area of two display-space boxes (x0, y0, x1, y1)."""
    w = min(a[2], b[2]) - max(a[0], b[0])
    h = min(a[3], b[3]) - max(a[1], b[1])
    return w * h if w > 0 and h > 0 else 0.0


def place_labels(ax, xs, ys, texts, marker_pt: float = 7.0, fontsize: float = 6.5) -> list:
    """Annotate (x, y) points with texts placed so that no label covers a marker, another label or the legend,
    or leaves the axes, where such a place exists among _OFFSETS (else the least-overlapping one). Returns
    the annotations (tests read their boxes)."""
    from matplotlib.text import Text

    fig = ax.figure
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    px = fig.dpi / 72.0
    pts = ax.transData.transform(np.column_stack([xs, ys]))
    r = marker_pt / 2 * px + 1
    taken = [(x - r, y - r, x + r, y + r) for x, y in pts]
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    if legend is not None:
        lb = legend.get_window_extent(renderer)
        taken.append((lb.x0, lb.y0, lb.x1, lb.y1))
    placed = []
    base = 5.0
    for xd, yd, text in zip(xs, ys, texts):
        best = None
        for dx, dy in _OFFSETS:
            ha = "left" if dx > 0 else "right" if dx < 0 else "center"
            va = "bottom" if dy > 0 else "top" if dy < 0 else "center"
            far = abs(dx) > 1 or abs(dy) > 1
            ann = ax.annotate(text, (xd, yd), xytext=(dx * base, dy * base),
                              textcoords="offset points", ha=ha, va=va, fontsize=fontsize,
                              arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.4", "shrinkA": 0,
                                          "shrinkB": marker_pt / 2} if far else None)
            ann.update_positions(renderer)
            bb = Text.get_window_extent(ann, renderer)  # the text alone, not its leader line
            box = (bb.x0 - 1, bb.y0 - 1, bb.x1 + 1, bb.y1 + 1)
            cost = sum(_overlap(box, t) for t in taken)
            outside = (bb.x0 < frame.x0) or (bb.x1 > frame.x1) or (bb.y0 < frame.y0) or (bb.y1 > frame.y1)
            cost += 1e6 if outside else 0.0
            if best is None or cost < best[0]:
                if best is not None:
                    best[1].remove()
                best = (cost, ann, box)
            else:
                ann.remove()
            if cost == 0:
                break
        placed.append(best[1])
        taken.append(best[2])
    return placed


def percent_limits(ax, values: list[float], axis: str, min_span: float = 20.0, margin: float = 0.2) -> None:
    """Limits of a percentage axis around `values` (`margin` of their span, at least `min_span`), never past 0
    or 100 (points on 100 sit on the frame)."""
    lo, hi = min(values), max(values)
    span = max(hi - lo, min_span)
    limits = (max(0.0, lo - margin * span), min(100.0, hi + margin * span))
    (ax.set_xlim if axis == "x" else ax.set_ylim)(*limits)
