"""Every plot of the documentation, redrawn from its JSON: the series it should have, none twice.

The JSON files next to the pictures (``escher bench all --out docs/img/evaluation``, and the
``--json`` of ``bench/emergent.py`` and ``bench/tetrisched.py``) hold the plotted series, so
these tests draw exactly what the pages show, without running a workload.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from escher import evaluation

pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parents[2]
EVALUATION = ROOT / "docs" / "img" / "evaluation"

#: Labelled series per axes (in the figure's axes order), for each plot.
SERIES: dict[str, list[int]] = {
    "alphazero": [4, 4, 4],  # 4 CDFs | 3 CDFs + the paper's median | ours x2 + paper x2
    "wordcount": [3, 3],  # ours | paper, 3 variants each
    "gandiva": [1, 2],  # throughput bars | ours + paper
    "gang": [2, 6],  # ours + paper bars | 3 variants x (ours, paper)
    "gang-ray": [2],  # ours + paper bars
    "fairshare": [4, 4],  # 3 users + the target shares, FIFO | FairShare
    "overhead": [1, 2, 1],  # wall cost | ours + paper bars | makespan (twin axis)
    "simulator": [2, 1],  # wall time + target | events/s
    "queueing": [5, 5],  # 5 policies: mean JCT | makespan
    "deadlines": [4, 4],  # 4 policies: SLO | GPU utilisation
}


def _script(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", ROOT / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while being defined
    spec.loader.exec_module(module)
    return module


def _figure(name: str) -> Any:
    if name == "queueing":
        return _script("emergent").figure(json.loads((ROOT / "docs/img/queueing.json").read_text()))
    if name == "deadlines":
        table = json.loads((ROOT / "docs/img/deadlines.json").read_text())
        return _script("tetrisched").figure(table)
    return evaluation.load(EVALUATION / f"{name}.json").figure()


def _series(ax: Any) -> list[tuple[str, tuple[Any, ...]]]:
    """(label, data) of every labelled line, bar group and filled area of `ax`."""
    found: list[tuple[str, tuple[Any, ...]]] = []
    for line in ax.get_lines():
        found.append((str(line.get_label()), (tuple(line.get_xdata()), tuple(line.get_ydata()))))
    for bars in ax.containers:
        data = tuple((p.get_x(), p.get_height()) for p in bars.patches)
        found.append((str(bars.get_label()), data))
    for area in ax.collections:
        data = tuple(tuple(map(tuple, p.vertices)) for p in area.get_paths())
        found.append((str(area.get_label()), data))
    return [(label, data) for label, data in found if not label.startswith("_")]


def _labelled(artist: Any) -> bool:
    return not str(artist.get_label()).startswith("_")


def _style(line: Any) -> tuple[str, str, str]:
    """What tells a line apart from the others: colour, dash pattern, marker."""
    from matplotlib.colors import to_hex

    return (to_hex(line.get_color()), str(line.get_linestyle()), str(line.get_marker()))


def _close(fig: Any) -> None:
    import matplotlib.pyplot as plt

    plt.close(fig)


@pytest.mark.parametrize("name", sorted(SERIES))
def test_plot_series(name: str) -> None:
    fig = _figure(name)
    try:
        per_axes = [_series(ax) for ax in fig.axes]
        assert [len(s) for s in per_axes] == SERIES[name], [[lab for lab, _ in s] for s in per_axes]
        for ax, series in zip(fig.axes, per_axes, strict=True):
            labels = [label for label, _ in series]
            assert len(set(labels)) == len(labels), f"{name}: a label twice on one axes: {labels}"
            data = [d for _, d in series]
            for i, one in enumerate(data):
                assert one, f"{name}: series {labels[i]!r} is empty"
                for j in range(i):
                    assert one != data[j], f"{name}: {labels[i]!r} repeats {labels[j]!r}"
            styles = [_style(line) for line in ax.get_lines() if _labelled(line)]
            assert len(set(styles)) == len(styles), f"{name}: two lines drawn alike: {styles}"
            low, high = ax.get_ylim()
            assert low <= 0 < high, f"{name}: a value axis that does not start at zero"
    finally:
        _close(fig)


def test_every_workload_has_its_plot_data() -> None:
    for name in evaluation.WORKLOADS:
        result = evaluation.load(EVALUATION / f"{name}.json")
        assert result.data, f"{name}.json has no plot data: escher bench {name} --out ..."
        assert name in SERIES


def test_a_fresh_run_draws_the_same_kind_of_figure(tmp_path: Path) -> None:
    result = evaluation.run("gandiva", quick=True, seed=0)
    written = result.write(tmp_path)
    drawn = evaluation.load(tmp_path / "gandiva.json").figure()
    try:
        assert [len(_series(ax)) for ax in drawn.axes] == SERIES["gandiva"]
    finally:
        _close(drawn)
    assert {p.suffix for p in written} == {".json", ".png"}
