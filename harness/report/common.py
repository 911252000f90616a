"""MLflow -> pandas -> reports/<study>.md and .csv, plots, and reports/README.md (an index).

Reads only what the study runner logged (through harness.tracking, the one module that imports mlflow):
the latest invocation of a study, one line per row, seeds averaged. Where the study's table is in
harness/paper/tables.yaml (Table 3), the paper's values are printed beside ours, and both are also given as
deltas against the base row: at tiny scale on the made-up corpus only the direction and relative size of
each knob's effect can be compared with the paper, never the absolute numbers. Each table's layout is a module of
this package (table1 ... table4); this one holds what they share.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Iterable

import matplotlib as mpl
import pandas as pd

# The object-oriented API, not pyplot: no global backend switch and no figure registry to leak; a bare
# Figure renders with the Agg canvas.
from matplotlib.figure import Figure
from matplotlib.ticker import (
    FuncFormatter,
    LogFormatter,
    LogFormatterSciNotation,
    LogLocator,
    MaxNLocator,
    NullFormatter,
    NullLocator,
    ScalarFormatter,
)

from harness import tracking
from harness.errors import UserError
from harness.io import atomic_write, atomic_writer
from harness.measure.registry import SectionContext, by_section_rank
from harness.metrics import claim_metrics, ending_step, ending_words, run_ending
from harness.report import claims, slices
from harness.report.registration import ROOT as _REGISTRATION_ROOT
from harness.report.registration import late_profile_changes, registration

# Our metric name -> the final metric logged by the trial.
# The dev figures every rows table shows, by their claims.yaml keys (harness/metrics.py)
METRICS = {key: claim_metrics()[key][0] for key in ("ppl", "bleu", "bleu_tok")}
# Params that differ between seeds, never between rows: not a row's "change" against the base.
_PER_SEED = {"train.seed", "data.seed"}
_PROVENANCE = "**Provenance:**"   # the line the index copies from each report


# ------------------------------------------------------------------------------------------ reading

def load_results(study: str, uri: str | None = None, profile: str | None = None, variant: str = "") -> dict:
    """The latest invocation of `study` (of name `variant`, `run --name`) as tracking.study_results gives
    it; a UserError when absent."""
    uri = uri or tracking.tracking_uri()
    tracking.require_store(uri)
    try:
        results = tracking.study_results(uri, study, profile, variant)
    except UserError:
        raise
    except Exception as err:  # an unreachable server, an unreadable file: one sentence, not a stack
        raise UserError(f"cannot read the MLflow tracking store {uri} ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:200] if str(err) else ''}); start it or point "
                        "MLFLOW_TRACKING_URI elsewhere.") from None
    which = (f"study {study}" + (f" with profile {profile}" if profile else "")
             + (f" named {variant}" if variant else ""))
    if results is None and tracking.is_record(uri):
        rec = tracking.record_of(uri)
        raise UserError(f"no runs of {which} in the record {rec.path}: it holds study {rec.study} with profile "
                        f"{rec.profile}{f' named {rec.variant}' if rec.variant else ''}.")
    if results is None:
        raise UserError(f"no runs of {which} in {uri}; run `python -m harness run studies/{study}.yaml"
                        f"{f' --profile {profile}' if profile else ''}{f' --name {variant}' if variant else ''}` "
                        "first.")
    if results["runs"].empty:
        raise UserError(f"the latest run of {which} (MLflow run {results['parent']['run_id']}) has no trials "
                        "yet; let it run or resume it with `python -m harness run ... --resume`.")
    if variant:          # the trials carry no name of their own: plot_title reads it here
        results["runs"] = results["runs"].assign(**{f"tags.{tracking.VARIANT_TAG}": variant})
    return results


def declared_table(parent: dict) -> str:
    """The table the study file's `table:` names, as its parent run keeps it (a tag; a param in older stores),
    or ""."""
    return parent["tags"].get("table") or parent["params"].get("table") or ""


def table_name(parent: dict, study: str) -> str:
    """The paper table a study reproduces: its declared table, else its name."""
    return declared_table(parent) or study


def column(df: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column (params come back as strings); all-NaN when the runs never logged it."""
    if name not in df:
        return pd.Series(float("nan"), index=df.index)
    return pd.to_numeric(df[name], errors="coerce")


def row_order(runs: pd.DataFrame, paper_rows: Iterable[str] = (), declared: Iterable[str] = ()) -> list[str]:
    """The paper's row order, then the study file's (the parent's `rows` param), then first appearance."""
    seen = runs.sort_values("start_time", kind="stable")["tags.row"].astype(str).drop_duplicates().tolist()
    paper, declared = list(paper_rows), list(declared)
    big = len(paper) + len(declared) + len(seen)
    return sorted(seen, key=lambda r: (paper.index(r) if r in paper else big,
                                       declared.index(r) if r in declared else big, seen.index(r)))


def row_groups(runs: pd.DataFrame, order: Iterable[str]):
    """Per row, in `order`: (row, its runs, the FINISHED ones, the row's status, its failure reasons joined).
    Status: FINISHED (every seed), PARTIAL (some), FAILED (none finished, one failed), else the run's status."""
    names = runs["tags.row"].astype(str)
    for row in order:
        g = runs[names == row]
        done = g[g["status"] == "FINISHED"]
        status = ("FINISHED" if len(done) == len(g) else "PARTIAL" if len(done)
                  else "FAILED" if (g["status"] == "FAILED").any() else str(g["status"].iloc[0]))
        reasons = g["tags.failure_reason"].dropna().astype(str) if "tags.failure_reason" in g else []
        reason = " | ".join(dict.fromkeys(r.strip()[:300] for r in reasons if r.strip()))
        yield row, g, done, status, reason


def synthetic_data(runs: pd.DataFrame) -> bool:
    """Whether any trial trained on the made-up corpus (data.name synth) rather than real data."""
    return "params.data.name" in runs and bool((runs["params.data.name"] == "synth").any())


def declared_rows(parent: dict) -> list[str]:
    """The rows in the study file's order (the parent's `rows` param)."""
    return [r for r in str(parent["params"].get("rows", "")).split(",") if r]


# ------------------------------------------------------------------------------------------ writing

def save_png(fig: Figure, path: Path) -> Path:
    with atomic_writer(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    return path


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


def num(x, fmt: str = "{:.2f}") -> str:
    return "–" if pd.isna(x) else fmt.format(x)


def finished(runs: pd.DataFrame, row: str) -> pd.DataFrame:
    """The row's FINISHED runs."""
    return runs[(runs["tags.row"].astype(str) == row) & (runs["status"] == "FINISHED")]


def bracket_cell(values, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """The mean of `values` over seeds and its 95 % t-interval, `mean [low, high]`, each times `scale` in `fmt`;
    the mean alone from one value, – from none (interval_cell gives mean ± half-width instead)."""
    mean, low, high, n = claims.interval(values)
    if not n:
        return "–"
    f = lambda x: fmt.format(scale * x)  # noqa: E731
    return f(mean) if n < 2 else f"{f(mean)} [{f(low)}, {f(high)}]"


def interval_cell(values, fmt: str = "{:.2f}") -> str:
    """The mean of `values` over seeds ± the half-width of its 95 % t-interval, each in `fmt`; the mean alone
    from one value, – from none."""
    mean, low, high, n = claims.interval(values)
    if not n:
        return "–"
    # the half-width in the same digits, never signed ("+0.158 ± 0.258", not "± +0.258")
    return fmt.format(mean) if n < 2 else f"{fmt.format(mean)} ± {fmt.replace('+', '').format((high - low) / 2)}"


def half_width(values) -> float:
    """The half-width of the 95 % t-interval of the mean of `values` over seeds; NaN for fewer than two."""
    mean, low, _, n = claims.interval(values)
    return mean - low if n >= 2 else float("nan")


def pm(mean, spread) -> str:
    """mean ± spread (a std or a 95 % half-width, as the table's caption says); the mean alone without one."""
    return num(mean) if pd.isna(spread) else f"{mean:.2f} ± {spread:.2f}"


def signed_pm(mean, half) -> str:
    return signed(mean) if pd.isna(half) else f"{mean:+.2f} ± {half:.2f}"


def signed(x) -> str:
    return num(x, "{:+.2f}")


def provenance_line(parent: dict) -> str:
    tags = parent["tags"]
    dirty = " (dirty)" if str(tags.get("git_dirty", "")).lower() in ("true", "1", "yes") else ""
    return (f"{_PROVENANCE} `{tags.get('command', '?')}` · commit `{tags.get('git_sha', '?')}`{dirty} · "
            f"profile `{tags.get('profile', '?')}` · {tags.get('hardware', '?')} · {tags.get('started', '?')}")


def _resumed_elsewhere(tags: dict) -> list[str]:
    """A line where the study's latest --resume ran at another commit or on other hardware than its first
    invocation (whose commit and hardware the provenance line names); nothing otherwise."""
    sha, hw = tags.get("git_sha_last"), tags.get("hardware_last")
    if (sha is None or sha == tags.get("git_sha")) and (hw is None or hw == tags.get("hardware")):
        return []
    return [f"- its latest --resume ran at commit `{sha or '?'}` (uncommitted changes: "
            f"{tags.get('git_dirty_last', '?')}) on {hw or '?'}; the trials' own commits decide each claim's "
            "registration"]


def _versions_line(tags: dict, runs: pd.DataFrame) -> list[str]:
    """The libraries the study ran with (the parent's version.* tags) and the hardware its trials trained on
    (each child's own hardware tag: on a cluster it is the worker's); nothing for a store written before
    these tags existed."""
    named = [(k[len("version."):], v) for k, v in sorted(tags.items()) if k.startswith("version.")]
    # a trial resumed on another machine trained on both (`hardware_last`: its latest attempt's)
    devices = sorted(set().union(*(set(runs[c].dropna()) for c in ("tags.hardware", "tags.hardware_last")
                                   if c in runs)))
    if not named and not devices:
        return []
    line = "- versions: " + ", ".join(f"{name} {v}" for name, v in named) if named else "- versions: ?"
    return [line + (f"; trials trained on {', '.join(devices)}" if devices else "")]


def ours_caption(results: dict) -> str:
    """What ran, beside the paper's caption: the profile, the corpus, how rows were trained and scored."""
    runs, tags = results["runs"], results["parent"]["tags"]
    corpora = sorted({str(v) for v in runs.get("params.data.name", pd.Series(dtype=object)).dropna()})
    corpus = ", ".join("the made-up corpus" if c == "synth" else f"`{c}`" for c in corpora) or "?"
    averaged = sorted({int(v) for v in column(runs, "params.train.average_last").dropna() if v > 1})
    patience = sorted({int(v) for v in column(runs, "params.train.patience").dropna() if v > 0})
    scored = f"the mean of the last {' or '.join(map(str, averaged))} checkpoints" if averaged else \
        "no checkpoint averaging"
    trained = "trained until dev stopped improving" if patience else "a fixed number of steps"
    return f"profile `{tags.get('profile', '?')}`, {corpus}, {trained}, {scored}"


def _caption_note(results: dict) -> list[str]:
    """Below a paper's caption: what ran instead. A study that trains: its profile, corpus, training and scoring;
    a probe study (Table 1's timings): its profile and the machine its layers were measured on."""
    if results["runs"].empty:
        return ["The title is the paper's caption.", ""]
    if "params.data.name" not in results["runs"]:
        tags = results["parent"]["tags"]
        return [f"The title is the paper's caption. Ours: profile `{tags.get('profile', '?')}`, each row's layer "
                f"measured (counted, timed, its paths traced) on {tags.get('hardware', 'this machine')}, not "
                "derived.", ""]
    return [f"The title is the paper's caption. Ours: {ours_caption(results)}.", ""]


def header_lines(study: str, results: dict, caption: str | None = None, paper_caption: bool = True) -> list[str]:
    """The lines every report opens with: title (with the paper's caption), the do-not-edit note, the
    provenance line the index copies, then command, commit, profile, hardware, MLflow parent run, wall
    time and overhead share (and the sacreBLEU signature where BLEU was scored); ends with a blank line."""
    parent, runs = results["parent"], results["runs"]
    tags, metrics = parent["tags"], parent.get("metrics", {})
    wall, share = metrics.get("wall_seconds"), metrics.get("overhead_share")
    total = parent.get("study_wall_seconds")         # over every invocation (a study resumed across sessions)
    cpu = (runs["metrics.cpu_seconds"].sum()
           if "metrics.cpu_seconds" in runs and runs["metrics.cpu_seconds"].notna().any() else None)
    signatures = sorted(set(runs["tags.sacrebleu_signature"].dropna())) if "tags.sacrebleu_signature" in runs else []
    # the last invocation's; wall_seconds is logged when an invocation ends, so only a closed one pairs them
    closed = parent.get("status") in ("FINISHED", "FAILED")
    prep = f"data preparation {metrics['prepare_seconds']:.0f} s" if closed and metrics.get("prepare_seconds") else ""
    opening = [f"# {study}" + (f": {caption}" if caption else ""), "",
               *(_caption_note(results) if caption and paper_caption else []),
               "Generated from MLflow by `python -m harness report`; regenerate it, do not edit it.", ""]
    assembled = slices.slices_of(parent)
    if assembled is not None:          # slices of the study (`run --slices`), assembled: every slice's provenance
        lines = opening + slices.header(study, parent, runs, assembled) + _versions_line(tags, runs)
        return _closing_lines(lines, parent, runs, cpu, signatures)
    lines = [*opening,
             provenance_line(parent), "",
             f"- command: `{tags.get('command', '?')}`" + (
                 f"; its latest --resume: `{tags['command_last']}`"
                 if tags.get("command_last") and tags["command_last"] != tags.get("command") else ""),
             f"- git SHA: `{tags.get('git_sha', '?')}`, uncommitted changes: {tags.get('git_dirty', '?')}",
             *_resumed_elsewhere(tags),
             f"- study version {tags.get('version', '?')}, profile `{tags.get('profile', '?')}`, "
             f"hardware: {tags.get('hardware', '?')}, started {tags.get('started', '?')}",
             *_versions_line(tags, runs),
             f"- MLflow parent run `{parent['run_id']}` (experiment `{study}`, status {parent['status']}), "
             + (f"{tags.get('n_trials', len(runs))} trials, {tags.get('n_failed', '?')} failed"
                if parent.get("status") not in ("RUNNING", "KILLED") else
                f"{len(runs)} trials started so far, {int((runs['status'] == 'FAILED').sum())} failed (the "
                "invocation has not finished)"),
             f"- wall time {num(wall, '{:.0f}')} s{f' ({prep})' if prep else ''}, Ray + MLflow overhead share "
             f"{num(None if share is None else 100 * share, '{:.1f}')} %"]
    if total is not None and (wall is None or total > wall + 1):
        lines[-1] = (f"- wall time {total / 3600:.2f} h over {int(tags.get('resume_count', '0')) + 1} invocations "
                     f"(the last {num(wall, '{:.0f}')} s{f', of it {prep}' if prep else ''}), "
                     "Ray + MLflow overhead share of the last "
                     f"{num(None if share is None else 100 * share, '{:.1f}')} %")
    return _closing_lines(lines, parent, runs, cpu, signatures)


def _closing_lines(lines: list[str], parent: dict, runs: pd.DataFrame, cpu: float | None,
                   signatures: list[str]) -> list[str]:
    """The header's last lines, one invocation's or an assembly's: CPU-hours, the stopping rule, the sacreBLEU
    signature, then the departures from the paper."""
    if cpu is not None:
        lines.append(f"- CPU time of the trials: {cpu / 3600:.2f} CPU-hours (each trial's wall time, across its "
                     "interruptions, times its threads)")
    lines += stopping_summary(runs)
    if signatures:
        lines.append(f"- sacreBLEU signature: `{'`, `'.join(signatures)}`")
    lines.append("")
    return lines + departure_lines(parent["tags"], parent["params"].get("rows", ""))


def _value(v) -> str:
    return "–" if v is None else json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else \
        f"{v:g}" if isinstance(v, float) else str(v)


def is_measurement_setting(key: str) -> bool:
    """Whether a departure's key is a measurement's setting (what a row measures, not what it trains)."""
    from harness.measure.registry import setting_keys
    return key.startswith("train.") and key[len("train."):] in setting_keys()


def departure_lines(tags: dict, rows: str) -> list[str]:
    """The profile's departures from the paper, as the runner computed them from the study file (the parent's
    `departures` tag: each setting where a row differs from the same row in the `paper` profile)."""
    if "departures" not in tags:
        return []
    try:
        items = json.loads(tags["departures"])
    except ValueError:
        return ["## Departures from the paper", "", "(the list was too long for its MLflow tag and is cut)", ""]
    if not items:
        return ["## Departures from the paper", "", "None: every row runs with the paper profile's settings.", ""]
    every = set(filter(None, rows.split(",")))
    lines = ["## Departures from the paper", "",
             "Generated from the study file: every setting where a row of this profile differs from the same row in "
             "the study's `paper` profile (– : a setting of the made-up corpus, which the paper's WMT data does not "
             "have). Why each was chosen: the profile's comments in the study file and docs/calibration.md.", ""]
    for d in items:
        if "key" in d and is_measurement_setting(d["key"]):     # a measurement (a run stored before they were left out)
            continue
        if "note" in d:           # a departure no setting shows (the profile's departure_notes)
            lines.append(f"- not a setting: {d['note']}")
            continue
        whole = len(d["values"]) == 1 and every and set(d["values"][0]["rows"]) >= every    # the same for every row
        parts = [f"{_value(v['ours'])} (paper {_value(v['paper'])})" + ("" if whole else f" in {', '.join(v['rows'])}")
                 for v in d["values"]]
        lines.append(f"- `{d['key']}`: {'; '.join(parts)}")
    return lines + [""]


# ------------------------------------------------------------------------------------------ claims

def row_diagnostics(runs: pd.DataFrame, uri: str) -> dict[str, dict]:
    """Per row, from its finished seeds: final dev PPL (mean), and how much its dev PPL still fell over the
    last quarter of its steps (from the dev PPL logged every eval_every steps), as a fraction and the steps.
    Where the final score is of averaged checkpoints, the curve ends in the last weights' own dev PPL
    (dev_ppl_last): convergence is a question about the weights training reached, not about their average."""
    out: dict[str, dict] = {}
    done = runs[runs["status"] == "FINISHED"]
    for row, g in done.groupby(done["tags.row"].astype(str)):
        finals, drops, span, rose = [], [], None, []
        live_of = dict(zip(g["run_id"], g["metrics.dev_ppl_last"])) if "metrics.dev_ppl_last" in g else {}
        for run in g.itertuples(index=False):
            hist = sorted(tracking.metric_history(uri, run.run_id, "dev_ppl"))
            if not hist:
                continue
            last_step, last = hist[-1]
            finals.append(last)
            live = live_of.get(run.run_id)
            if live is not None and pd.notna(live):   # averaged: the curve of the trained weights ends in theirs
                hist[-1] = (last_step, float(live))
                last = float(live)
            rose.append(last > min(v for _, v in hist) * 1.02)     # over-fitting: dev PPL up from its best
            later = [(s, v) for s, v in hist if s >= 0.75 * last_step and s < last_step]
            if later and last_step > 0:
                drops.append(1 - last / later[0][1])
                span = (later[0][0], last_step)
        out[row] = {"ppl": sum(finals) / len(finals) if finals else float("nan"),
                    "drop": sum(drops) / len(drops) if drops else float("nan"), "span": span,
                    "rose": sum(rose), "seeds": len(rose), "rule": _rule_outcomes(g), "diverged": diverged_seeds(g)}
    return out


def diverged_seeds(g: pd.DataFrame) -> tuple[int, int]:
    """(seeds that diverged under train.stop_diverged, seeds that trained with it) of a row's finished runs."""
    flags = pd.to_numeric(g.get("metrics.diverged", pd.Series(dtype=float)), errors="coerce").dropna()
    return int((flags == 1).sum()), len(flags)


def all_diverged(counts: tuple[int, int]) -> bool:
    """diverged_seeds' counts say every seed that trained with train.stop_diverged diverged (and some did)."""
    return counts[1] > 0 and counts[0] == counts[1]


def _final_metrics(r: pd.Series) -> dict:
    """A run's final metrics from its row of an MLflow runs table, by metric name (NaN where not logged)."""
    return {k[len("metrics."):]: v for k, v in r.items() if str(k).startswith("metrics.")}


def _rule_outcomes(g: pd.DataFrame) -> list[tuple[str, int, int]]:
    """Each finished seed's end under the patience rule (harness/train/patience.py), in seed order: (metrics.run_ending,
    the step it stopped at, or diverged at, its best step, the seed); [] where the rule was off."""
    if "metrics.stopped_by_rule" not in g:
        return []
    out = []
    order = pd.to_numeric(g["tags.seed"], errors="coerce") if "tags.seed" in g else pd.Series(0, index=g.index)
    for i, r in g.loc[order.sort_values(kind="stable").index].iterrows():
        m = _final_metrics(r)
        if pd.isna(m.get("stopped_by_rule")):
            continue                                                # the rule off in this seed
        how, last, seed = run_ending(m), m.get("steps"), order[i]
        stop = ending_step(m, how, 0 if last is None or pd.isna(last) else int(last))
        out.append((how, stop, int(m.get("best_step", 0) or 0), None if pd.isna(seed) else int(seed)))
    return out


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def stopping_summary(runs: pd.DataFrame) -> list[str]:
    """The provenance line of a study under the patience rule ([]: no finished trial trained under it): of the
    finished trials that did, how many the rule stopped (the share rounded down, so 89.96 % never reads as 90), how
    many hit the step budget, diverged or stopped otherwise (train.max_minutes), and of the rows how many it stopped
    in every finished seed (a diverged seed is one it did not stop)."""
    if "metrics.stopped_by_rule" not in runs:
        return []
    done = runs[(runs["status"] == "FINISHED") & runs["metrics.stopped_by_rule"].notna()]
    if done.empty:
        return []
    ends = pd.Series([run_ending(_final_metrics(r)) for _, r in done.iterrows()], index=done.index, dtype=object)
    rule, budget, diverged = ends == "rule", ends == "budget", ends == "diverged"
    other = int((ends == "time limit").sum())
    rows = rule.groupby(done["tags.row"].astype(str)).all()
    share = math.floor(1000 * rule.sum() / len(done)) / 10
    tail = [f"{int(budget.sum())} hit the step budget",
            *([f"{int(diverged.sum())} diverged"] if diverged.any() else []),
            *([f"{other} stopped otherwise (a time limit)"] if other else [])]
    return [f"- the patience rule stopped {int(rule.sum())} of the {_count(len(done), 'finished trial')} that trained "
            f"under it ({share:g} %); {', '.join(tail)}; it stopped every seed of {int(rows.sum())} of "
            f"{_count(len(rows), 'row')}"]


def stopping_notes(runs: pd.DataFrame) -> dict[str, str]:
    """Each row's `stopping_note` from its finished runs' final metrics alone (no curves read)."""
    done = runs[runs["status"] == "FINISHED"]
    diag = {row: {"rule": _rule_outcomes(g)} for row, g in done.groupby(done["tags.row"].astype(str))}
    return {row: stopping_note(row, diag) for row in diag}


def stopping_note(row: str, diag: dict[str, dict]) -> str:
    """How the row's seeds ended under the patience rule: "stopped by the rule at step S (best B)" for each, or
    "hit the budget of S steps while improving" (best at the last evaluation) or "... best at B", or stopped by
    its time limit ("": rule off)."""
    ends = diag.get(row, {}).get("rule") or []
    if not ends:
        return ""
    parts = [ending_words(how, stop, best) for how, stop, best, _ in ends]
    if len(set(how for how, _, _, _ in ends)) == 1 and len(ends) > 1:
        how = ends[0][0]
        steps = "/".join(str(s) for _, s, _, _ in ends)
        bests = "/".join(str(b) for _, _, b, _ in ends)
        return (f"stopped by the rule in every seed, at steps {steps} (best {bests})" if how == "rule" else
                f"stopped by its time limit in every seed, at steps {steps} (best {bests})" if how == "time limit" else
                f"diverged in every seed, at steps {steps}" if how == "diverged" else
                f"hit the budget in every seed ({steps} steps; best {bests})")
    seeds = [i if seed is None else seed for i, (_, _, _, seed) in enumerate(ends)]
    return "; ".join(f"seed {n}: {p}" for n, p in zip(seeds, parts)) if len(parts) > 1 else parts[0]


def _claim_value(metric: str, x: float) -> str:
    if pd.isna(x):
        return "–"
    if metric.endswith("nll"):                                     # nll, test_nll, long_nll: ln PPL
        return f"PPL {math.exp(x):.2f}"
    if metric.endswith("log_ms"):                                  # ln milliseconds
        return f"{math.exp(x):.2f} ms"
    if metric.endswith("_fade"):                                   # a share's fall, in percentage points
        return f"fade {100 * x:+.1f} points"
    if metric in ("seq_ops", "path"):                              # counts as counts
        return f"{x:g}"
    return f"{x:.2f}" if x == 0 or 0.01 <= abs(x) < 1e6 else f"{x:.3g}"   # a residual's 3.1e-15 as such


def regime_note(row: str, diag: dict[str, dict]) -> str:
    """Where a row stood when training stopped, from its dev PPL curve: on the plateau, still improving; under
    the patience rule, how each seed ended (`stopping_note`) instead of the curve's last quarter."""
    d, base = diag.get(row, {}), diag.get("base", {}).get("ppl", float("nan"))
    ppl, drop = d.get("ppl", float("nan")), d.get("drop", float("nan"))
    gone, of = d.get("diverged", (0, 0))
    if gone:                         # scored as its start: its curve says nothing of where training stood
        return f"stopped as diverged in {gone} of {of} seeds (scored as its dev PPL at the start)"
    if pd.notna(ppl) and pd.notna(base) and row != "base" and ppl > 2.5 * base:
        return f"near the plateau: dev PPL {ppl:.2f}, {ppl / base:.1f}x the base's"
    if d.get("rule"):
        return stopping_note(row, diag)
    if pd.notna(drop) and drop > 0.10 and d.get("span"):
        return f"still improving: dev PPL -{100 * drop:.0f} % from step {d['span'][0]} to {d['span'][1]}"
    return ""


def row_departures(tags: dict) -> dict[str, dict[str, tuple]]:
    """The parent's `departures` tag as {setting: {row: (ours, paper)}} (rows that keep the paper's value
    are absent)."""
    try:
        items = json.loads(tags.get("departures", "[]"))
    except ValueError:
        return {}
    return {d["key"]: {row: (v["ours"], v["paper"]) for v in d["values"] for row in v["rows"]} for d in items
            if "key" in d and not is_measurement_setting(d["key"])}      # a departure_notes line is no setting of a row


def _departs_unlike(x: tuple | None, y: tuple | None) -> bool:
    """Whether two rows stand to each other otherwise than in the paper on one setting: x and y are each
    row's (ours, paper), None where the row keeps the paper's value. Numbers scaled by the same factor (widths
    / 8, big's steps 3x the base's) keep their relation; a value changed for one row and not the other does not."""
    if x is None or y is None:
        return (x is None) != (y is None)
    (o1, p1), (o2, p2) = x, y
    nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (o1, p1, o2, p2))
    if nums and p1 and p2:
        return not math.isclose(o1 / p1, o2 / p2, rel_tol=1e-6)
    return (o1 == o2) != (p1 == p2)


def claim_departures(rows: list[str], deps: dict[str, dict[str, tuple]], with_base: bool = True) -> list[str]:
    """The departures a comparison of `rows` rests on: settings on which the claim's rows (or either of them
    and the base) stand to each other otherwise than in the paper, e.g. the tiny profile's D rows trained on
    2,000 pairs against the base's 20,000, or a big row given the base's steps where the paper gives it 3x.
    `with_base`: the study has a row named base."""
    shown = list(dict.fromkeys([*rows, *(["base"] if with_base else [])]))
    pairs = [(r, q) for i, r in enumerate(shown) for q in shown[i + 1:]]     # each with a row of the claim
    out = []
    for key, by_row in deps.items():
        if any(_departs_unlike(by_row.get(r), by_row.get(q)) for r, q in pairs):
            cells = [f"{r} {_value(by_row[r][0])} (paper {_value(by_row[r][1])})" if r in by_row
                     else f"{r} as the paper"
                     for r in shown]
            out.append(f"`{key}`: {', '.join(cells)}")
    return out


def _num3(x: float) -> str:
    """A claim figure in three significant digits, whatever its scale (an exponent's 0.12, a residual's 3.1e-15)."""
    return "–" if x is None or pd.isna(x) else f"{x:.3g}"


def _diverged_why(c: dict, diag: dict[str, dict]) -> str:
    """For a claim read off several rows (a gap between gaps): which of them diverged in every seed, and what the
    figure then measures ("" where none did)."""
    claim = c.get("claim")
    rows = [r for side in (getattr(claim, "a", None), getattr(claim, "b", None))
            for r in ([side] if isinstance(side, str) else side or [])]
    gone = [r for r in dict.fromkeys(rows) if all_diverged(diag.get(r, {}).get("diverged", (0, 0)))]
    if not gone:
        return ""
    return (f"; {' and '.join(gone)} stopped as diverged in every seed and {'is' if len(gone) == 1 else 'are'} "
            "scored as the start: a gap with a diverged row measures how far the other row trained from that "
            "start, not how far the diverged row fell behind")


def _measured_why(c: dict) -> str:
    """_claim_why for the claims that are not a comparison of two rows: a threshold, a gap between gaps, time to
    quality, a measurement against the formula."""
    if c["expect"] == "above":
        if c["n"] < 2:
            return f"{c['n']} seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)"
        side = {"holds": "lies above 0", "contradicted": "lies below 0", "inconclusive": "spans 0"}[c["verdict"]]
        return (f"{c['a_row']} measured {c['a_mean']:.3g} against the target {c['b_mean']:g} fixed before the runs; "
                f"the interval [{c['low']:+.3g}, {c['high']:+.3g}] of value − target {side}")
    if c["expect"] == "gap_grows":
        if c["n"] < 2:
            return f"{c['n']} seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)"
        side = {"holds": "lies above 0: the gap grew", "contradicted": "lies below 0: the gap shrank",
                "inconclusive": "spans 0"}[c["verdict"]]
        return (f"the gap {c['a']} was {c['a_mean']:+.3f} and {c['b']} {c['b_mean']:+.3f}; the interval "
                f"[{c['low']:+.3f}, {c['high']:+.3f}] of their difference {side}")
    if c["expect"] == "sooner":
        each = "; ".join(
            f"{p['row']} {p['metric'].split('_to_')[0]}: ratio {_num3(p['diff'])}"
            + ("" if pd.isna(p["low"]) else f" [{_num3(p['low'])}, {_num3(p['high'])}]")
            + (f", never reached in {p['never']} of {p['n']} seeds" if p["never"] else "")
            + f" ({p['verdict']})" for p in c["parts"])
        rule = {"holds": "every ratio's interval lies below 1",
                "contradicted": f"{c['a_row']} needed more than a rival, or never reached its best",
                "inconclusive": "not every ratio's interval lies below 1 (one seed gives none)",
                "not run": ""}[c["verdict"]]
        return (f"{c['a_row']}'s training to reach each rival's best dev BLEU over the rival's own: {each}; {rule}")
    if c["expect"] == "value":
        if c.get("parts"):       # several rows or metrics: each part's deviation, then the verdict's reason
            each = "; ".join(f"{p['row']} {p['metric']} {_num3(p['diff'])}"
                             + ("" if pd.isna(p["low"]) else f" [{_num3(p['low'])}, {_num3(p['high'])}]")
                             + f" ({p['verdict']})" for p in c["parts"])
            rule = {"holds": f"every part within ±{c['margin']:g}",
                    "contradicted": f"a part outside ±{c['margin']:g}",
                    "inconclusive": "no part outside the tolerance, but not every part inside it"}[c["verdict"]]
            return f"measured − target: {each}; {rule}"
        off = f"{c['a_row']} measured {_num3(c['a_mean'])}, {_num3(abs(c['diff']))} from {c['b_mean']:g}"
        if c["verdict"] == "holds":
            return f"{off}: within ±{c['margin']:g}"
        return (f"{off}: outside ±{c['margin']:g}; the row's notes in the table above say where its fit parts "
                "from the formula" if c["verdict"] == "contradicted" else
                f"{off}: its interval over seeds is neither inside nor wholly outside ±{c['margin']:g}")
    return ""


def claim_rows(claim) -> list[str]:
    """The rows a claim reads: its a and b, each a row, a list of rows, or {best: [...]} / {first: [...]}."""
    out = []
    for side in (claim.a, claim.b):
        for part in (side.values() if isinstance(side, dict) else [side]):
            out += [str(r) for r in (part if isinstance(part, (list, tuple)) else [part]) if r]
    return list(dict.fromkeys(out))


def _claim_why(c: dict, diag: dict[str, dict], deps: dict[str, dict[str, tuple]] | None = None,
               with_base: bool = True) -> str:
    """Why the runs give this verdict (generated, never written by hand): the interval against 0 or the
    margin, and what the verdict rests on, even where it holds: a row still improving or near the plateau,
    a row that did not over-fit where the claim is about over-fitting, and the departures from the paper
    under which its rows stand to each other otherwise than in the paper (`deps`, from row_departures)."""
    if c["verdict"] == "not run":
        rows = claim_rows(c["claim"])
        waiting = [r for r in rows if diag.get(r, {}).get("unfinished") == "running"]
        pending = [r for r in rows if diag.get(r, {}).get("unfinished") == "pending"]
        if not waiting and not pending:
            return "its rows were not run in this invocation"
        said = [f"{', '.join(waiting)} {'has' if len(waiting) == 1 else 'have'} no finished seed"] * bool(waiting) + \
            [f"{', '.join(pending)} not started"] * bool(pending)
        return f"not finished yet: {'; '.join(said)} (`python -m harness status` shows where each stands)"
    if c["expect"] in ("above", "gap_grows", "sooner", "value"):
        return _measured_why(c) + _diverged_why(c, diag)
    notes = []
    if c["n"] < 2:
        notes.append(f"{c['n']} paired seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)")
    elif c["verdict"] == "holds":
        notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference {c['diff']:+.3f} "
                     + (f"lies above {c['margin']:g}" if c["expect"] == "better" else
                        f"lies inside ±{c['margin']:g}"))
    rests = "it rests on " if c["verdict"] == "holds" else ""
    rows = list(dict.fromkeys(r for r in (c["a_row"], c["b_row"]) if r))
    for row in rows:
        d = diag.get(row, {})
        regime = regime_note(row, diag)
        if regime and not regime.startswith("stopped by the rule"):     # a row the rule stopped is no caveat
            notes.append(f"{rests}{row}, which was {regime}" if rests else f"{row} was {regime}")
        if d.get("seeds") and not d.get("rose") and c["claim"].regime == "over-fitting":
            notes.append(f"{row} did not over-fit: its dev PPL was at its lowest at the end in every seed")
    if deps and rows:
        moved = claim_departures(rows, deps, with_base)
        if moved:
            notes.append(f"{'it rests on ' if rests else ''}departures from the paper that change how its rows "
                         f"compare: {'; '.join(moved)}")
    if c["n"] >= 2 and c["verdict"] == "inconclusive" and rows and all(
            all_diverged(diag.get(r, {}).get("diverged", (0, 0))) for r in rows):
        notes.append("both rows are scored as their start, the same initialisation on both sides: the runs cannot "
                     "order them")
    elif c["n"] >= 2 and c["verdict"] == "inconclusive":
        if c["expect"] == "better":
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference {c['diff']:+.3f} "
                         f"spans {c['margin']:g}: the effect, if any, is within the seed-to-seed spread at this scale")
        else:
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] is not inside ±{c['margin']:g}")
    if c.get("also"):
        x = c["also"]
        notes.append(f"both parts must hold: {c['metric']} {c['main_verdict']}, {x['metric']} {x['verdict']}")
    if c["verdict"] == "contradicted" and c.get("main_verdict", "contradicted") == "contradicted":
        notes.append((f"{c['b_row']} is better than {c['a_row']} on every reading of the interval "
                      f"[{c['low']:+.3f}, {c['high']:+.3f}]" if c["margin"] == 0 else
                      f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies below the margin {c['margin']:g}: "
                      f"{c['a_row']} is not better than {c['b_row']} by that much") if c["expect"] == "better" else
                     f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies outside ±{c['margin']:g}")
    return "; ".join(notes)


MAIN_PROFILES = ("tiny", "", None)


def report_folder(parent: dict) -> str:
    """Where an invocation's report goes below reports/: the main (tiny) profile's at the top, as before;
    any other profile's in a folder named after it, so that reports/table2.md (the made-up corpus) and
    reports/multi30k/table2.md (Multi30K) stand side by side; a named invocation's (`run --name corpus2`) in
    a folder of that name below its profile's (reports/corpus2/table3.md)."""
    profile = parent["tags"].get("profile") or parent["params"].get("profile")
    folder = Path("." if profile in MAIN_PROFILES else str(profile))
    variant = parent["tags"].get(tracking.VARIANT_TAG, "")
    return (folder / variant if variant else folder).as_posix()


def late_changes_section(parent: dict | None) -> list[str]:
    """For a layout that scores a test set: every setting of this profile changed after a committed report had
    shown a test figure of it (from git, harness/report/registration.py), so that a reader can tell settings
    chosen on dev alone from settings changed once a test figure was known."""
    tags = (parent or {}).get("tags", {})
    path, profile, study = tags.get("study_file", ""), tags.get("profile", ""), tags.get("study", "")
    if not path or not profile or profile == "paper":
        return []
    rel = Path(path).resolve()
    try:
        rel = rel.relative_to(_REGISTRATION_ROOT.resolve())
    except ValueError:
        rel = Path(path)
    report = (Path("reports") / report_folder(parent) / f"{study}.md").as_posix()
    changes = late_profile_changes(rel.as_posix(), profile, [report, *_reports_of(study, profile)])
    head = ["## Settings changed after a test figure of this profile existed", ""]
    if changes is None:
        return head + ["Unknown: this report was not made in a git checkout of the project, so when its profile's "
                       "settings changed cannot be computed.", ""]
    if not changes:
        return head + [f"None: no setting of the `{profile}` profile changed after a committed report first showed "
                       "its test figures (computed from git).", ""]
    return head + [f"Computed from git: {changes[0][1:-1]}; each setting below changed after that, so a test figure "
                   "was known when it was chosen (the choice itself was made on dev: docs/calibration.md).", "",
                   *[f"- {c}" for c in changes[1:]], ""]


def _reports_of(study: str, profile: str) -> list[str]:
    """The committed reports of `study` made with `profile` (a named invocation's too, e.g. reports/multi30k/
    rivals/table2.md): a test figure any of them showed was known when the profile's settings changed after."""
    folder = _REGISTRATION_ROOT / "reports"
    mark = re.compile(rf"^- study version \S+, profile `{re.escape(profile)}`", re.M)
    found = []
    for md in sorted(folder.rglob(f"{study}.md")) if folder.is_dir() else []:
        try:
            if mark.search(md.read_text(encoding="utf-8")):
                found.append(md.relative_to(_REGISTRATION_ROOT).as_posix())
        except OSError:
            continue
    return found


def _registered(claim_id: str, c: dict, runs: pd.DataFrame) -> str:
    """The claim's registration against the commits of the finished runs of every row its verdict reads (all four
    of a gap between gaps, every rival of a `sooner` claim, every row of a list; of a `first` list the first that
    finished, as the verdict takes it); against every run's when none of those finished."""
    done = runs[runs["status"] == "FINISHED"] if "status" in runs else runs
    read = claims.rows_read(c["claim"], set(done["tags.row"].dropna().astype(str)))
    judged = done[done["tags.row"].isin(read)]
    judged = judged if len(judged) else runs
    # a run that recorded no commit counts as "" (registration cannot then be established for it)
    shas = set(judged["tags.git_sha"].fillna("").astype(str)) if "tags.git_sha" in judged else {""}
    if "tags.git_sha_last" in judged:          # a trial resumed at a later commit trained at both
        shas |= set(judged["tags.git_sha_last"].dropna().astype(str))
    dirty = any(judged.get(c, pd.Series(dtype=str)).astype(str).str.lower().isin(["true", "1"]).any()
                for c in ("tags.git_dirty", "tags.git_dirty_last"))
    return registration(claim_id, shas, bool(dirty))


def points_the_papers_way(c: dict) -> bool | None:
    """Whether a checked claim's point estimate lies on the paper's side (None: nothing to point with)."""
    if pd.isna(c["diff"]):
        return None
    claim = c["claim"]
    if claim.expect == "sooner":
        return c["diff"] < 1
    if claim.expect in ("equivalent", "value"):
        return abs(c["diff"]) <= claim.margin
    return c["diff"] > 0


def one_seed_note(checked: list[dict], parent: dict | None) -> str:
    """Where claims rest on one seed (no interval, so no verdict): how many of them point the paper's way by their
    point estimate alone, and the command that gives verdicts."""
    single = [c for c in checked if c["verdict"] == "inconclusive" and c["n"] == 1]
    if not single:
        return ""
    pointing = sum(points_the_papers_way(c) is True for c in single)
    command = (parent or {}).get("tags", {}).get("command", "")
    metrics = (parent or {}).get("metrics") or {}
    # The study's wall time over every invocation (a study resumed across sessions), else the last one's.
    wall = (parent or {}).get("study_wall_seconds") or metrics.get("wall_seconds")
    if wall is not None and (parent or {}).get("status") in ("FINISHED", "FAILED"):
        wall -= metrics.get("prepare_seconds") or 0.0      # the last invocation's data preparation, not repeated
    rerun = f" `{command} --seeds 0,1,2`" if command and "--seeds" not in command else " three seeds (`--seeds 0,1,2`)"
    cost = f", about three times this study's {wall / 60:.0f} minutes," if wall else ""
    return (f" {len(single)} claim{'s rest' if len(single) > 1 else ' rests'} on one seed, which gives no interval: "
            f"{pointing} of {len(single)} point the paper's way by their point estimate alone (not a verdict);"
            f"{rerun}{cost} gives verdicts.")


def _claim_cells(c: dict) -> tuple[str, str, str]:
    """A checked claim's cells: the paper's figures, ours (a against b, or against the target), and the
    difference with its interval and what the claim asks of it."""
    claim = c["claim"]
    paper = claim.paper
    metric = c.get("part_metric", claim.metric)       # a value claim's figures are its farthest part's
    unit = "ln PPL" if metric.endswith("nll") else metric
    a_val, b_val = _claim_value(metric, c["a_mean"]), _claim_value(metric, c["b_mean"])
    if claim.expect == "sooner":     # time to quality against each rival
        paper_cell = paper.get("finding", "–")
        ours = (f"{c['a']} against {c['b']}: the slowest part, against {c['b_row']}, took "
                f"{_num3(c['a_mean'])} {'seconds' if c['part_metric'].startswith('seconds') else 'FLOPs'} "
                f"to reach its best where it took {_num3(c['b_mean'])}"
                if c["b_row"] else f"{c['a']} against {c['b']}")
    elif claim.expect == "gap_grows":  # a gap between two rows against the gap between two others
        paper_cell = paper.get("finding", "–")
        ours = f"{c['a']}: {_num3(c['a_mean'])} vs {c['b']}: {_num3(c['b_mean'])}"
    elif claim.expect == "value":      # one row's measurement against the formula
        paper_cell, ours = paper.get("formula", "–"), f"{c['a']}: {a_val} against {b_val}"
        if c.get("parts"):
            ours += f" (the part farthest from it: {c['a_row']}, {metric})"
    elif claim.expect == "above":    # one row's measurement against a threshold
        paper_cell = paper.get("finding", "–")
        ours = f"{c['a']}: {c['a_mean']:.3g} against {c['b_mean']:g}"
    else:
        paper_cell = (f"{paper['a']:g} vs {paper['b']:g} ({paper.get('metric', claim.metric)})" if paper else "–")
        ours = f"{c['a']}: {a_val} vs {c['b']}: {b_val}"
    diff = ("–" if pd.isna(c["diff"]) else f"{c['diff']:+.3f}" if pd.isna(c["low"]) else
            f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]") + f" {unit}, n={c['n']}"
    if c.get("also"):        # a second comparison of the same rows, which must hold too
        x = c["also"]
        what = "–" if pd.isna(x["diff"]) else f"{x['diff']:+.3g}" if pd.isna(x["low"]) else \
            f"{x['diff']:+.3g} [{x['low']:+.3g}, {x['high']:+.3g}]"
        diff += (f" ({c['main_verdict']}); and {x['metric']} ({claim.also['better']} is better): {c['a_row']} "
                 f"{x['a_mean']:.3g} vs {c['b_row']} {x['b_mean']:.3g}, Δ {what}, n={x['n']} ({x['verdict']})")
    if claim.expect == "equivalent":
        diff += f", margin ±{claim.margin:g}"
    elif claim.expect == "better" and claim.margin:
        diff += f", by more than {claim.margin:g}"
    elif claim.expect == "value":
        diff += f", tolerance ±{claim.margin:g}"
    elif claim.expect == "above":
        diff += f", above {claim.target:g}"
    elif claim.expect == "sooner":
        diff = ("–" if pd.isna(c["diff"]) else f"ratio {c['diff']:.3f}" if pd.isna(c["low"]) else
                f"ratio {c['diff']:.3f} [{c['low']:.3f}, {c['high']:.3f}]") + \
            f" (the largest part), n={c['n']}, below 1 to hold"
    return paper_cell, ours, diff


def claims_section(study: str, runs: pd.DataFrame, uri: str, parent: dict | None = None) -> list[str]:
    """The report's closing "Claims" section: every claim of harness/paper/claims.yaml for this study, the
    paper's sentence and numbers, ours with the seed-paired interval, the computed verdict and why (with the
    invocation's `parent`, the departures that set a claim's row apart)."""
    checked = claims.check_claims(study, runs, uri)
    if not checked:
        return []
    diag = row_diagnostics(runs, uri)
    for row, g in runs.groupby(runs["tags.row"].astype(str)):      # rows that ran but have no finished seed yet
        if not (g["status"] == "FINISHED").any() and (g["status"] != "FAILED").any():
            diag.setdefault(row, {})["unfinished"] = "running"
    if parent and parent.get("status") in ("RUNNING", "KILLED"):  # an invocation not done: its rows yet to start
        for row in parent["params"].get("rows", "").split(","):
            if row and row not in set(runs["tags.row"].astype(str)):
                diag.setdefault(row, {})["unfinished"] = "pending"
    deps = row_departures(parent["tags"]) if parent else {}
    with_base = "base" in (parent["params"].get("rows", "").split(",") if parent else
                           runs["tags.row"].astype(str).tolist())
    counts = {v: sum(c["verdict"] == v for c in checked) for v in ("holds", "contradicted", "inconclusive", "not run")}
    lines = ["## Claims", "",
             f"Each claim of the paper (and, for the modern rows, of the paper behind each replacement) as written in "
             f"harness/paper/claims.yaml, checked on these runs: {counts['holds']} hold, {counts['contradicted']} "
             f"contradicted, {counts['inconclusive']} inconclusive, {counts['not run']} not run. A verdict is "
             "computed, "
             "never written: the difference between the two rows is taken seed by seed (oriented so that > 0 is the "
             "claimed direction) and its 95 % t-interval decides: holds if it lies above 0 (or inside the equivalence "
             "margin), contradicted if it lies below 0 (or wholly outside the margin), inconclusive if it spans 0. "
             "Perplexity claims are compared as ln PPL (nats per subword), so a difference of 0.05 is a PPL ratio of "
             "about 1.05.", "",
             "| claim | the paper says | paper | ours: a vs b | paired Δ (95 % CI), seeds | verdict | why, from the "
             "runs "
             "| registered before these runs? |",
             "|---|---|---|---|---|---|---|---|"]
    lines[2] += one_seed_note(checked, parent)
    lines[2] += (" The last column is computed from git when this report is made (harness/report/registration.py): "
                 "\"registered\" where the claim's rows, metric and margin or threshold were committed in the runs' "
                 "commit or before it, \"written after these runs' figures\" otherwise, and whether the claim was "
                 "redefined after a committed report had shown its verdict.")
    if any(c["expect"] == "above" for c in checked):
        lines[2] += (" A threshold claim compares one row's measured value with a target fixed in claims.yaml before "
                     "the runs: Δ is value - target, and it holds if Δ's interval over seeds lies above 0, is "
                     "contradicted if it lies below 0, inconclusive otherwise.")
    if any(c["expect"] == "value" for c in checked):
        lines[2] += (" A measurement claim (Table 1's columns) compares one row's measured value with the paper's "
                     "formula instead: Δ is measured - formula, and it holds if Δ lies within the stated tolerance "
                     "(with several seeds, if its interval does), contradicted otherwise.")
    for c in checked:
        claim = c["claim"]
        paper_cell, ours, diff = _claim_cells(c)
        cells = [f"`{claim.id}` ({claim.source})", claim.text, paper_cell, ours, diff, f"**{c['verdict']}**",
                 _claim_why(c, diag, deps, with_base), _registered(claim.id, c, runs)]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return lines + [""]


# ------------------------------------------------------------------------------------------ plots

def plot_title(study: str, runs: pd.DataFrame) -> str:
    """A plot's title stem: the study, the invocation's name where it has one (`run --name`), and the profile its
    trials ran in: "table3 corpus2 (tiny profile)"."""
    profiles = sorted(set(runs["tags.profile"].dropna().astype(str))) if "tags.profile" in runs else []
    names = sorted(set(runs[f"tags.{tracking.VARIANT_TAG}"].dropna().astype(str))) \
        if f"tags.{tracking.VARIANT_TAG}" in runs else []
    named = " ".join([study, *names])
    return f"{named} ({', '.join(profiles)} profile)" if profiles else named


# More series than colours: each block of ten rows gets its own line style and marker as well.
_STYLES, _MARKERS = ["-", "-.", ":", (0, (5, 1))], ["o", "s", "^", "D"]


class _PlainLogFormatter(LogFormatter):
    """LogFormatter's choice of which ticks to label, each written as a plain number (0.002, 0.3, 1.4, 60) where
    LogFormatter writes 3e-01 below 1."""

    def __call__(self, x, pos=None):
        return f"{x:g}" if super().__call__(x, pos) else ""


def plain_log_labels(axis) -> None:
    """A log axis labelled in plain numbers (0.3, 1.2, 1.4, 2, 3, 10, 60), its minor ticks too where the range is
    short (under about two decades): not 1.4 x 10^0 or 3e-01, and not a single labelled tick over a narrow range.
    Call it after plotting: under a decade (a dev PPL from 1.4 to 3.1, where a log axis's own ticks are 2 and 3
    alone) the ticks are a linear axis's round numbers (1.5, 2, 2.5, 3), placed on the log scale."""
    axis.axes.autoscale_view()
    low, high = sorted(axis.get_view_interval())
    if 0 < low and high < 10 * low:
        axis.set_major_locator(MaxNLocator(nbins=6, steps=[1, 2, 2.5, 5, 10]))
        axis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}"))
        axis.set_minor_locator(NullLocator())
        return
    axis.set_major_formatter(_PlainLogFormatter(labelOnlyBase=False))
    axis.set_minor_formatter(_PlainLogFormatter(labelOnlyBase=False, minor_thresholds=(2, 0.5)))


def sci_log_labels(axis) -> None:
    """A log axis of large counts (training FLOPs) labelled in scientific notation at enough ticks to read a value:
    at 1, 2 and 5 of each decade where it spans one to three decades (FLOPs from 2e13 to 7e14 otherwise carry the
    one label 10^14); the decades alone past three. Under one decade the ticks are a linear axis's round numbers
    on the log scale, each labelled by its mantissa (0.6, 0.8, 1.0, 1.2, 1.4) with the common power of ten (x10^15)
    written once at the axis's end: a log axis's own ticks there (6, 7, 8, 9 x 10^14) crowd toward its top until
    their labels touch. Call it after plotting."""
    axis.axes.autoscale_view()
    low, high = sorted(axis.get_view_interval())
    if low <= 0 or high > 1000 * low:
        return
    if high < 10 * low:
        axis.set_major_locator(MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
        short = ScalarFormatter(useMathText=True)
        short.set_powerlimits((0, 0))                    # always the mantissa alone, the power at the end
        axis.set_major_formatter(short)
        axis.set_minor_locator(NullLocator())
        return
    axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(LogFormatterSciNotation(labelOnlyBase=False, minor_thresholds=(math.inf, math.inf)))
    axis.set_minor_formatter(NullFormatter())


def series_style(i: int) -> dict:
    """The colour, line style and marker of a plot's i-th series: ten colours, and past them a new line style and
    marker for each block of ten, so that no two of up to forty series look alike."""
    block = i // 10
    return {"color": f"C{i % 10}", "ls": _STYLES[block % len(_STYLES)], "marker": _MARKERS[block % len(_MARKERS)]}


def diverged_curve(hist: list[tuple[int, float]], start: float) -> list[tuple[int, float]]:
    """A diverged run's dev PPL as its weights went: the score logged at its last step, which is its start
    (harness/train/finish.py), is not a point of the curve."""
    last = max(s for s, _ in hist)
    return [(s, v) for s, v in hist if not (s == last and s > 0 and math.isclose(v, float(start)))]


# Up to this many rows share one pair of panels; past it, a study's rows are drawn in groups (`curve_panels`).
_ONE_PANEL_ROWS = 10
_GROUP_ROWS = 7


def curve_panels(order: list[str], most: int = _GROUP_ROWS) -> list[list[str]]:
    """The rows of a learning-curve figure in panels of at most `most` rows, the base ("base", or the first row)
    left out (it is drawn in every panel): rows named as the paper's Table 3 names them (a capital letter and a
    number, or the letter and `base`: A1, C4, Dbase) by their letter, other names with a number by it (the depth
    study's post12, pre12_nowarmup), the rest (and a key's only row) together in study order; a group larger than
    `most` is cut into even pieces in study order."""
    ref = "base" if "base" in order else order[0]
    by, rest = {}, []
    for row in order:
        if row == ref:
            continue
        m = re.fullmatch(r"([A-Z])(\d+|base)", row)
        n = re.search(r"\d+", row)
        key = m[1] if m else f"#{n[0]}" if n else None
        (by.setdefault(key, []) if key else rest).append(row)
    alone = {g[0] for g in by.values() if len(g) == 1}            # a key of one row joins the rest (P0)
    rest = [row for row in order if row in alone or row in rest]
    groups = [g for g in (*(g for g in by.values() if len(g) > 1), rest) if g]
    cut = [math.ceil(len(g) / math.ceil(len(g) / most)) for g in groups]      # even pieces: 8 rows as 4 + 4
    return [g[i:i + n] for g, n in zip(groups, cut) for i in range(0, len(g), n)]


def _curves(uri: str, run: pd.Series) -> dict[str, list[tuple[int, float]]]:
    """A run's training loss and dev PPL as (step, value) in step order; a diverged run's dev PPL without the
    start it was scored as."""
    out = {}
    for key in ("train_loss", "dev_ppl"):
        hist = sorted(tracking.metric_history(uri, run["run_id"], key))
        if hist and key == "dev_ppl" and run.get("metrics.diverged") == 1:
            hist = diverged_curve(hist, run.get("metrics.dev_ppl_start"))
        out[key] = hist
    return out


def _draw_row(axes, seeds: list[tuple[pd.Series, dict]], label: str, style: dict) -> None:
    """One row's seeds on a (train loss, dev PPL) pair of axes: one line a seed, unfinished seeds dashed (they
    are not in the table's means), an x where a run stopped as diverged; the legend names the row once."""
    for i, (run, curves) in enumerate(seeds):
        ok, gone = run["status"] == "FINISHED", run.get("metrics.diverged") == 1
        for ax, key in zip(axes, ("train_loss", "dev_ppl")):
            if not curves[key]:
                continue
            steps, values = zip(*curves[key])
            ax.plot(steps, values, color=style["color"], ls=style["ls"] if ok else "--", lw=style.get("lw", 1),
                    marker=style["marker"] if key == "dev_ppl" else None,
                    markevery=max(1, len(steps) // 8), ms=3, label=label if i == 0 and key == "dev_ppl" else None)
            if gone and key == "dev_ppl":
                ax.plot(steps[-1:], values[-1:], color=style["color"], marker="x", ms=7, ls="none")


def plot_learning_curves(study: str, runs: pd.DataFrame, order: list[str], uri: str, path: Path) -> Path:
    """Training loss (left) and dev PPL every eval_every steps (right, log scale), one line per seed: whether each
    row converged is read off the right panel. Up to ten rows share one pair of panels, one colour per row; more
    (Table 3's 22) are drawn a pair of panels per group of rows (`curve_panels`: A, B, C, D, the rest), each with
    the base in black for reference and its own legend outside the panels, every panel on the same y axis."""
    def seeds_of(row: str) -> list[tuple[pd.Series, dict]]:
        rows = runs[runs["tags.row"].astype(str) == row]
        rows = rows.sort_values("status", key=lambda st: st != "FINISHED", kind="stable")   # legend: solid
        return [(run, _curves(uri, run)) for _, run in rows.iterrows()]
    groups = [order] if len(order) <= _ONE_PANEL_ROWS else curve_panels(order)
    ref = None if len(groups) == 1 else ("base" if "base" in order else order[0])
    fig = Figure(figsize=(12.5, 4.8 if len(groups) == 1 else 3.1 * len(groups) + 0.6), layout="constrained")
    grid = fig.subplots(len(groups), 2, sharey="col", squeeze=False)      # each group its own steps (big: 3x)
    title = plot_title(study, runs)
    base = seeds_of(ref) if ref is not None else []          # read once, drawn in every group
    for axes, group in zip(grid, groups):
        if ref is not None:
            _draw_row(axes, base, ref, {"color": "black", "ls": "-", "marker": "o", "lw": 1.6})
        for j, row in enumerate(group):
            _draw_row(axes, seeds_of(row), row, series_style(j))
        if ref is not None:
            axes[1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False)
            axes[0].set_title(f"{', '.join(group)}: training loss", fontsize=9)
            axes[1].set_title(f"{', '.join(group)}: dev perplexity", fontsize=9)
        axes[0].set_ylabel("train loss (label-smoothed)")
        axes[1].set(ylabel="dev PPL (log scale)", yscale="log")
    for ax in grid.flat:
        ax.set_xlabel("training step")
    if ref is None:
        grid[0][0].set_title(f"{title}: training loss")
        grid[0][1].set_title(f"{title}: dev perplexity during training")
        handles, labels = grid[0][1].get_legend_handles_labels()
        if handles:      # one legend for both panels, outside them
            fig.legend(handles, labels, loc="outside right upper", fontsize=7, ncol=1 + len(labels) // 24)
    else:
        fig.suptitle(f"{title}: learning curves by group of rows, the base ({ref}) in black in each")
    plain_log_labels(grid[0][1].yaxis)
    return save_png(fig, path)


NAN = float("nan")


# ------------------------------------------------------------------------------------------ shared bits

def text_of(run: pd.Series, key: str) -> str:
    """A tag or param as text; "" when absent."""
    v = run.get(key)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def param_of(run: pd.Series, key: str) -> float:
    """A param as a number (params are strings in MLflow); NaN when absent or not a number."""
    v = run.get(f"params.{key}")
    return NAN if v is None else float(pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0])


def mean_of(done: pd.DataFrame, metric: str) -> float:
    return column(done, f"metrics.{metric}").mean()


def std_of(done: pd.DataFrame, metric: str) -> float:
    return column(done, f"metrics.{metric}").std()   # NaN for one seed


def tags_of(g: pd.DataFrame, key: str) -> str:
    return ", ".join(dict.fromkeys(g[f"tags.{key}"].dropna().astype(str))) if f"tags.{key}" in g else ""


def md_cell(x) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def md_table(head: list[str], rows: list[list]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(md_cell(c) for c in row) + " |" for row in rows)]


def seeds_cell(r: dict) -> str:
    return f"{r['n_finished']}/{r['n_seeds']}" + ("" if r["status"] == "FINISHED" else f" {r['status']}")


def failure_cell(r: dict) -> str:
    return f"{r['status']}: {r['failure_reason']}" if r["failure_reason"] else \
        ("" if r["status"] == "FINISHED" else r["status"])


def write_files(study: str, out_dir: Path, lines: list[str], table: pd.DataFrame, plots: list[Path | None],
           claims: list[str] = ()) -> list[Path]:
    """The report's .md (its lines, then its plots, then its claims) and .csv in out_dir (a folder of its own:
    writers.write_report then puts them in place with install_files); a plot not drawn (None: it would carry no
    information) is left out."""
    plots = [p for p in plots if p is not None]
    lines = [*lines, "", *(f"![{p.stem}]({p.name})" for p in plots), "", *claims]
    csv = atomic_write(out_dir / f"{study}.csv", table.to_csv(index=False, float_format="%.6g"))
    md = atomic_write(out_dir / f"{study}.md", "\n".join(lines))
    return [md, csv, *plots]


def install_files(study: str, made: list[Path], out_dir: Path) -> list[Path]:
    """Put a report made elsewhere (its .md first) into out_dir, each file written atomically; the paths in
    out_dir, in the same order. A plot the report it replaces showed and this one does not (it would carry no
    information now) goes: a folder of reports holds no picture that no report shows."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        before = _plots_in((out_dir / f"{study}.md").read_text(encoding="utf-8"))
    except OSError:
        before = set()
    placed = []
    for path in made:
        with atomic_writer(out_dir / path.name, binary=True) as f:
            f.write(path.read_bytes())
        placed.append(out_dir / path.name)
    for name in before - _plots_in(made[0].read_text(encoding="utf-8")):
        (out_dir / name).unlink(missing_ok=True)
    return placed


def _plots_in(text: str) -> set[str]:
    """The PNGs beside it that a report's text shows (its `![stem](name.png)` lines, in any section)."""
    return set(re.findall(r"^!\[[^\]]*\]\(([^)/]+\.png)\)$", text, flags=re.M))


def architecture_section(runs: pd.DataFrame, order: list[str]) -> list[str]:
    """Each row's architecture manifest (harness/probes/manifest.py), computed from the model settings its first
    finished trial logged, with its exact parameter count."""
    from harness.probes.manifest import manifest
    done = runs[runs["status"] == "FINISHED"]
    body = []
    for row in order:
        g = done[done["tags.row"].astype(str) == row]
        if not len(g):
            continue
        first = g.iloc[0]
        settings = {k[len("params.model."):]: v for k, v in first.items()
                    if k.startswith("params.model.") and isinstance(v, str)}
        try:
            m = manifest(settings)
        except KeyError:         # a store that logged only some model settings (an older run): no manifest
            continue
        params = first.get("metrics.params")
        body.append([f"**{row}**", m["architecture"], m.get("layers", "–"), m.get("d_model", "–"),
                     m.get("attention", "–"),
                     f"{m.get('query_heads', '–')} / {m.get('kv_heads', '–')}", m.get("head_dim", "–"),
                     m.get("context_length", "–"), m.get("positions", "–"), m.get("norm", "–"), m.get("ffn", "–"),
                     m.get("kv_bytes_per_target_token_bf16", "–"), m.get("kv_bytes_per_source_token_bf16", "–"),
                     f"{int(params):,}" if pd.notna(params) else "–"])
    if not body:
        return []
    head = ["row", "architecture", "layers", "d_model", "attention", "query / KV heads", "head dim", "context",
            "positions", "norm", "FFN", "KV bytes / target token (bf16)", "KV bytes / source token (bf16)",
            "parameters"]
    return (
        [
            "## Architectures",
            "",
            "Each row's architecture manifest (every trial also keeps it as `architecture.json`, an MLflow artifact): "
            "KV-cache bytes are what incremental decoding keeps per token at bf16, the self-attention cache per target "
            "token, and per source token the encoder-decoder's cross-attention cache or the decoder-only model's "
            "prefilled cache (harness/probes/manifest.py); the parameters are each row's exact count.",
            "",
        ]
        + md_table(head, body)
        + [""]
    )


def measurement_sections(runs: pd.DataFrame, order: list[str], uri: str, out_dir: Path,
                         study: str) -> tuple[list[str], list[Path]]:
    """The sections of the measurements the runs took (harness/measure: each registered measurement's own,
    by its section_rank, over the rows of `order`): their lines, their images linked, and their PNGs."""
    lines: list[str] = []
    plots: list[Path] = []
    ctx = SectionContext(runs, order, uri, out_dir, study)
    for m in by_section_rank():
        if m.section is not None:
            more, pngs = m.section(ctx)
            lines += more
            plots += pngs
    return lines, plots
