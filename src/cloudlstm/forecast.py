"""Forecast new data with a trained run: ``Forecaster.load(run_dir).forecast(history)``.

Everything the forecast needs travels in the checkpoint
(:class:`~cloudlstm.data.spec.DataSpec`): the model is rebuilt from the run's
``config.yaml`` and the checkpoint's weights, and new data is normalised with the training
statistics (never refitted). Input and output are long-format tables, as ``data=points``
reads them (a run trained on a wide table, such as METR-LA's, also takes that form)::

    f = Forecaster.load("outputs/runs/2026-01-02/10-00-00-000000")
    forecast = f.forecast(history)   # history: timestamp, id, x, y, <channels>
    f.update(snapshot)               # or feed one time step at a time ...
    forecast = f.forecast()          # ... and forecast from what was fed

(Not to be confused with :class:`cloudlstm.models.ForecastModel`, the models' base class.)
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from datetime import tzinfo
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from cloudlstm.data.pipeline.forecast_input import (
    ForecastInput,
    TimeReading,
    build_input,
    check_reading,
    checked_snapshot,
    far_outside,
    history_step,
    long_rows,
    parse_history,
    row_positions,
    warn_other_clock,
)
from cloudlstm.data.pipeline.wide_history import long_history
from cloudlstm.data.sources.bad_values import (
    RowNames,
    channel_values,
    check_mode,
    index_row_names,
)
from cloudlstm.data.sources.tables import pivot_long
from cloudlstm.data.sources.times import counting_unit, time_zone
from cloudlstm.data.spec import DataSpec
from cloudlstm.engine.forecast_columns import FILLED_COLUMN, HORIZON_COLUMN, quantile_column
from cloudlstm.engine.module import ForecastModule
from cloudlstm.errors import UserError, no_gpu
from cloudlstm.models.build import neighbours_needed, neighbours_setting

__all__ = ["FILLED_COLUMN", "Forecaster", "TimeReading", "check_device"]

log = logging.getLogger(__name__)


# the kinds of device a forecast runs on (torch knows more, none of which runs a model here)
DEVICE_KINDS = ("cpu", "cuda", "mps")


def check_device(device: object) -> str | None:
    """``device`` (``device=`` of predict.py) as torch names it, checked to be one this
    machine has; None stays None (a GPU when there is one).

    Raises:
        UserError: no device kind of :data:`DEVICE_KINDS` (``device=gpu``), a GPU where torch
            finds none (as train.py refuses ``trainer=gpu`` there), or a GPU number beyond
            those torch sees.
    """
    if device is None:
        return None
    text = str(device)
    here = ["cpu"]
    if torch.cuda.is_available():
        here += ["cuda", *(f"cuda:{n}" for n in range(torch.cuda.device_count()))]
    if torch.backends.mps.is_available():
        here.append("mps")
    try:
        kind = torch.device(text)
    except RuntimeError:
        kind = None
    if kind is None or kind.type not in DEVICE_KINDS:
        raise UserError(
            f"device={text} is no device to forecast on: give one of {', '.join(DEVICE_KINDS)} "
            f"or cuda:<n> (this machine has {', '.join(here)}), or leave it out for a GPU when "
            "there is one."
        )
    if kind.type == "cuda" and not torch.cuda.is_available():
        raise no_gpu(f"device={text}", "forecast on the CPU: device=cpu")
    if kind.type == "cuda" and kind.index is not None and kind.index >= torch.cuda.device_count():
        raise UserError(
            f"device={text}, but torch sees {torch.cuda.device_count()} GPU(s): give one of "
            f"{', '.join(here)}."
        )
    if kind.type == "mps" and not torch.backends.mps.is_available():
        raise UserError(
            f"device={text}, but torch finds no Apple GPU (MPS) here: give one of "
            f"{', '.join(here)}."
        )
    return text


def _other_checkpoint(run_dir: str | Path, ckpt: object) -> Callable[[], str]:
    """What to do about the checkpoint ``ckpt`` of ``run_dir`` where it cannot be read:
    another one that can (:func:`~cloudlstm.rundir.layout.other_sound`), looked for then."""
    from cloudlstm.rundir.layout import other_sound  # as _parameter_free: on use

    offer = (
        "Forecast with another checkpoint of the run: {ways} or the path of a .ckpt that "
        "training wrote."
    )
    return lambda: other_sound(Path(run_dir).expanduser(), ckpt, offer)


def _parameter_free(run: Path) -> UserError | None:
    """The line for a run of a model without parameters (persistence), which trains nothing
    and so writes no checkpoint; None for any other run, and where its ``metrics.json`` is
    damaged: the checkpoint's own line then names that file (``other_sound``), and the
    file's damage is no reason to hide what was refused."""
    from cloudlstm.rundir.layout import read_metrics

    try:
        results = (read_metrics(run) if run.is_dir() else None) or {}
    except UserError:
        return None
    if results.get("num_params") != 0:
        return None
    model = (results.get("run") or {}).get("model", "its model")
    return UserError(
        f"{run} is a run of {model}, a model without parameters: it trains nothing, so it "
        "wrote no checkpoint, and a forecast reads the training data's description (points, "
        "step, scaler) from one. Its test results are in its metrics.json, and eval.py "
        f"run={run} tests it again."
    )


def _check_path(name: str, value: object, wanted: str) -> None:
    """Refuse an argument of :meth:`Forecaster.load` that is no path, naming it: pathlib's
    own TypeError names neither the argument nor what it should be."""
    if not isinstance(value, str | os.PathLike):
        raise UserError(f"Forecaster.load: {name} is {value!r}, not a path: give {wanted}.")


def _numbers_only(rows: pd.DataFrame, info: DataSpec, mode: str) -> pd.DataFrame:
    """A snapshot's ``rows`` with their channel cells as numbers, checked as a history's
    are (:func:`~cloudlstm.data.sources.bad_values.channel_values`), each named as a
    history's rows are (:func:`~cloudlstm.data.sources.bad_values.index_row_names`): by
    the snapshot's index label where it has an index of its own (a slice of a larger table);
    with ``mode="warn"`` a bad cell is logged and kept empty (missing). Good cells keep
    their float64 value, which the missing-value mark is compared with. Its coordinates are
    read as a history's are (:func:`~cloudlstm.data.pipeline.forecast_input.row_positions`):
    kept, a latitude out of range would make every forecast of the next steps refuse the
    stream.

    Raises:
        UserError: ``mode="error"`` and a cell is no finite number; a coordinate that is no
            number or out of degrees, whatever ``mode``.
    """
    names = index_row_names(rows.index)
    row_positions(rows, info, "the snapshot", names)
    values = channel_values(rows, info.read_channels, "the snapshot", mode, row_names=names)
    numbers = {
        c: pd.to_numeric(rows[c], errors="coerce").where(np.isfinite(values[:, j]))
        for j, c in enumerate(info.read_channels)
    }
    return rows.assign(**numbers)


class Forecaster:
    """A trained model that forecasts the J steps after a long-format history.

    Build it with :meth:`load`. The history has one row per ``(time, point)``: the training
    data's time, id and coordinate columns (``info.time_col``, ``info.id_col``,
    ``info.coord_cols``) and one column per value channel (``info.value_channels``), in
    real units, sampled at the training step. Only its last ``history_steps`` steps are
    read. Missing rows or cells are filled as training filled gaps (each series holds its
    last reading, a leading gap takes the first one) and counted in the output's
    ``filled_inputs``.

    Points: the forecast covers every point with a row in those steps. A point model
    (CloudLSTM, ...) takes new point ids too; a model tied to its training points (grid
    models, MLP, LSTM: ``info.fixed_points``) needs exactly those.
    """

    def __init__(self, module: ForecastModule, checkpoint: Path) -> None:
        self.module = module
        self.checkpoint = checkpoint
        self._buffer: pd.DataFrame | None = None
        self._zone: tzinfo | None = None  # of the times fed to update()
        self._reading: TimeReading | None = None  # how they were read

    @property
    def info(self) -> DataSpec:
        """The training data's description, as the module carries it (with its model's
        facts: which points it takes)."""
        return self.module.spec

    @classmethod
    def load(
        cls, run_dir: str | Path, ckpt: str | Path = "best", device: str | None = None
    ) -> Forecaster:
        """Rebuild a run's model from its ``config.yaml`` and a checkpoint.

        Args:
            run_dir: the run directory (``outputs/runs/<date>/<time>``).
            ckpt: ``"best"`` (the tested checkpoint), ``"last"``, or the path of a ``.ckpt``.
            device: ``"cpu"``, ``"cuda"``, ``"cuda:1"``, ``"mps"``; None = a GPU when there
                is one.

        Raises:
            UserError: ``run_dir`` or ``ckpt`` is no path (None, a number), no such run
                directory or checkpoint, a checkpoint written before checkpoints stored what
                forecasting needs, a checkpoint of another run's training (its quantile head,
                anchor or data description differ from the run's), or a device this machine
                does not have
                (:func:`check_device`).
        """
        from cloudlstm.assembly.assemble import restore  # the CLI's build path, loaded on use

        _check_path("run_dir", run_dir, 'a run directory\'s path ("outputs/runs/<date>/<time>")')
        _check_path("ckpt", ckpt, '"best", "last" or the path of a .ckpt')

        try:
            other = _other_checkpoint(run_dir, ckpt)
            module, path = restore(run_dir, ckpt, check_device(device), other)
        except UserError as err:
            raise _parameter_free(Path(run_dir)) or err from None
        return cls(module, path)

    @property
    def history_steps(self) -> int:
        """Steps of history a forecast reads (the input steps, or the seasonal reach)."""
        return self.info.history_steps

    @property
    def output_steps(self) -> int:
        """J, the forecast steps."""
        return self.info.output_steps

    def forecast(
        self,
        history: pd.DataFrame | None = None,
        what: str = "the history",
        bad_values: str = "error",
        reading: TimeReading | None = None,
        *,
        row_names: RowNames | None = None,
    ) -> pd.DataFrame:
        """The forecast of the J steps after the last timestamp of ``history``.

        Args:
            history: long-format rows (see the class docstring); None = what :meth:`update`
                was fed.
            what: how error messages name the history (e.g. its file); without a history,
                "the stream fed to update()".
            bad_values: the values of the steps read are checked as training data is: a
                cell that is no finite number, a value outside its channel's valid range
                (``data.valid_ranges`` of the run, and its source's) or absurd against the
                training median and spread (the run's ``data.max_abs_z``) is refused in one
                line (``error``) or, with ``warn``, logged and treated as missing (filled).
            reading: how the history's times are read
                (:class:`~cloudlstm.data.pipeline.forecast_input.TimeReading`); None: as the
                run's training data were.
            row_names: how messages name a row of ``history`` by its position, where it was
                read from a file: as the user finds it there (``predict.py`` gives
                :func:`~cloudlstm.data.sources.tables.file_row_names`, a CSV's line); None:
                by the DataFrame's index (``data row 19``, ``row with index 5019``).

        Returns:
            One row per (step, point): the time (in the history's time zone where its
            times had one, :func:`~cloudlstm.data.sources.times.time_zone`),
            ``horizon`` (1..J), the point id, its
            coordinates (moving points: the forecast positions), one column per value channel
            in real units, with ``module.quantiles`` one per channel and level
            (``PM2.5_q10``, ``PM2.5_q50``, ...; calibrated where the run was), and
            ``filled_inputs``.

        Raises:
            UserError: the history lacks columns or steps, is sampled at another interval,
                has bad values (``bad_values="error"``) or points the model cannot take
                (see :func:`build_input`), or fewer points than the model's neighbours
                (``model.k``).

        Points far outside the training area
        (:func:`~cloudlstm.data.pipeline.forecast_input.far_outside`) are forecast, with one
        warning on the ``cloudlstm.forecast`` logger.
        """
        if history is None:
            if self._buffer is None:
                raise UserError("Nothing to forecast from: pass a history or call update() first.")
            history = self._buffer
            # its rows are the stream's, not a table of the user's: name it so
            what = "the stream fed to update()" if what == "the history" else what
        window = build_input(history, self.info, what, bad_values, reading, row_names)
        if history is self._buffer:
            window.zone = self._zone
        self._check_enough_points(len(window.point_ids), what)
        far = far_outside(window, self.info, what)
        if far:
            log.warning(far)
        device = next(iter(self.module.parameters()), torch.empty(0)).device
        batch = {
            "x": torch.from_numpy(window.x)[None].to(device),
            "coords": torch.from_numpy(window.coords)[None].to(device),
        }
        if window.future is not None:  # the forecast steps' time features
            batch["future"] = torch.from_numpy(window.future)[None].to(device)
        with torch.no_grad():
            pred = self.module.predict_step(batch, 0)[0].cpu().numpy()  # (J, N, C)
        quantiles = None
        if self.module.quantile_levels:
            quantiles = self.module.predict_quantiles(batch)[0].cpu().numpy()  # (J, N, C, Q)
        return self._table(window, pred, quantiles)

    def _check_enough_points(self, count: int, what: str) -> None:
        """Refuse fewer points than the neighbours the model reads for each point.

        Raises:
            UserError: the model was trained with ``model.k`` (x ``model.dilation``) more
                than ``count``.
        """
        model = getattr(self.module.model, "_orig_mod", self.module.model)
        k, dilation = getattr(model, "k", None), getattr(model, "dilation", 1)
        needed = neighbours_needed(k, dilation)
        if needed is None or needed <= count:
            return
        raise UserError(
            f"{what} has readings of {count} point(s) in its last {self.history_steps} steps, "
            f"but the model was trained with {neighbours_setting(k, dilation)} neighbours per "
            f"point: give readings of at least {needed} points."
        )

    def update(
        self,
        snapshot: pd.DataFrame,
        reading: TimeReading | None = None,
        bad_values: str = "error",
    ) -> None:
        """Add rows (usually one time step of readings) to the stream :meth:`forecast` reads.

        Only the last ``history_steps`` steps are kept. A row for a time and point fed
        before replaces the earlier one (a reading sent again, or corrected); rows of an
        earlier time than the newest fill that step. A run trained on a wide table takes
        wide rows too (:func:`~cloudlstm.data.pipeline.wide_history.long_history`).
        ``reading`` says how its times are read, as for :meth:`forecast`; given once, it
        holds for the stream's later snapshots, which write their times as the stream does
        (a snapshot of day-first dates such as 05/01/2021 would otherwise be read month
        first, alone, and warned of at every call). ``bad_values``: a value :meth:`forecast`
        would refuse (a cell that is no finite number, such as ``n/a`` or ``inf``, a value
        outside its channel's valid range or absurd) is refused here (``error``), or logged
        and kept as missing (``warn``), named by the snapshot's row: its index label where
        the snapshot has an index of its own, as :meth:`forecast` names a history's; kept
        as it was, it would make every forecast of the next ``history_steps`` steps refuse
        the stream.

        Raises:
            UserError: the snapshot cannot be read as a history can't
                (:meth:`forecast`), writes its times in another form than the stream's, has
                a value :meth:`forecast` would refuse (``bad_values="error"``), or has two
                rows of one time and point: which one holds the reading is not known, as
                :meth:`forecast` refuses them in a history. The stream is then left as it
                was.
        """
        mode = check_mode(bad_values)
        long = long_history(snapshot, self.info, "the snapshot", mode)
        check_reading(reading)
        reading = reading or self._reading or TimeReading()
        rows = _numbers_only(
            parse_history(long, self.info, "the snapshot", reading), self.info, mode
        )
        time_format, time_unit = reading.settings(self.info)
        zone = time_zone(long[self.info.time_col], time_format, time_unit)
        if self._buffer is None:  # the first snapshot sets the stream's form
            warn_other_clock(long[self.info.time_col], zone, self.info, "the snapshot")
        else:
            self._refuse_another_clock(zone)
        key = [self.info.time_col, self.info.id_col]
        times = rows[self.info.time_col].to_numpy()
        if self._buffer is not None:
            times = np.concatenate([self._buffer[self.info.time_col].to_numpy(), times])
        step = history_step(times, self.info, "the stream fed to update()", zone or self._zone)
        # the snapshot's own rows for one time and point are refused, as a history's are
        clock = zone is None and counting_unit(long[self.info.time_col], time_unit) is None
        grid = pivot_long(
            rows, *key, step, "error", "the snapshot", refuse_sparse=False, clock=clock
        )
        rows = checked_snapshot(rows, grid, self.info, mode, zone, long_rows(snapshot, self.info))
        start = times.max() - (self.history_steps - 1) * step  # the first step kept
        self._warn_dropped(rows[self.info.time_col].to_numpy(), start)
        stream = rows if self._buffer is None else pd.concat([self._buffer, rows])
        stream = stream.drop_duplicates(subset=key, keep="last")
        stream = stream[stream[self.info.time_col].to_numpy() >= start]
        # set together, after every check: a refused snapshot leaves the stream as it was
        self._buffer, self._zone = stream.reset_index(drop=True), zone
        self._reading = reading

    def _warn_dropped(self, snapshot_times: np.ndarray, start: np.datetime64) -> None:
        """Warn where feeding a snapshot drops readings: all the stream's earlier ones (the
        snapshot is more than ``history_steps`` after them: an outage, or a mistyped time
        that every later snapshot is then older than), or the snapshot's own (all older
        than the steps the stream keeps)."""
        first = pd.Timestamp(start)
        if self._buffer is not None:
            last = pd.Timestamp(self._buffer[self.info.time_col].max())
            if last < first:
                log.warning(
                    "the snapshot's times reach %s, more than %d steps after the stream's "
                    "last (%s): the stream keeps the last %d steps, so every earlier reading "
                    "is dropped, and a snapshot of before %s will be too. If a time is "
                    "mistyped, start the stream anew with Forecaster.load.",
                    pd.Timestamp(snapshot_times.max()),
                    self.history_steps,
                    last,
                    self.history_steps,
                    first,
                )
        if (snapshot_times < start).all():
            log.warning(
                "the snapshot's readings (%s) are older than the %d steps the stream keeps "
                "(from %s): they are dropped.",
                pd.Timestamp(snapshot_times.max()),
                self.history_steps,
                first,
            )

    def _refuse_another_clock(self, zone: tzinfo | None) -> None:
        """Refuse a snapshot whose times are written with a UTC offset where the stream's
        were written without one, or the reverse (any two zones are one clock: UTC).

        Raises:
            UserError: the snapshot changes the form; its steps would be read an offset
                away from the stream's (an hour from a step on a 1-hour grid).
        """
        if (zone is None) == (self._zone is None):
            return
        this, before = ("with", "without") if zone is not None else ("without", "with")
        raise UserError(
            f"the snapshot's times are written {this} a UTC offset, the stream's before it "
            f"{before} one: times with an offset are read in UTC and times without one as "
            "written, so its steps would be read an offset away from the stream's. Write "
            "every snapshot's times one way (or start the stream anew with Forecaster.load)."
        )

    def _table(
        self, window: ForecastInput, pred: np.ndarray, quantiles: np.ndarray | None = None
    ) -> pd.DataFrame:
        """The long-format forecast from ``pred (J, N, C)`` in real units, and its
        ``quantiles (J, N, C, Q)`` where the model forecasts them."""
        info = self.info
        j, n, _ = pred.shape
        values = len(info.value_channels)
        if info.moving:  # the forecast positions are the pos_* channels
            coords = pred[..., values:]
        else:
            coords = np.broadcast_to(window.raw_coords, (j, n, info.num_dims))
        horizon = np.repeat(np.arange(1, j + 1), n)
        times = pd.DatetimeIndex(window.last_time + horizon * window.step)
        if window.zone is not None:  # the times are UTC
            times = times.tz_localize("UTC").tz_convert(window.zone)
        columns = {
            info.time_col: times,
            HORIZON_COLUMN: horizon,
            info.id_col: np.tile(window.point_ids, j),
            **{c: coords[..., d].ravel() for d, c in enumerate(info.coord_cols)},
            **{c: pred[..., k].ravel() for k, c in enumerate(info.value_channels)},
            **self._quantile_columns(quantiles),
            FILLED_COLUMN: np.tile(window.filled, j),
        }
        return pd.DataFrame(columns)

    def _quantile_columns(self, quantiles: np.ndarray | None) -> dict[str, np.ndarray]:
        """``<channel>_q<percent>`` columns of ``quantiles (J, N, C, Q)``, channel by
        channel, levels ascending; none without quantiles."""
        if quantiles is None:
            return {}
        levels = self.module.quantile_levels
        return {
            quantile_column(c, tau): quantiles[..., k, q].ravel()
            for k, c in enumerate(self.info.value_channels)
            for q, tau in enumerate(levels)
        }
