"""Early pruning of Optuna trials: a Lightning callback, and how a job finds its trial.

``hparams_search=optuna`` runs every trial as an ordinary training job, through whatever
Hydra launcher is configured (in-process, joblib, SLURM). The sweeper
(``hydra_plugins.cloudlstm_optuna``) keeps the study in a storage that the jobs can reach
(by default an SQLite file in the sweep directory) and names each job's trial in the job's
environment (:mod:`cloudlstm.engine.trial_env`): the storage URL, the study name and the
trial number.

:class:`OptunaPruning` (``callbacks.optuna_pruning``, set by ``conf/hparams_search/optuna.yaml``)
reports the monitored validation metric to that trial at every validation, with the global
step as the step, and stops training when the pruner says so. The pruner judges the values
in the study's direction, so a metric declared to improve the other way is refused
(:func:`~cloudlstm.engine.study_storage.check_direction`). It also marks the trial
(user attribute ``pruned_at_step``), and the sweeper records the trial as PRUNED once the
job has returned. The job itself ends normally (its best checkpoint tested, its
``metrics.json`` written), so every launcher treats it as a job that finished.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import lightning as L

from cloudlstm.engine.study_storage import (
    PRUNED_ATTR,
    check_direction,
    open_storage,
    storage_write_fault,
)
from cloudlstm.engine.trial_env import named_trial
from cloudlstm.errors import UserError

if TYPE_CHECKING:
    import optuna

log = logging.getLogger(__name__)


def trial_of_this_job(
    named: tuple[str, str, int], pruner: optuna.pruners.BasePruner | None
) -> optuna.Trial:
    """The running trial this process trains, as the sweeper named it in the environment
    (:func:`~cloudlstm.engine.trial_env.named_trial`: storage URL, study, trial number)."""
    url, name, number = named
    import optuna

    storage = open_storage(url)
    study = optuna.load_study(study_name=name, storage=storage, pruner=pruner)
    study_id = storage.get_study_id_from_name(name)
    trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, number)
    return optuna.Trial(study, trial_id)


class OptunaPruning(L.Callback):
    """Report ``monitor`` to this job's Optuna trial at every validation; stop when pruned.

    Inert outside a search (no trial named in the environment). Only rank 0 talks to the
    storage; its decision is broadcast, so that every rank of a DDP job stops together.

    Args:
        monitor: the validation metric reported, e.g. ``val/mae`` (the source of the
            objective ``val/mae_best``: the pruner then sees the learning curve).
        pruner: an Optuna pruner (``hydra.sweeper.pruner``); None reports but never prunes.
    """

    def __init__(
        self, monitor: str = "val/mae", pruner: optuna.pruners.BasePruner | None = None
    ) -> None:
        self.monitor = monitor
        self.pruner = pruner
        self.named = named_trial()  # (storage URL, study, trial number); None: no search
        self._trial: optuna.Trial | None = None

    @property
    def active(self) -> bool:
        """Whether this job is a trial of a search."""
        return self.named is not None

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self.named is not None and stage == "fit" and trainer.is_global_zero:
            self._trial = trial_of_this_job(self.named, self.pruner)
            import optuna

            if self.pruner is not None and not isinstance(self.pruner, optuna.pruners.NopPruner):
                check_direction(self.monitor, self._trial.study.direction.name.lower())
            log.info(
                "Optuna trial %d of study %s: reporting %s at every validation.",
                self._trial.number, self._trial.study.study_name, self.monitor,
            )  # fmt: skip

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self.active or trainer.sanity_checking:
            return
        prune = self._report(trainer) if trainer.is_global_zero else False
        if trainer.strategy.broadcast(prune, src=0):
            trainer.should_stop = True

    def _report(self, trainer: L.Trainer) -> bool:
        """Report the metric at this step; True, the trial marked, when it is to be pruned."""
        trial = self._trial
        if trial is None:  # a validation outside fit (trainer.validate): no trial to report to
            return False
        value = trainer.callback_metrics.get(self.monitor)
        if value is None:
            raise UserError(
                f"callbacks.optuna_pruning.monitor={self.monitor} is not a validation metric "
                f"of this run; choose one of "
                f"{', '.join(sorted(k for k in trainer.callback_metrics if k.startswith('val/')))}."
            )
        step = trainer.global_step
        try:
            trial.report(float(value), step)
            if not trial.should_prune():
                return False
            trial.set_user_attr(PRUNED_ATTR, step)
        except Exception as err:  # SQLAlchemy's and Optuna's many errors
            assert self.named is not None
            fault = storage_write_fault(err, self.named[0])
            if fault is None:
                raise
            raise fault from None
        log.info(
            "Optuna pruned trial %d at step %d (%s=%.6g): training stops here.",
            trial.number, step, self.monitor, float(value),
        )  # fmt: skip
        return True
