"""What the figures show, read from the matplotlib figures rather than their pixels: every
series its own colour, the persistence forecast as a dashed reference, a bar chart's axis
near close values, and maps with coordinates, the model and the time in their titles."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from matplotlib.colors import to_hex
from matplotlib.figure import Figure

from cloudlstm.compare import find_runs, group_runs, plot
from cloudlstm.viz import _common, curves, maps, plot_forecast_maps
from tests.test_compare import write_run

PUBLISHED = Path(__file__).resolve().parents[1] / "docs" / "results" / "beijing_gpu_s23"


@pytest.fixture
def figures(monkeypatch) -> dict[str, Figure]:
    """The figures written during a test, by file name."""
    from cloudlstm.compare import plots

    saved: dict[str, Figure] = {}

    def keep(fig: Figure, path: Path) -> Path:
        saved[Path(path).name] = fig
        return _common.save_png(fig, path)

    for module in (curves, maps, plots):
        monkeypatch.setattr(module, "save_png", keep)
    return saved


@pytest.fixture
def beijing(figures, tmp_path) -> dict[str, Figure]:
    """The --plot figures of the published Beijing sweep (12 models, one persistence)."""
    plot(group_runs(find_runs([PUBLISHED])), "mae", tmp_path)
    return figures


def test_every_horizon_series_has_its_own_colour(beijing):
    ax = beijing["mae_horizon_beijing.png"].axes[0]
    lines = [line for line in ax.get_lines() if not line.get_label().startswith("persistence")]
    assert len(lines) == 11
    assert len({to_hex(line.get_color()) for line in lines}) == 11  # kNN-LSTM is not CloudCNN
    styles = [(line.get_linestyle(), line.get_marker()) for line in lines]
    assert all(a != b for a, b in zip(styles, styles[1:], strict=False))  # neighbours differ


def test_persistence_is_a_dashed_reference_in_both_figures(beijing):
    horizon = beijing["mae_horizon_beijing.png"].axes[0]
    (line,) = [line for line in horizon.get_lines() if line.get_label() == "persistence (n=3)"]
    assert line.get_linestyle() == "--" and line.get_marker() in ("None", "", None)
    bars = beijing["mae_bar_beijing.png"].axes[0]
    labels = [tick.get_text() for tick in bars.get_xticklabels()]
    assert "persistence" not in labels and len(labels) == 11  # a line, not a bar
    (reference,) = [line for line in bars.get_lines() if line.get_label() == "persistence (n=3)"]
    assert reference.get_linestyle() == "--"
    assert list(reference.get_ydata()) == pytest.approx([96.58, 96.58], abs=0.01)


def test_close_bars_start_near_the_values_and_say_so(beijing):
    ax = beijing["mae_bar_beijing.png"].axes[0]
    low, high = ax.get_ylim()
    assert 80 < low < 94.5 and 109 < high < 120  # MAE 94.5 .. 108.9, not from 0
    assert ax.get_ylabel() == f"MAE (axis from {low:.3g}, not 0)"


def test_bars_far_apart_start_at_zero(figures, tmp_path):
    write_run(tmp_path / "runs" / "a", 1.0)
    write_run(tmp_path / "runs" / "b", 4.0, model="lstm")
    plot(group_runs(find_runs([tmp_path / "runs"])), "mae", tmp_path / "figs")
    ax = figures["mae_bar_synthetic.png"].axes[0]
    assert ax.get_ylim()[0] == 0 and ax.get_ylabel() == "MAE"


def window_maps(tmp_path: Path, **kwargs) -> Figure:
    rng = np.random.default_rng(0)
    truth = rng.uniform(0, 50, (3, 20, 2))
    coords = np.column_stack([rng.uniform(116.2, 116.6, 20), rng.uniform(39.8, 40.2, 20)])
    saved: dict[str, Figure] = {}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(maps, "save_png", lambda fig, path: saved.setdefault("fig", fig))
        plot_forecast_maps(
            coords, truth, truth + 1, channel=0, channel_name="PM2.5", path=tmp_path, **kwargs
        )
    return saved["fig"]


def test_maps_title_names_the_model_channel_and_time(tmp_path):
    fig = window_maps(tmp_path, model="cloudlstm", start="2017-01-01 13:00", window=3)
    assert fig.get_suptitle() == "cloudlstm · PM2.5 · forecast from 2017-01-01 13:00"
    fig = window_maps(tmp_path, model="cloudlstm", window=3)  # data without timestamps
    assert fig.get_suptitle() == "cloudlstm · PM2.5 · test window 3"


def test_maps_have_coordinates_on_their_axes(tmp_path):
    fig = window_maps(tmp_path, model="cloudlstm", coord_names=("longitude", "latitude"))
    fig.canvas.draw()
    (bottom_left,) = [ax for ax in fig.axes if ax.get_ylabel() == "|error|\nlatitude"]
    assert bottom_left.get_xlabel() == "longitude"
    ticks = [t.get_text() for t in bottom_left.get_xticklabels() if t.get_text()]
    assert ticks and all(116 <= float(t.replace("−", "-")) <= 117 for t in ticks)
