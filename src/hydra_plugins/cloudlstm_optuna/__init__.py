"""cloudlstm's Optuna sweeper: ``hydra/sweeper=optuna`` (``hparams_search=optuna``).

In the place of hydra-optuna-sweeper, whose last release holds Optuna below 3. Its settings
(``conf/hydra/sweeper/optuna.yaml``) are those users know from that plugin: ``n_trials``,
``direction``, ``study_name``, ``storage``, ``sampler`` and ``params`` in Hydra's override
grammar (``choice``, ``range``, ``interval``, ``tag(log, ...)``); and:

* the study is stored, by default in ``<sweep dir>/optuna.db`` (SQLite): the same command
  with the same ``hydra.sweep.dir`` continues a search that was ended, keeping its
  finished trials and running again, in their own run directories, the trials it left
  unfinished;
* ``n_jobs`` trials are asked at once and launched as one batch through the configured
  launcher (with ``hydra/launcher=slurm``: one SLURM array per batch);
* ``direction: null`` (what ``hparams_search=optuna`` sets) is ``optimized_metric``'s,
  declared with its metric (:func:`cloudlstm.engine.declared_metrics.monitor_mode`: ``maximize`` for
  ``val/ssim``); a contrary one is refused, and so is a pruning monitor of the other
  direction;
* ``pruner``: the jobs report their validation metric to their trial through the storage
  and stop early when pruned (:mod:`cloudlstm.engine.pruning`); such trials are recorded PRUNED.
* a batch of which more than ``max_failure_rate`` failed ends the search as the default
  sweeper ends a failed sweep: the comparison of the finished trials (the
  ``on_multirun_end`` callbacks, which Hydra calls only after a search that ended well),
  then a line per failed trial (its parameters, error and log) and a non-zero exit; a
  bug keeps its traceback. Failed trials within the rate get the same lines after the
  comparison of a search that ended well, with exit 0; but where one failed of a bug, the
  search asks no further batch, the first line says so, the last how the same command
  goes on once the bug is mended (or, where every point of the search space has a trial,
  that none goes on, and that a new study of a wider space searches more), and the
  search ends with its traceback, exit 1;
* with ``hydra/launcher=slurm``, which raises at a failed job before returning any, the
  batch's trials stay running: the report's last line is the search's (a bug to mend
  first; settings refused as given: another sweep directory), and the same command runs
  them again whatever its ``n_trials``;
* a search refused before its first trial ran (a stray job folder, a setting Hydra
  refuses, an option of ``data.source`` its source does not read: once, before the study
  is made, as the default sweeper refuses it) leaves no study of its own in the storage;
* a sampler that has tried the whole search space (``BruteForceSampler``, ``GridSampler``,
  which call ``study.stop()``) ends the search well, with the trials the space holds, and
  so does any sampler once each point of a space of ``choice``s and ``range``s has a trial;
* no point runs twice: a trial that draws the point of one tried before or of another of
  its batch is not run, but recorded PRUNED (``repeat_of``), counted neither as a failure
  nor towards ``n_trials``;
* a trial whose job SIGTERM or Ctrl-C stopped stays RUNNING, for the same command to
  continue; with ``hydra/launcher=joblib`` the signal to the search is passed on to its
  running trials, as in the default sweeper (:mod:`cloudlstm.rundir.sweep_sigterm`), and the
  search ends with the signal's status after naming them; with the basic launcher, whose
  trials run in the search's process, the signal (a Ctrl-C outside a trial's training
  too) ends the search so as well: the comparison of the finished trials (those of the
  stopped batch told to the study first), then the stopped trial and how to go on.

Hydra finds sweepers only in the ``hydra_plugins`` namespace package, hence this module.
"""

from __future__ import annotations

from typing import Any

from hydra.plugins.sweeper import Sweeper
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig


class OptunaSweeper(Sweeper):
    """The plugin Hydra instantiates; the search itself is ``_search.OptunaSearch``, imported
    only when a search starts (Optuna takes seconds to import, and Hydra imports this
    module at every start of ``train.py``)."""

    def __init__(self, **settings: Any) -> None:
        # as configured, samplers and pruners not yet built (``_recursive_: false``): their
        # errors are then one line from ``setup`` rather than Hydra's instantiation trace
        self.settings = settings
        self.search: Any = None

    def setup(
        self, *, hydra_context: HydraContext, task_function: TaskFunction, config: DictConfig
    ) -> None:
        from hydra_plugins.cloudlstm_optuna._search import OptunaSearch

        self.search = OptunaSearch(self.settings)
        self.search.setup(hydra_context=hydra_context, task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> None:
        assert self.search is not None, "setup() comes first"
        self.search.sweep(arguments)
