"""What every evaluation workload shares: results, simulation metering, statistics, plots."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from escher.backends.memory import MemoryBackend


@dataclass(frozen=True)
class Row:
    """One line of a result table: the paper's number beside ours.

    Attributes:
        metric: What is measured, with its unit.
        ours: Our value (a number or a short text).
        paper: The paper's value for the same metric, or "" if the paper has none.
        note: How to read the pair (e.g. "ratio", "model parameter").
    """

    metric: str
    ours: float | str
    paper: float | str = ""
    note: str = ""


@dataclass
class Meter:
    """Counts simulated events and the wall time spent driving simulations."""

    events: int = 0
    wall: float = 0.0
    sim_time: float = 0.0

    @property
    def events_per_second(self) -> float:
        """Simulated events run per second of wall time."""
        return self.events / self.wall if self.wall > 0 else 0.0

    @contextmanager
    def simulate(self, nodes: Mapping[str, Any]) -> Iterator[MemoryBackend]:
        """A fresh virtual-clock in-memory backend; its events and wall time are counted."""
        backend = MemoryBackend(nodes=nodes, virtual_clock=True)
        start = time.perf_counter()
        try:
            yield backend
        finally:
            self.wall += time.perf_counter() - start
            self.events += backend.clock.events_run  # type: ignore[attr-defined]
            self.sim_time += backend.clock.now()
            backend.close()


@dataclass
class Result:
    """What one workload run produced.

    Attributes:
        name: The workload's name (`escher bench NAME`).
        title: One line saying what it is.
        rows: The table: paper beside ours.
        params: Every model parameter, stated (durations, bandwidths, costs, seed).
        data: Series for the plot and for tests (plain lists and numbers).
        meter: Simulated events and wall time.
        plot: Draws the figure from `data` and returns it (a matplotlib ``Figure``; needs
            matplotlib), or None.
    """

    name: str
    title: str
    rows: list[Row] = field(default_factory=list)
    params: dict[str, Any] = field(default_factory=dict)
    data: dict[str, Any] = field(default_factory=dict)
    meter: Meter = field(default_factory=Meter)
    plot: Callable[[Result], Any] | None = None

    def add(self, metric: str, ours: float | str, paper: float | str = "", note: str = "") -> None:
        """Append a table row."""
        self.rows.append(Row(metric, ours, paper, note))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary: rows, parameters, simulator speed and the plot's series."""
        return {
            "name": self.name,
            "title": self.title,
            "rows": [r.__dict__ for r in self.rows],
            "params": self.params,
            "simulator": {
                "events": self.meter.events,
                "wall_seconds": round(self.meter.wall, 3),
                "events_per_second": round(self.meter.events_per_second),
                "simulated_seconds": round(self.meter.sim_time, 3),
            },
            "data": compact(self.data),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Result:
        """A result read back from `to_dict` (no plot function attached)."""
        sim = data.get("simulator", {})
        meter = Meter(
            events=int(sim.get("events", 0)),
            wall=float(sim.get("wall_seconds", 0.0)),
            sim_time=float(sim.get("simulated_seconds", 0.0)),
        )
        return cls(
            name=data["name"],
            title=data["title"],
            rows=[Row(**row) for row in data.get("rows", [])],
            params=dict(data.get("params", {})),
            data=dict(data.get("data", {})),
            meter=meter,
        )

    def figure(self) -> Any:
        """The plot as a matplotlib ``Figure`` (None without a plot function)."""
        return None if self.plot is None else self.plot(self)

    def write(self, out: Path) -> list[Path]:
        """Write ``<name>.json`` and (with matplotlib) ``<name>.png`` into `out`."""
        out.mkdir(parents=True, exist_ok=True)
        written = [out / f"{self.name}.json"]
        written[0].write_text(json.dumps(self.to_dict(), indent=2, default=str) + "\n")
        fig = self.figure()
        if fig is not None:
            path = out / f"{self.name}.png"
            fig.savefig(path, dpi=110)
            pyplot().close(fig)
            written.append(path)
        return written


def compact(value: Any, digits: int = 6) -> Any:
    """`value` with every float rounded to `digits` significant digits (smaller JSON)."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") if math.isfinite(value) else value
    if isinstance(value, Mapping):
        return {k: compact(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [compact(v, digits) for v in value]
    return value


def quantiles(values: Sequence[float], points: int = 201) -> list[float]:
    """`points` evenly spaced quantiles of `values`, 0% to 100%: a CDF in little space."""
    if not values:
        return []
    return [percentile(values, 100.0 * i / (points - 1)) for i in range(points)]


def check_variant(variant: str, variants: Sequence[str]) -> None:
    """Raise `ValueError` unless `variant` is one of a workload's `variants`."""
    if variant not in variants:
        raise ValueError(f"variant must be one of {tuple(variants)}")


def percentile(values: Sequence[float], q: float) -> float:
    """The `q`-th percentile (0-100) by linear interpolation; nan for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(pos), math.ceil(pos)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def median(values: Sequence[float]) -> float:
    """The median; nan for no values."""
    return percentile(values, 50.0)


def pyplot() -> Any:
    """matplotlib.pyplot on the headless Agg backend (matplotlib is the `plot` extra)."""
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        from escher.core.errors import EscherError

        raise EscherError(
            "plots need matplotlib: pip install 'escher-sched[plot]' (or run with --no-plot)."
        ) from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


#: Line styles that differ in colour, marker and dash, so series stay apart even where they
#: overlap (series i uses ``STYLES[i]``).
STYLES: tuple[dict[str, Any], ...] = (
    {"color": "C0", "marker": "o", "linestyle": "-"},
    {"color": "C1", "marker": "s", "linestyle": "--"},
    {"color": "C2", "marker": "^", "linestyle": "-."},
    {"color": "C3", "marker": "D", "linestyle": ":"},
    {"color": "C4", "marker": "v", "linestyle": (0, (5, 1))},
)
#: How a paper reference line looks: grey, thin, dashed.
PAPER_STYLE: dict[str, Any] = {"color": "0.4", "linestyle": (0, (4, 2)), "linewidth": 1.2}


def style(index: int, **overrides: Any) -> dict[str, Any]:
    """The keyword arguments of series `index` for ``ax.plot`` (see `STYLES`)."""
    return {**STYLES[index % len(STYLES)], **overrides}


def from_zero(*axes: Any) -> None:
    """Start each axis' y range at zero (or below, if the data goes negative)."""
    for ax in axes:
        low, high = ax.get_ylim()
        ax.set_ylim(min(0.0, low), high)


def bars_beside_paper(
    ax: Any,
    ticks: Sequence[str],
    ours: Sequence[float],
    paper: Sequence[float],
    label: str,
    paper_label: str = "paper",
) -> None:
    """Grouped bars on `ax`: ours (labelled `label`) beside the paper's, hatched grey."""
    xs = range(len(ticks))
    ax.bar([x - 0.2 for x in xs], list(ours), 0.4, label=label)
    ax.bar(
        [x + 0.2 for x in xs], list(paper), 0.4, label=paper_label, hatch="//", color="lightgrey"
    )
    ax.set_xticks(list(xs), list(ticks))
    from_zero(ax)


class Link:
    """A network interface that serves transfers one at a time (FIFO), at `bandwidth` B/s.

    The transfer cost model of the workloads: a transfer of `size` bytes through a set of
    links starts when all of them are free, holds them all, and takes ``latency + size /
    bandwidth`` seconds. Deterministic; no packet-level effects.
    """

    __slots__ = ("bandwidth", "free_at")

    def __init__(self, bandwidth: float) -> None:
        self.bandwidth = bandwidth
        self.free_at = 0.0


def transfer(now: float, links: Sequence[Link], size: float, latency: float) -> float:
    """Seconds from `now` until a transfer of `size` bytes over `links` completes."""
    start = max([now, *(link.free_at for link in links)])
    end = start + latency + size / min(link.bandwidth for link in links)
    for link in links:
        link.free_at = end
    return end - now
