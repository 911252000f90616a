"""The cells of a report's Markdown tables: numbers, means with their 95 % t-intervals (harness/report/verdicts.py
computes them), signed differences, seeds and failures, and the table itself."""

from __future__ import annotations

import pandas as pd

from harness.report.stats import interval


def num(x, fmt: str = "{:.2f}") -> str:
    return "–" if pd.isna(x) else fmt.format(x)


def bracket_cell(values, fmt: str = "{:.1f}", scale: float = 1.0) -> str:
    """The mean of `values` over seeds and its 95 % t-interval, `mean [low, high]`, each times `scale` in `fmt`;
    the mean alone from one value, – from none (interval_cell gives mean ± half-width instead)."""
    mean, low, high, n = interval(values)
    if not n:
        return "–"
    f = lambda x: fmt.format(scale * x)  # noqa: E731
    return f(mean) if n < 2 else f"{f(mean)} [{f(low)}, {f(high)}]"


def interval_cell(values, fmt: str = "{:.2f}") -> str:
    """The mean of `values` over seeds ± the half-width of its 95 % t-interval, each in `fmt`; the mean alone
    from one value, – from none."""
    mean, low, high, n = interval(values)
    if not n:
        return "–"
    # the half-width in the same digits, never signed ("+0.158 ± 0.258", not "± +0.258")
    return fmt.format(mean) if n < 2 else f"{fmt.format(mean)} ± {fmt.replace('+', '').format((high - low) / 2)}"


def half_width(values) -> float:
    """The half-width of the 95 % t-interval of the mean of `values` over seeds; NaN for fewer than two."""
    mean, low, _, n = interval(values)
    return mean - low if n >= 2 else float("nan")


def pm(mean, spread) -> str:
    """mean ± spread (a std or a 95 % half-width, as the table's caption says); the mean alone without one."""
    return num(mean) if pd.isna(spread) else f"{mean:.2f} ± {spread:.2f}"


def signed_pm(mean, half) -> str:
    return signed(mean) if pd.isna(half) else f"{mean:+.2f} ± {half:.2f}"


def signed(x) -> str:
    return num(x, "{:+.2f}")


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
