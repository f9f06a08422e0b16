"""A Hydra callback: the comparison of a sweep's runs once the sweep has ended.

Registered in ``conf/hydra/default.yaml`` (``hydra.callbacks.compare``): at the end of a
multirun it prints ``compare <sweep dir>``'s table and, where the jobs log to W&B
(``logger=wandb``), logs it as one W&B run in the sweep's group (``--wandb``); with
``html`` set it also writes ``<sweep dir>/<html>`` (``--html``).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

log = logging.getLogger(__name__)


class CompareSweep(Callback):
    """``compare`` on the sweep directory when a multirun ends; never fails the sweep.

    A job whose ``metrics.json`` or ``config.yaml`` cannot be read has no row: one line
    names each such file (``compare: skipped (no row): ...``), and the other jobs are
    compared, as ``compare`` on the folder does.

    ``wandb``: ``"auto"`` logs the W&B run when the jobs' config has a W&B logger, or
    true/false; ``html``: a file name in the sweep directory for the web page, or None.
    """

    def __init__(self, wandb: bool | str = "auto", html: str | None = None) -> None:
        self.wandb = wandb
        self.html = html

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            self._compare(config)
        except Exception as err:  # the runs are written: a report of them must not fail them
            log.warning("compare: the sweep's comparison failed: %s: %s", type(err).__name__, err)

    def _compare(self, config: DictConfig) -> None:
        # imported here: Hydra builds the callback for single runs too, which never use it
        from cloudlstm.cli.compare.command import main
        from cloudlstm.compare.runs import find_runs

        sweep = Path(config.hydra.sweep.dir)
        # a job's damaged metrics.json or config.yaml: its run is passed over, the rest compared
        skipped: list[tuple[Path, str]] = []
        # every job failed, or tested nothing (test=false): no table, and no error either
        if not sweep.is_dir() or not find_runs([sweep], skipped=skipped):
            for _, line in skipped:  # main, which names them otherwise, is not run
                log.warning("compare: skipped (no row): %s", line)
            log.info("compare: no finished runs under %s to compare", sweep)
            return
        argv = [str(sweep)]
        if self._log_to_wandb(config):
            argv.append("--wandb")
        if self.html:
            argv += ["--html", str(sweep / self.html)]
        if main(argv) != 0:  # main printed the one-line reason
            log.warning("compare: no comparison of %s", sweep)

    def _log_to_wandb(self, config: DictConfig) -> bool:
        if self.wandb == "auto":
            return "wandb" in (config.get("logger") or {})
        return bool(self.wandb)
