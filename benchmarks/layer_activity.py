"""How active each layer of a CloudLSTM-family model stays over its first training steps.

    python benchmarks/layer_activity.py [--steps 30] [--every 10] [--samples 4] [override ...]
    python benchmarks/layer_activity.py --steps 200 --every 50 experiment=milan model=cloudlstm_k6

The overrides compose ``train.py``'s config, and the model trains as that run would (its
data, optimiser, clipping, seed, and its schedule over the run's whole ``trainer.max_steps``;
no validation, logger or checkpoint), stopped after ``--steps`` steps. Before the first
step and every ``--every`` steps after it, the model forecasts the first ``--samples``
validation windows, and a row per layer (the embedding, each encoder and decoder cell, and
the head, whose value is the forecast before the training module adds its anchor, in
normalised units) gives, over the last frame that layer made:

* ``magnitude``: the mean magnitude of its value features;
* ``spread``: their standard deviation over the points, averaged over channels and
  samples: how much the layer tells the points apart;
* ``coords``: the mean of its coordinate features, and ``coord spread`` their spread over
  the points, which the next layer's neighbour search reads.

A layer whose ``magnitude`` and ``spread`` fall towards 0 has died: what comes after it sees
the same state at every point; a head whose output stays near 0 leaves the forecast at its
anchor (persistence).
"""

from __future__ import annotations

import argparse
import io
import logging
import os
import sys
import tempfile
import warnings
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import HydraException
from omegaconf import DictConfig, open_dict

from cloudlstm.assembly.assemble import assemble
from cloudlstm.cli.arguments import at_least_one
from cloudlstm.cli.scripts import hydra_error_line
from cloudlstm.errors import UserError
from cloudlstm.paths import config_dir


def activity_config(overrides: list[str], workdir: Path) -> DictConfig:
    """``train.py``'s config of ``overrides`` with no validation, logger, checkpoint or early
    stopping, nor a least number of steps (:class:`LayerActivity` stops it), its files in
    ``workdir``."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with open_dict(cfg):
        # the data are found where train.py, started here, finds them
        cfg.paths.work_dir = os.getcwd()
        cfg.paths.output_dir = str(workdir)
        cfg.trainer.min_steps = cfg.trainer.min_epochs = None
        cfg.trainer.limit_val_batches = 0
        cfg.trainer.enable_progress_bar = False
        cfg.trainer.enable_checkpointing = False
        cfg.trainer.enable_model_summary = False
        cfg.callbacks = {}
        cfg.logger = None
    return cfg


def layers(model: torch.nn.Module) -> dict[str, torch.nn.Module]:
    """The embedding, each encoder and decoder cell and the output layer of a CloudLSTM-family
    model.

    Raises:
        UserError: the model has no such layers (it is not of the CloudLSTM family).
    """
    if not all(hasattr(model, name) for name in ("embed", "encoder", "decoder")):
        raise UserError(
            f"{type(model).__name__} has no embedding, encoder and decoder cells: layer "
            "activity is read for the CloudLSTM family (model=cloudlstm, cloudgru, ...)."
        )
    named = {"embed": model.embed}
    named |= {f"encoder {i}": cell for i, cell in enumerate(model.encoder)}
    named |= {f"decoder {i}": cell for i, cell in enumerate(model.decoder)}
    return named | {"head": model.head}


def activity(cloud: torch.Tensor) -> dict[str, float]:
    """The row of a cloud ``(B, N, U, 1 + L)`` (a value, then L coordinates per channel)."""
    values, coords = cloud[..., 0], cloud[..., 1:]
    return {
        "magnitude": values.abs().mean().item(),
        "spread": values.std(dim=1).mean().item(),
        "coords": coords.mean().item(),
        "coord spread": coords.std(dim=1).mean().item(),
    }


class LayerActivity(L.Callback):
    """Prints every layer's activity on fixed windows, before the first step and every
    ``every`` steps after it, and stops training after ``steps``."""

    def __init__(self, batch: dict[str, torch.Tensor], every: int, steps: int) -> None:
        self.batch, self.every, self.steps = batch, every, steps

    def on_train_start(self, trainer: L.Trainer, module: Any) -> None:
        self._report(0, module)

    def on_train_batch_end(self, trainer: L.Trainer, module: Any, *args: Any) -> None:
        step = trainer.global_step
        if step % self.every == 0 or step == self.steps:
            self._report(step, module)
        trainer.should_stop = step >= self.steps

    def _report(self, step: int, module: Any) -> None:
        model = getattr(module.model, "_orig_mod", module.model)
        last: dict[str, torch.Tensor] = {}
        hooks = [
            layer.register_forward_hook(
                lambda _m, _a, out, name=name: last.__setitem__(
                    name, (out[0] if isinstance(out, tuple) else out).detach()
                )
            )
            for name, layer in layers(model).items()
        ]
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                batch = {k: v.to(module.device) for k, v in self.batch.items()}
                module(batch["x"], batch["coords"], batch.get("future"))
        finally:
            module.train(was_training)
            for hook in hooks:
                hook.remove()
        for name, cloud in last.items():
            row = activity(cloud)
            print(f"| {step} | {name} | " + " | ".join(f"{v:.4g}" for v in row.values()) + " |")
        sys.stdout.flush()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=at_least_one, default=30)
    parser.add_argument("--every", type=at_least_one, default=10)
    parser.add_argument("--samples", type=at_least_one, default=4)
    parser.add_argument("overrides", nargs="*", help="train.py's overrides, e.g. model=cloudgru")
    args = parser.parse_args(argv)
    os.environ.setdefault("PROJECT_ROOT", os.getcwd())  # as train.py's root_dir
    for name in ("lightning.pytorch", "lightning.fabric"):  # the table alone on the terminal
        logging.getLogger(name).setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lightning's hints and deprecations, not the run's
        try:
            cfg = activity_config(args.overrides, Path(tmp))
            L.seed_everything(cfg.seed, verbose=False)
            with redirect_stdout(io.StringIO()):  # the data's summary table
                job = assemble(cfg, Path(tmp), with_loggers=False)
            layers(job.module.model)
        except (UserError, HydraException) as err:  # a bad override: one line, as train.py's
            print(f"layer_activity: {hydra_error_line(err)}", file=sys.stderr)
            return 2
        job.datamodule.setup("fit")
        windows = next(iter(job.datamodule.val_dataloader()))
        batch = {k: v[: args.samples] for k, v in windows.items() if torch.is_tensor(v)}
        print(
            f"Layer activity of {cfg.model.get('_target_', '?').rsplit('.', 1)[-1]}, "
            f"{' '.join(args.overrides) or 'the defaults'}:\n"
        )
        print("| step | layer | " + " | ".join(activity(torch.zeros(1, 2, 1, 2))) + " |")
        print("|---:|---|---:|---:|---:|---:|")
        job.trainer.callbacks.append(LayerActivity(batch, args.every, args.steps))
        job.trainer.fit(job.module, datamodule=job.datamodule)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
