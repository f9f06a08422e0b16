"""cloudlstm.viz: worst-point selection exactly, and every figure as a readable PNG."""

from __future__ import annotations

import re
from pathlib import Path

import matplotlib.image as mpimg
import matplotlib.pyplot as plt
import numpy as np
import pytest

from cloudlstm.viz import (
    default_horizons,
    plot_forecast_maps,
    plot_horizon_curve,
    plot_worst_series,
    point_mae,
    worst_points,
)

M, J, N, C = 5, 6, 300, 2
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def window() -> dict[str, np.ndarray]:
    """One test window in real units, 20 % unobserved, a few NaN forecasts."""
    rng = np.random.default_rng(0)
    truth = rng.uniform(0.0, 50.0, (J, N, C))
    forecast = truth + rng.normal(0.0, 5.0, (J, N, C))
    forecast[2, :7, 0] = np.nan
    return {
        "coords": rng.uniform(0.0, 10.0, (N, 3)),
        "history": rng.uniform(0.0, 50.0, (M, N, C)),
        "truth": truth,
        "forecast": forecast,
        "mask": rng.random((J, N, C)) > 0.2,
    }


def assert_png(path: Path) -> np.ndarray:
    """``path`` is a PNG that matplotlib reads back; returns its pixels (H, W, 4)."""
    assert path.read_bytes()[:8] == PNG_MAGIC
    pixels = mpimg.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] > 0 and pixels.shape[1] > 0
    return pixels


def maps(w: dict, **change) -> Path:
    """plot_forecast_maps on the window ``w`` (plus ``path``), some arguments changed."""
    kwargs = {k: w[k] for k in ("coords", "truth", "forecast", "path")}
    return plot_forecast_maps(**(kwargs | {"channel": 0, "channel_name": "x"} | change))


def series(w: dict, **change) -> Path:
    """plot_worst_series on the window ``w`` (plus ``path``), some arguments changed."""
    kwargs = {k: w[k] for k in ("history", "truth", "forecast", "path")}
    return plot_worst_series(**(kwargs | {"channel": 0, "channel_name": "x"} | change))


@pytest.fixture(autouse=True)
def no_pyplot_figures():
    """Every test leaves pyplot's registry of open figures as empty as it found it."""
    assert plt.get_fignums() == []
    yield
    assert plt.get_fignums() == []


@pytest.mark.parametrize(
    ("num_steps", "expected"), [(1, [1]), (2, [1, 2]), (6, [1, 3, 6]), (12, [1, 6, 12])]
)
def test_default_horizons(num_steps: int, expected: list[int]) -> None:
    assert default_horizons(num_steps) == expected


def hand_case() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """J=2, N=5, C=2; channel 1 errors |f - t| per (step, point), truth all 0.

    step 0: 1 3 2 0 5 ; step 1: 3 1 2 4 9. Channel 0 has a huge error on point 2 that
    must not count for channel 1.
    """
    truth = np.zeros((2, 5, 2))
    forecast = np.zeros((2, 5, 2))
    forecast[:, :, 1] = [[1, 3, 2, 0, 5], [3, 1, 2, 4, 9]]
    forecast[:, 2, 0] = 100.0
    mask = np.ones((2, 5, 2), dtype=bool)
    mask[1, 4, 1] = False  # point 4: MAE 5 (step 0 only)
    mask[0, 3, 1] = False  # point 3: MAE 4 (step 1 only)
    return truth, forecast, mask


def test_worst_points_hand_computed_with_mask_and_ties() -> None:
    truth, forecast, mask = hand_case()
    np.testing.assert_allclose(point_mae(truth, forecast, 1, mask), [2, 2, 2, 4, 5])
    # Points 0, 1, 2 tie at MAE 2: the lower index wins.
    np.testing.assert_array_equal(worst_points(truth, forecast, 1, 3, mask), [4, 3, 0])
    np.testing.assert_array_equal(worst_points(truth, forecast, 1, 10, mask), [4, 3, 0, 1, 2])


def test_worst_points_without_mask_and_per_channel() -> None:
    truth, forecast, _ = hand_case()
    # Unmasked MAEs 2, 2, 2, 2, 7.
    np.testing.assert_array_equal(worst_points(truth, forecast, 1, 5), [4, 0, 1, 2, 3])
    np.testing.assert_array_equal(worst_points(truth, forecast, 0, 1), [2])


def test_worst_points_skips_unobserved_and_nan() -> None:
    truth, forecast, mask = hand_case()
    mask[:, 2, 1] = False  # point 2 never observed: never picked
    forecast[1, 0, 1] = np.nan  # point 0: MAE 1 from step 0 alone
    forecast[:, 1, 1] = np.nan  # point 1: no finite error, never picked
    np.testing.assert_array_equal(worst_points(truth, forecast, 1, 5, mask), [4, 3, 0])
    with pytest.raises(ValueError, match="num_points must be >= 1"):
        worst_points(truth, forecast, 1, 0)


def test_forecast_maps_png(window: dict, tmp_path: Path) -> None:
    path = tmp_path / "nested" / "maps.png"
    out = maps(
        window | {"path": path, "coords": window["coords"][:, :2]},
        channel_name="PM2.5 (ug/m3)",
        title="test window 0",
        mask=window["mask"],
    )
    assert out == path
    assert_png(path)
    assert path.stat().st_size < 500_000


def test_forecast_maps_ignore_unobserved_truth(window: dict, tmp_path: Path) -> None:
    # Unobserved truth is drawn hollow and left out of both colour scales, so a wild
    # value there must leave every pixel as it was.
    wild = np.where(window["mask"], window["truth"], 1e6)
    first = maps(window | {"path": tmp_path / "a.png"}, mask=window["mask"])
    second = maps(window | {"path": tmp_path / "b.png", "truth": wild}, mask=window["mask"])
    np.testing.assert_array_equal(assert_png(first), assert_png(second))


def test_forecast_maps_3d_coords_and_horizons(window: dict, tmp_path: Path) -> None:
    assert window["coords"].shape == (N, 3)
    default = maps(window | {"path": tmp_path / "d.png"}, channel=1)
    single = maps(window | {"path": tmp_path / "s.png"}, channel=1, horizons=[2])
    # One column instead of three: a narrower image of the same height.
    wide, narrow = assert_png(default), assert_png(single)
    assert narrow.shape[0] == wide.shape[0] and narrow.shape[1] < wide.shape[1]


def test_forecast_maps_nothing_observed(window: dict, tmp_path: Path) -> None:
    constant = np.full((1, N, C), 3.0)
    window |= {"path": tmp_path / "empty.png", "truth": constant, "forecast": constant}
    assert_png(maps(window, mask=np.zeros((1, N, C), dtype=bool)))


def test_worst_series_png(window: dict, tmp_path: Path) -> None:
    path = series(
        window | {"path": tmp_path / "worst.png"},
        channel_name="PM2.5",
        num_points=3,
        point_ids=[f"station-{i}" for i in range(N)],
        mask=window["mask"],
    )
    assert_png(path)


def test_worst_series_nothing_observed(window: dict, tmp_path: Path) -> None:
    nothing = np.zeros((J, N, C), dtype=bool)
    assert_png(series(window | {"path": tmp_path / "none.png"}, channel=1, mask=nothing))


def test_horizon_curve_png(tmp_path: Path) -> None:
    path = plot_horizon_curve(
        {"cloudlstm": [1.0, 1.5, np.nan, 2.5], "lstm": [2.0, 2.2]},
        std={"cloudlstm": [0.1, 0.2, 0.3, 0.2]},
        metric="rmse",
        path=tmp_path / "curve.png",
    )
    assert_png(path)


# name: (call on the window, text the ValueError must contain)
BAD_INPUTS = {
    "forecast": (lambda w: maps(w, forecast=w["forecast"][:-1]), "(J, N, C)"),
    "coords": (lambda w: maps(w, coords=w["coords"][:-1]), "(N, L) with N = 300"),
    "channel": (lambda w: maps(w, channel=2), "[0, C) with C = 2"),
    "horizons": (lambda w: maps(w, horizons=[J + 1]), "1..J with J = 6"),
    "mask": (lambda w: maps(w, mask=w["mask"][0]), f"mask of shape (J, N, C) = {(J, N, C)}"),
    "history": (
        lambda w: series(w, history=w["history"][:, :-1]),
        f"(M, N, C) with (N, C) = {(N, C)}",
    ),
    "point_ids": (lambda w: series(w, point_ids=["a"]), "point_ids of length N = 300"),
    "worst_points": (lambda w: worst_points(w["truth"][0], w["forecast"][0], 0, 1), "(J, N, C)"),
    "per_step": (
        lambda w: plot_horizon_curve({"a": [[1.0]]}, path=w["path"]),
        "per_step['a'] of shape (J,)",
    ),
    "std": (
        lambda w: plot_horizon_curve({"a": [1.0]}, std={"a": [1, 2]}, path=w["path"]),
        "std['a'] of shape (J,)",
    ),
    "std names": (
        lambda w: plot_horizon_curve({"a": [1.0]}, std={"b": [1]}, path=w["path"]),
        "not in per_step: ['b']",
    ),
}


@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input_raises_naming_the_shape(case: str, window: dict, tmp_path: Path) -> None:
    call, text = BAD_INPUTS[case]
    with pytest.raises(ValueError, match=re.escape(text)):
        call(window | {"path": tmp_path / "bad.png"})
    assert not (tmp_path / "bad.png").exists()
