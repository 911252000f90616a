"""Writing a report's files: its PNGs, its Markdown and CSV (written in a folder of their own, then put in place
together, so a failed report leaves nothing half-written)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from harness.io import atomic_write, atomic_writer


def save_png(fig: Figure, path: Path) -> Path:
    with atomic_writer(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=110, bbox_inches="tight")
    return path


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
