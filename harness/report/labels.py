"""Names written beside the points of a scatter plot (table2's BLEU against cost, the rows layout's BLEU against
parameters): each beside its point where there is room, the rest in a column joined to their points by lines."""

from __future__ import annotations

import matplotlib as mpl


def place_labels(ax, names: list[str], xs: list[float], ys: list[float], errs: list[float] | None = None,
                 fontsize: float = 8, widen: int = 3) -> list:
    """Write each name beside its point (x, y in data units, with its error bar's half-height in `errs`): right of
    it where that box is free, else left of it, else centred above it (over its error bar), else below it. A box is
    free where it overlaps no name written before it, no marker or error bar, no legend and nothing outside the
    axes, and a free place half a line from every other point's marker comes before one beside another point
    (`apart`); names go in from the highest point down. The names that fit nowhere beside their points (a run of rows of
    one size and close scores) go in one column, at the first x right of them where every one of them is free and,
    where such an x exists, no line runs through another point's marker; top to bottom in their points' order, each
    joined to its point by a thin line, so the lines do not cross. A name beside its point that one of those lines
    would cross moves to another of its places where that is free, else into the column. Where the column fits
    nowhere right of its points inside the axes, the x axis's right limit moves out to make room for it and the
    names are placed again (at most `widen` times): a column allowed to overlap runs over points and out of the
    axes. The axes' limits must be otherwise final (set them first): positions are worked out in pixels."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.transforms import Bbox
    renderer = FigureCanvasAgg(ax.figure).get_renderer()
    ax.figure.draw_without_rendering()
    frame, to_px = ax.get_window_extent(renderer), ax.transData.transform
    errs = errs or [0.0] * len(names)
    pts = [tuple(to_px((x, y))) for x, y in zip(xs, ys)]
    # a marker's half-width (matplotlib's default marker size, and its edge) or a letter's, whichever is wider
    r = max(fontsize * 0.45, mpl.rcParams["lines.markersize"] / 2 + 1) * ax.figure.dpi / 72
    marks = [Bbox.from_extents(px - r, py - r, px + r, py + r) for px, py in pts]
    own = [Bbox.from_extents(px - r, min(to_px((x, y - e))[1], py - r), px + r, max(to_px((x, y + e))[1], py + r))
           for (x, y), e, (px, py) in zip(zip(xs, ys), errs, pts)]         # each point's marker and error bar
    taken = own + ([ax.get_legend().get_window_extent(renderer)] if ax.get_legend() is not None else [])
    sizes = text_sizes(ax, names, fontsize, renderer)

    def free(box) -> bool:
        return (frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
                and not any(box.overlaps(b) for b in taken))
    def sides(i: int) -> tuple:                                # right of its point, left, above, below
        (w, h), (px, py) = sizes[i], pts[i]
        return (Bbox.from_bounds(px + r + 2, py - h / 2, w, h), Bbox.from_bounds(px - r - 2 - w, py - h / 2, w, h),
                Bbox.from_bounds(px - w / 2, own[i].y1 + 1, w, h),
                Bbox.from_bounds(px - w / 2, own[i].y0 - 1 - h, w, h))

    def clear(column: dict) -> bool:                          # no line through a marker it does not start in
        return not any(crosses(m, pts[j], (b.x0, (b.y0 + b.y1) / 2)) for j, b in column.items()
                       for m in marks if not m.contains(*pts[j]))
    spots, rest, flipped = {}, [], set()
    for i in sorted(range(len(names)), key=lambda i: (-pts[i][1], pts[i][0])):
        box = next((b for b in sides(i) if free(b) and apart(b, marks, i, sizes[i][1] / 2)), None) \
            or next((b for b in sides(i) if free(b)), None)           # a free place near no other point first
        if box is None:
            rest.append(i)
        else:
            spots[i] = box
            taken.append(box)
    while rest:     # a name beside its point that a column's line would cross: to its other side once, else in
        column = label_column(rest, [sizes[i] for i in rest], [pts[i] for i in rest], frame, free, 3 * r, clear)
        if column is None and widen > 0 and room_right(ax, *column_room(rest, pts, sizes, spots, 3 * r), frame):
            return place_labels(ax, names, xs, ys, errs, fontsize, widen - 1)
        column = column or label_column(rest, [sizes[i] for i in rest], [pts[i] for i in rest], frame, free, 3 * r,
                                        overlap=True)
        lines = [(pts[j], (b.x0, (b.y0 + b.y1) / 2)) for j, b in column.items()]
        crossed = [i for i in spots if any(crosses(spots[i], a, b) for a, b in lines)]
        if not crossed:
            spots.update(column)
            break
        for i in crossed:
            taken.remove(box := spots.pop(i))
            other = next((b for b in sides(i) if tuple(b.p0) != tuple(box.p0) and free(b)
                          and not any(crosses(b, a, c) for a, c in lines)), None)
            if i not in flipped and other is not None:
                spots[i] = other
                taken.append(other)
                flipped.add(i)
            else:
                rest.append(i)
        rest.sort(key=lambda i: (-pts[i][1], pts[i][0]))
    inv, texts = ax.transData.inverted(), []
    for i, box in sorted(spots.items()):
        at = tuple(inv.transform((box.x0, (box.y0 + box.y1) / 2)))
        texts.append(ax.annotate(names[i], (xs[i], ys[i]), xytext=at, fontsize=fontsize, va="center",
                                 arrowprops={"arrowstyle": "-", "lw": 0.4, "color": "0.5", "shrinkA": 0,
                                             "shrinkB": 2} if i in rest else None))
    return texts


def apart(box, marks: list, own: int, pad: float) -> bool:
    """Whether box keeps `pad` pixels from every marker but its own point's (marks[own]): a name written just
    above another point reads as that point's."""
    from matplotlib.transforms import Bbox
    wide = Bbox.from_extents(box.x0 - pad, box.y0 - pad, box.x1 + pad, box.y1 + pad)
    return not any(wide.overlaps(m) for k, m in enumerate(marks) if k != own)


def text_sizes(ax, names: list[str], fontsize: float, renderer) -> list[tuple[float, float]]:
    """The width and height (pixels) each name takes written in ax at fontsize."""
    sizes = []
    for name in names:
        box = ax.text(0, 0, name, fontsize=fontsize)
        extent = box.get_window_extent(renderer)
        sizes.append((extent.width, extent.height))
        box.remove()
    return sizes


def crosses(box, a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Whether the segment from a to b (pixels) passes through box, edges included: the segment clipped to the box
    (Liang and Barsky) is not empty."""
    (x0, y0), (dx, dy) = a, (b[0] - a[0], b[1] - a[1])
    lo, hi = 0.0, 1.0
    for step, room in ((-dx, x0 - box.x0), (dx, box.x1 - x0), (-dy, y0 - box.y0), (dy, box.y1 - y0)):
        if step == 0:
            if room < 0:
                return False                   # parallel to this edge and outside it
        elif step < 0:
            lo = max(lo, room / step)
        else:
            hi = min(hi, room / step)
    return lo <= hi


def label_column(rest: list[int], sizes: list[tuple[float, float]], pts: list[tuple[float, float]], frame, free,
                 lead: float, clear=None, overlap: bool = False) -> dict | None:
    """Boxes (pixels) for the names `rest` in one column: at the first x, from `lead` right of their rightmost point
    on, where every name of the column is free (`free`) at its stacked height (label_stack) and the column is
    `clear` (its lines run through no other marker), else the first x where every name is free; where no x is,
    None, or with `overlap` the first x with its names' overlaps allowed."""
    from matplotlib.transforms import Bbox
    h, w = max(s[1] for s in sizes), max(s[0] for s in sizes)
    heights = label_stack([p[1] for p in pts], h, frame.y0 + h / 2, frame.y1 - h / 2)
    start = max(p[0] for p in pts) + lead
    column = lambda x: {i: Bbox.from_bounds(x, y - h / 2, sz[0], h)  # noqa: E731
                        for i, y, sz in zip(rest, heights, sizes)}
    first = None
    for k in range(int(max(0.0, frame.x1 - w - start) * 3 / lead) + 1):   # the first free x that is clear ends it
        boxes = column(start + k * lead / 3)
        if all(free(b) for b in boxes.values()):
            if clear is None or clear(boxes):
                return boxes
            first = first or boxes
    if first is not None:
        return first
    return column(min(start, frame.x1 - w)) if overlap else None


def column_room(rest: list[int], pts: list, sizes: list, spots: dict, lead: float) -> tuple[float, float]:
    """The rightmost of the points `rest` (pixel x) and the pixels a column of their names needs right of it: its
    lead, past any name already written that reaches right of that point in the column's band of heights, and its
    width."""
    edge, h = max(pts[i][0] for i in rest), max(sizes[i][1] for i in rest)
    low, high = min(pts[i][1] for i in rest) - (len(rest) + 1) * h, max(pts[i][1] for i in rest) + h
    reach = max([edge + lead] + [b.x1 + 2 for b in spots.values() if b.x1 > edge and b.y1 > low and b.y0 < high])
    return edge, reach - edge + max(sizes[i][0] for i in rest) + 2


def room_right(ax, rightmost: float, need: float, frame) -> bool:
    """Move the x axis's right limit out so that `need` pixels fit between the point at pixel x `rightmost` and the
    axes' right edge, the axes' width unchanged: on the scale's own coordinate (log10 on a log axis) the point's
    share of the axis shrinks from (t - a) / (b - a) to (W - need) / W. False where it cannot (an inverted axis,
    or `need` wider than the axes)."""
    lo, hi = ax.get_xlim()
    if hi <= lo or need >= frame.width:
        return False
    scale = ax.xaxis.get_transform()                        # data -> the scale's coordinate, linear in pixels
    a, b = scale.transform([lo, hi])
    t = a + (rightmost - frame.x0) / frame.width * (b - a)
    right = a + (t - a) * frame.width / (frame.width - need)
    if right <= b:
        return False
    ax.set_xlim(lo, float(scale.inverted().transform([right])[0]))
    return True


def label_stack(ys: list[float], gap: float, floor: float, ceiling: float) -> list[float]:
    """Heights (pixels, up) for a column of labels whose points are at `ys`, sorted high to low: each at its
    point's height or `gap` below the label above it, the column moved up as a whole where it would run below
    `floor`, but never above `ceiling`."""
    heights, y = [], float("inf")
    for v in ys:
        y = min(v, ceiling, y - gap)
        heights.append(y)
    lift = max(0.0, floor - heights[-1])
    return [min(y + lift, ceiling - i * gap) for i, y in enumerate(heights)]
