"""What a run prints: each log line once, without Lightning's advertisements, and the resolved
config as a tree at the start (the short test summary at the end: :mod:`cloudlstm.report`).

Hydra's job logging (``conf/hydra/default.yaml``: the console and ``<task_name>.log``) is
the one handler of every log line. Lightning adds stream handlers of its own when it is
imported (:data:`LIGHTNING_LOGGERS`), so each of its lines came out twice (``INFO: ...``
on stderr and Hydra's line on stdout), or, imported before Hydra configured logging, only
on stderr and not in the log file: :func:`quiet_logging` removes them wherever Hydra's
handlers are in place.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Iterable
from typing import Any

from omegaconf import DictConfig, OmegaConf

log = logging.getLogger(__name__)

# Loggers to which Lightning adds a stream handler of its own on import: ``lightning``
# always; its subpackages, and stop passing their lines on to the root logger, when they
# are imported before Hydra has configured logging (eval.py reads the run's checkpoint
# folder first).
LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")
# Lightning lines that say nothing about this run: advertisements, defaults restated
# ("limit_train_batches=1.0 ... 100% of the batches") and our own model summary callback
# replacing its default one.
NOISE = (
    "💡 Tip:",
    "was configured so 100% of the batches",
    "Trainer already configured with model summary callbacks",
    "TPU available: False",
)
# Python warnings of libraries about each other, not about this run (Lightning on a newer
# torch's pytree API).
NOISY_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)` is deprecated.*",
    # a plateau scheduler offered its metric at every step before the first validation
    # (engine/module.py, ForecastModule._plateau_cadence): skipped by design
    r"ReduceLROnPlateau conditioned on metric .* which is not available but strict",
    # under DDP: the validation and test metrics are computed from metric states gathered
    # from every rank, so each rank logs the same numbers (engine/module.py), and the
    # training loss and timings are rank 0's by design: nothing for Lightning to reduce
    r"It is recommended to use `self\.log\('(test|val/|perf/|train/loss)",
    # Lightning wherever SLURM's srun is installed (a cluster's login node): a run on one
    # node needs no srun, and one on several nodes that no launcher started is refused
    # before it could hang (assembly/build.py, check_nodes_started)
    r"The `srun` command is available on your system but is not used",
    # a run resumed in its directory finds its own checkpoints there, and one trained anew
    # has moved an earlier training's aside first (rundir/replaced.py)
    r"Checkpoint directory .* exists and is not empty",
    # a budget that ends before the first validation: the monitor is known to be logged
    # (assembly/build.py, check_monitored), and train.py says the final weights are tested
    r"`ModelCheckpoint\(monitor='.*'\)` could not find the monitored key",
)
# The config tree's first branches, in this order; the other top-level keys follow.
TREE_ORDER = ("data", "model", "module", "optimizer", "scheduler", "trainer", "callbacks")


class _DropNoise(logging.Filter):
    """Drops the log records whose message contains one of :data:`NOISE`."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(text in message for text in NOISE)


def quiet_logging() -> None:
    """One handler per log line, and no Lightning advertisements.

    Where Hydra's handlers are on the root logger, Lightning's own stream handler goes (the
    lines still reach Hydra's console and log file through the root); without them (Hydra's
    logging turned off) Lightning's stays, so its lines are not lost.
    """
    import lightning  # noqa: F401  (adds its handlers on import: it must come first)

    root = logging.getLogger()
    loggers = [logging.getLogger(name) for name in LIGHTNING_LOGGERS]
    if root.handlers:
        for logger in loggers:
            for handler in list(logger.handlers):
                if type(handler) is logging.StreamHandler:  # a FileHandler is someone's choice
                    logger.removeHandler(handler)
            logger.propagate = True
    noise = _DropNoise()
    for handler in [*root.handlers, *(h for logger in loggers for h in logger.handlers)]:
        if not any(isinstance(f, _DropNoise) for f in handler.filters):
            handler.addFilter(noise)
    for message in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def set_up(cfg: DictConfig) -> None:
    """The console of a job: :func:`quiet_logging`, then the config tree
    (``print_config``, default off for configs without the key)."""
    quiet_logging()
    if cfg.get("print_config", False):
        print_config_tree(cfg)


def print_config_tree(cfg: DictConfig, order: Iterable[str] = TREE_ORDER) -> None:
    """Print the resolved config (without ``hydra``) as a rich tree, on rank 0 only.

    The groups in ``order`` come first, then the other groups; plain top-level keys
    (``seed``, ``task_name``, ...) form the last branch.
    """
    from lightning.pytorch.utilities import rank_zero_only

    if rank_zero_only.rank == 0:
        from rich import get_console

        get_console().print(config_tree(cfg, order))


def config_tree(cfg: DictConfig, order: Iterable[str] = TREE_ORDER) -> Any:
    """The rich ``Tree`` of :func:`print_config_tree`."""
    from rich.syntax import Syntax
    from rich.tree import Tree

    keys = [key for key in cfg if key != "hydra"]
    groups = [k for k in order if k in keys and isinstance(cfg.get(k), DictConfig)]
    groups += [k for k in keys if k not in groups and isinstance(cfg.get(k), DictConfig)]
    plain = [k for k in keys if k not in groups]
    tree = Tree("CONFIG", style="dim", guide_style="dim")
    for key in groups:
        branch = tree.add(key, style="bold", guide_style="dim")
        branch.add(Syntax(_yaml(cfg[key]), "yaml", background_color="default"))
    if plain:
        branch = tree.add("other settings", style="bold", guide_style="dim")
        text = _yaml(OmegaConf.masked_copy(cfg, plain))
        branch.add(Syntax(text, "yaml", background_color="default"))
    return tree


def _yaml(node: DictConfig) -> str:
    """The node as YAML, resolved where it can be: a value that cannot be resolved yet
    (a mandatory ``???`` one, say) leaves the node as written."""
    try:
        return OmegaConf.to_yaml(node, resolve=True).rstrip()
    except Exception:  # any resolver's error: the node as written is still worth showing
        return OmegaConf.to_yaml(node).rstrip()
