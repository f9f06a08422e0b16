"""Lightning datamodule: load a stream, split it chronologically, normalise, cut windows."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from lightning.pytorch import LightningDataModule
from torch.utils.data import DataLoader

from cloudlstm.data.stream import PointCloudStream
from cloudlstm.data.transforms import StandardScaler, normalize_coords
from cloudlstm.data.windows import WindowDataset, count_windows

__all__ = ["PointCloudDataModule", "split_bounds"]

SPLITS = ("train", "val", "test")


def split_bounds(
    num_steps: int, val_fraction: float, test_fraction: float
) -> dict[str, tuple[int, int]]:
    """Chronological ``[start, end)`` time ranges of the train / val / test parts.

    The test part is the last ``round(test_fraction * T)`` steps; validation is the last
    ``round(val_fraction * (T - n_test))`` steps of the rest; training is what is left.
    """
    n_test = int(round(test_fraction * num_steps))
    n_trainval = num_steps - n_test
    n_val = int(round(val_fraction * n_trainval))
    n_train = n_trainval - n_val
    return {
        "train": (0, n_train),
        "val": (n_train, n_trainval),
        "test": (n_trainval, num_steps),
    }


class PointCloudDataModule(LightningDataModule):
    """Datamodule over one point-cloud stream (see ``docs/design.md`` for the batch format).

    Args:
        source: any object with ``.load() -> PointCloudStream`` (e.g.
            :class:`~cloudlstm.data.synthetic.SyntheticAdvectionDiffusion`), a
            :class:`PointCloudStream` itself, or a Hydra config mapping with ``_target_``.
        input_steps: M, past steps fed to the model.
        output_steps: J, future steps to predict.
        batch_size: windows per batch.
        val_fraction: fraction of the non-test steps used for validation (taken from the end).
        test_fraction: fraction of all steps used for testing (the last ones).
        stride: step between window starts (all splits).
        num_workers, pin_memory: passed to the DataLoaders.

    The stream is loaded once; the scaler is fitted on the training part only; coordinates
    are min-max normalised to [0, 1]. Properties such as :attr:`num_channels` set the module
    up on first use, so a model can be sized before ``Trainer.fit``.
    """

    def __init__(
        self,
        source: Any,
        input_steps: int = 12,
        output_steps: int = 12,
        batch_size: int = 32,
        val_fraction: float = 0.1,
        test_fraction: float = 0.2,
        stride: int = 1,
        num_workers: int = 0,
        pin_memory: bool = False,
    ) -> None:
        super().__init__()
        for name, value in (
            ("input_steps", input_steps),
            ("output_steps", output_steps),
            ("batch_size", batch_size),
            ("stride", stride),
        ):
            if isinstance(value, bool) or int(value) != value or value < 1:
                raise ValueError(
                    f"PointCloudDataModule: {name} must be an integer >= 1; got {value}."
                )
        for name, value in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
            if not (math.isfinite(value) and 0.0 <= value < 1.0):
                raise ValueError(f"PointCloudDataModule: {name} must be in [0, 1); got {value}.")
        if int(num_workers) != num_workers or num_workers < 0:
            raise ValueError(f"PointCloudDataModule: num_workers must be >= 0; got {num_workers}.")
        self.save_hyperparameters(ignore=["source"], logger=False)
        if isinstance(source, Mapping) and "_target_" in source:
            from hydra.utils import instantiate

            source = instantiate(source)
        if not isinstance(source, PointCloudStream) and not callable(getattr(source, "load", None)):
            raise TypeError(
                "PointCloudDataModule: source must have a .load() -> PointCloudStream method "
                f"(or be a PointCloudStream); got {type(source).__name__}."
            )
        self.source = source
        self.input_steps = int(input_steps)
        self.output_steps = int(output_steps)
        self.batch_size = int(batch_size)
        self.val_fraction = float(val_fraction)
        self.test_fraction = float(test_fraction)
        self.stride = int(stride)
        self.num_workers = int(num_workers)
        self.pin_memory = bool(pin_memory)

        self._stream: PointCloudStream | None = None
        self._built = False
        self._scaler_state: dict | None = None
        self.scaler = StandardScaler()
        self.datasets: dict[str, WindowDataset | None] = dict.fromkeys(SPLITS)
        self.bounds: dict[str, tuple[int, int]] = {}
        self._coords: torch.Tensor | None = None

    # ------------------------------------------------------------------ loading / setup
    @property
    def stream(self) -> PointCloudStream:
        """The raw stream (loaded on first access, then kept)."""
        if self._stream is None:
            stream = self.source if isinstance(self.source, PointCloudStream) else None
            if stream is None:
                stream = self.source.load()
            if not isinstance(stream, PointCloudStream):
                raise TypeError(
                    f"{type(self.source).__name__}.load() must return a PointCloudStream; got "
                    f"{type(stream).__name__}."
                )
            self._stream = stream
        return self._stream

    def prepare_data(self) -> None:
        # Generates / downloads (and caches) the data; loads it only once per process.
        _ = self.stream

    def setup(self, stage: str | None = None) -> None:
        if self._built:
            return
        stream = self.stream
        m, j = self.input_steps, self.output_steps
        self.bounds = split_bounds(stream.num_steps, self.val_fraction, self.test_fraction)
        span = m + j
        for split, (start, end) in self.bounds.items():
            optional = (split == "val" and self.val_fraction == 0) or (
                split == "test" and self.test_fraction == 0
            )
            if end - start < span and not optional:
                raise ValueError(
                    f"PointCloudDataModule: the {split} part of stream '{stream.name}' has "
                    f"{end - start} steps (of T={stream.num_steps}), but one window needs "
                    f"input_steps + output_steps = {m} + {j} = {span}. Use a longer stream, "
                    "shorter windows, or different val/test fractions."
                )

        tr0, tr1 = self.bounds["train"]
        if self._scaler_state is not None:
            self.scaler = StandardScaler.from_dict(self._scaler_state)
        else:
            self.scaler = StandardScaler().fit(stream.values[tr0:tr1], stream.mask[tr0:tr1])
        if self.scaler.num_channels != stream.num_channels:
            raise ValueError(
                f"PointCloudDataModule: restored scaler has {self.scaler.num_channels} channels "
                f"but the stream has {stream.num_channels}."
            )
        normed = self.scaler.transform(stream.values.astype(np.float32))
        normed = np.where(stream.mask, normed, 0.0).astype(np.float32)
        self._coords = torch.as_tensor(normalize_coords(stream.coords), dtype=torch.float32)
        values_t = torch.from_numpy(normed)
        mask_t = torch.from_numpy(stream.mask)
        for split, (start, end) in self.bounds.items():
            if end - start < span:
                self.datasets[split] = None
                continue
            self.datasets[split] = WindowDataset(
                values_t,
                mask_t,
                self._coords,
                m,
                j,
                stride=self.stride,
                start=start,
                end=end,
            )
        self._built = True

    def _ensure_setup(self) -> None:
        if not self._built:
            self.setup()

    # ------------------------------------------------------------------ properties
    @property
    def coords(self) -> torch.Tensor:
        """``(N, L)`` normalised coordinates (float32)."""
        self._ensure_setup()
        return self._coords

    @property
    def num_points(self) -> int:
        return self.stream.num_points

    @property
    def num_channels(self) -> int:
        return self.stream.num_channels

    @property
    def num_dims(self) -> int:
        return self.stream.num_dims

    @property
    def channel_names(self) -> list[str]:
        return list(self.stream.channel_names)

    @property
    def train_dataset(self) -> WindowDataset | None:
        self._ensure_setup()
        return self.datasets["train"]

    @property
    def val_dataset(self) -> WindowDataset | None:
        self._ensure_setup()
        return self.datasets["val"]

    @property
    def test_dataset(self) -> WindowDataset | None:
        self._ensure_setup()
        return self.datasets["test"]

    # ------------------------------------------------------------------ loaders
    def _loader(self, split: str, shuffle: bool) -> DataLoader | list:
        self._ensure_setup()
        dataset = self.datasets[split]
        if dataset is None:  # the split was disabled with a zero fraction
            return []
        return DataLoader(
            dataset,
            batch_size=self.batch_size,
            shuffle=shuffle,
            num_workers=self.num_workers,
            pin_memory=self.pin_memory,
            persistent_workers=self.num_workers > 0,
            drop_last=False,
        )

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", shuffle=True)

    def val_dataloader(self) -> DataLoader | list:
        return self._loader("val", shuffle=False)

    def test_dataloader(self) -> DataLoader | list:
        # Not shuffled: windows come in chronological order.
        return self._loader("test", shuffle=False)

    def predict_dataloader(self) -> DataLoader | list:
        return self._loader("test", shuffle=False)

    # ------------------------------------------------------------------ checkpointing
    def state_dict(self) -> dict[str, Any]:
        return {"scaler": self.scaler.to_dict()} if self.scaler.fitted else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if "scaler" in state_dict:
            self._scaler_state = dict(state_dict["scaler"])
            self.scaler = StandardScaler.from_dict(self._scaler_state)

    # ------------------------------------------------------------------ summary
    def summary(self) -> dict[str, Any]:
        """Sizes of the data and of each split (all plain Python types)."""
        self._ensure_setup()
        stream = self.stream
        steps = {s: e - b for s, (b, e) in self.bounds.items()}
        windows = {
            s: count_windows(n, self.input_steps, self.output_steps, self.stride)
            for s, n in steps.items()
        }
        return {
            "name": stream.name,
            "num_points": stream.num_points,
            "num_channels": stream.num_channels,
            "num_dims": stream.num_dims,
            "channel_names": list(stream.channel_names),
            "total_steps": stream.num_steps,
            "steps": steps,
            "windows": windows,
            "bounds": {s: list(b) for s, b in self.bounds.items()},
            "missing_fraction": stream.missing_fraction,
            "input_steps": self.input_steps,
            "output_steps": self.output_steps,
            "stride": self.stride,
        }

    def print_summary(self, console: Any = None) -> None:
        """Print :meth:`summary` as a small rich table."""
        from rich.console import Console
        from rich.table import Table

        info = self.summary()
        table = Table(title=f"data: {info['name']}", show_header=True, header_style="bold")
        table.add_column("item")
        table.add_column("value", justify="right")
        table.add_row("points N", str(info["num_points"]))
        table.add_row("channels C", f"{info['num_channels']} ({', '.join(info['channel_names'])})")
        table.add_row("total steps T", str(info["total_steps"]))
        table.add_row("window M -> J", f"{info['input_steps']} -> {info['output_steps']}")
        table.add_row("missing", f"{info['missing_fraction']:.2%}")
        for split in SPLITS:
            b, e = info["bounds"][split]
            table.add_row(
                f"{split}",
                f"steps [{b}, {e}) = {info['steps'][split]}, windows {info['windows'][split]}",
            )
        (console or Console()).print(table)

    def __repr__(self) -> str:
        return (
            f"PointCloudDataModule(source={self.source!r}, M={self.input_steps}, "
            f"J={self.output_steps}, batch_size={self.batch_size})"
        )
