"""Axis ticks for the dashboard's figures: round steps, whole trial numbers, and labels that never repeat.

Plotly's own ticks for 3 trials read -0.5, 0.5, 2.5 and for samples/s between 4 and 6.5
read 6, 5, 5, 5: the figures take their ticks from here instead.
"""

from __future__ import annotations

import math
from typing import Any, Sequence


def nice_ticks(
    low: float, high: float, target: int = 5, integer: bool = False, percent: bool = False
) -> dict[str, list[Any]]:
    """Tick values and labels for an axis from ``low`` to ``high``: round steps (1, 2, 2.5, 5 x 10^k), whole numbers
    when ``integer``, and as many decimals as it takes for no two labels to read the same."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return {"tickvals": [], "ticktext": []}
    low, high = min(low, high), max(low, high)
    span = high - low
    if span <= 0:
        vals = [float(low)]
        step = abs(low) / 100 or 1.0
    else:
        raw = span / max(target, 1)
        mag = 10.0 ** math.floor(math.log10(raw))
        mantissas = (1.0, 2.0, 5.0, 10.0) if integer and mag >= 1 else (1.0, 2.0, 2.5, 5.0, 10.0)
        step = next(m * mag for m in mantissas if m * mag >= raw * (1 - 1e-9))
        if integer:
            step = max(1.0, float(round(step)))
        first = math.ceil(low / step - 1e-9)
        vals = []
        k = first
        while k * step <= high + 1e-9 * step:
            vals.append(round(k * step, 12))
            k += 1
    if integer:
        vals = [float(int(round(v))) for v in vals if abs(v - round(v)) < 1e-9]
    scale = 100.0 if percent else 1.0
    decimals = 0 if integer else max(0, -math.floor(math.log10(step * scale) + 1e-9))
    mantissa = step / 10.0 ** math.floor(math.log10(step) + 1e-9) if span > 0 else 1.0
    if not integer and step * scale < 10 and abs(mantissa - 2.5) < 1e-6:
        decimals += 1  # 2.5, 0.25: the half shows

    def label(v: float, d: int) -> str:
        return f"{v * scale:,.{d}f}" + ("%" if percent else "")

    texts = [label(v, decimals) for v in vals]
    while len(set(texts)) < len(texts) and decimals < 12:
        decimals += 1
        texts = [label(v, decimals) for v in vals]
    return {"tickvals": [int(v) if integer else v for v in vals], "ticktext": texts}


def trial_ticks(numbers: Sequence[int]) -> dict[str, list[Any]]:
    """Whole-number ticks for a trial-number axis (never -0.5 or 2.5)."""
    if not numbers:
        return {"tickvals": [], "ticktext": []}
    return nice_ticks(min(numbers), max(numbers), target=min(8, max(1, max(numbers) - min(numbers))), integer=True)


def padded(low: float, high: float) -> list[float]:
    """An axis range; one value alone sits in the middle of a small range around it."""
    if high > low:
        return [low, high]
    pad = abs(low) * 0.05 or 0.5
    return [low - pad, high + pad]

