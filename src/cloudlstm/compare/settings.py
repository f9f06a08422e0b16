"""Which keys of a run's config are settings (what it computed), and which only say where,
how or under which name it ran: runs that differ only in the latter are seeds of one
setting, and an evaluation's overrides of them do not name its row."""

from __future__ import annotations

from typing import Any

from cloudlstm.assembly.config import EXECUTION_OPTIONS

# Keys of config.yaml that say where, how or under which name a run ran and was logged,
# not what it computed: runs that differ only in them are seeds of one setting, never
# split into rows (--by may still name them). ``recipe_name`` is a setting.
NOT_SETTINGS = frozenset(
    {
        "seed",  # what the mean ± std of a row is over
        "data.holdout_seed",  # the draw of held-out points: by default the seed, likewise
        "task_name", "tags", "print_config", "optimized_metric",
        "resume", "run_lock", "ckpt_path", "torch_threads", "keep_freed_memory",
        "run", "ckpt", "logger",  # eval.py's: the run and checkpoint tested, no logger
        "module.save_predictions",
        # checks that refuse a run's data or stop a diverged run: a run that finished passed
        # them, and its numbers are those it would have had without them
        "data.max_abs_z", "module.diverge_factor",
        # the channels' units, which eval.py compares: a label that converts nothing
        "data.source.units",
        "data.num_workers", "data.pin_memory", "data.persistent_workers", "data.download",
        "data.source.download",  # data=airq's, data.download in runs before the source node
        "trainer.enable_progress_bar", "trainer.enable_model_summary",
        "trainer.log_every_n_steps", "trainer.plugins",
        "processes",  # PROCESSES_KEY: trainer.devices x num_nodes, themselves settings
        "windows",  # WINDOWS_KEY: what the settings and data scored, no setting itself
        "test_part_windows",  # TEST_PART_WINDOWS_KEY: what the data held to score
        "callbacks.model_checkpoint.filename",
        *(f"model.{option}" for option in EXECUTION_OPTIONS),  # how, not what
    }
)  # fmt: skip
# A hash of the readings a run was trained and tested on (metrics.json's
# ``data.values_digest``): runs whose data differ are never seeds of one setting, whatever
# their configs say (a data set's ``root`` is no setting: the same files may lie anywhere).
# Runs from before it was recorded have none, and are taken to share any run's data.
VALUES_DIGEST_KEY = "data.values_digest"


# How many processes ran a run's test (metrics.json's ``provenance``, else its config's
# ``trainer.devices`` x ``trainer.num_nodes``): under DDP Lightning applies
# ``trainer.limit_test_batches`` in each, so it is part of a limited test's data set where
# the windows scored (WINDOWS_KEY) do not tell it (cloudlstm.compare.datasets). Empty where
# neither says.
PROCESSES_KEY = "processes"
# How many test windows a run scored, those with an observed target (metrics.json's
# ``test.num_instances``, summed over the processes): where a whole number of test batches
# limits the test, runs that recorded it are of one data set where it is the same, in any
# number of processes (cloudlstm.compare.datasets).
WINDOWS_KEY = "windows"
# How many windows the test part holds (metrics.json's ``data.windows.test``): a limited
# test that scored as many scored every one, as a test without a limit does
# (cloudlstm.compare.datasets). Empty where a run records none.
TEST_PART_WINDOWS_KEY = "test_part_windows"


def other_data(a: str, b: str) -> bool:
    """Whether two runs' :data:`VALUES_DIGEST_KEY` values say their data differ."""
    return bool(a) and bool(b) and a != b


# The keys of NOT_SETTINGS that tell the samples of one setting apart: runs alike in these
# too are one sample (a copy, or a rerun), not two seeds; the draw's seed only where the
# points are drawn (:func:`draws_points`, cloudlstm.compare.runs.Run.sample).
SEED_KEY = "seed"
HOLDOUT_SEED_KEY = "data.holdout_seed"
HOLDOUT_POINTS_KEY = "data.holdout_points"

NOT_SETTING_PREFIXES = (
    "paths.", "data_info.", "logger.", "report.", "hydra.",
    "data.source.units.",  # {channel: unit}: each channel's (NOT_SETTINGS)
    # the console, train.log's progress lines, learning-rate log, timer, RNG states, and
    # the checkpoints kept to resume and to test last (a run moved keeps to its own)
    "callbacks.progress_bar.", "callbacks.progress_log.", "callbacks.model_summary.",
    "callbacks.lr_monitor.", "callbacks.epoch_timer.", "callbacks.rng_state.",
    "callbacks.last_checkpoint.", "callbacks.step_checkpoint.", "callbacks.sigterm_checkpoint.",
    "callbacks.final_checkpoint.", "callbacks.moved_run.",
)  # fmt: skip


# Settings added since some runs were made, at the value that does what those runs did: a
# run from before a key existed reads as having this value, so it is a seed of the same
# setting as a run of today with it (a key whose default is empty, null or [], needs no
# entry: an absent key reads as empty).
ADDED_SINCE = {
    "data.holdout_history": True,  # nothing held out, or held-out points keep their readings
    "module.calibrate": "none",  # no conformal calibration of quantile forecasts
    "trainer.accumulate_grad_batches": 1,  # a step for every batch
}

# The same, for settings inside a node that a run may not have (a callback left out by
# callbacks=none): read as this value only in the runs that have the node.
ADDED_SINCE_IN_NODE = {
    # early stopping checked after validations alone; before, also at the ends of epochs
    # where validations came there, which stopped at the same validations
    "callbacks.early_stopping.check_on_train_epoch_end": False,
}


def with_added_settings(config: dict[str, Any]) -> dict[str, Any]:
    """A flattened run config with the settings added since it was made
    (:data:`ADDED_SINCE`, :data:`ADDED_SINCE_IN_NODE`) at what the run did."""
    nodes = {key.rsplit(".", 1)[0] for key in config}
    in_nodes = {
        key: value for key, value in ADDED_SINCE_IN_NODE.items() if key.rsplit(".", 1)[0] in nodes
    }
    return {**ADDED_SINCE, **in_nodes, **config}


def is_setting(key: str) -> bool:
    """False for the keys that may differ between the runs of one setting: seeds, paths
    and folders (``*dir``, ``*dirpath``, data roots), loggers, the console, execution
    options (threads, workers, compile) and eval.py's run and checkpoint; see
    :data:`NOT_SETTINGS`. ``data_info.*`` is derived from ``data.*``."""
    last = key.rsplit(".", 1)[-1]
    return not (
        key in NOT_SETTINGS
        or key.startswith(NOT_SETTING_PREFIXES)
        or last.endswith(("dir", "dirpath"))  # output, cache and checkpoint folders
        or last == "root"  # where a data set lies on this machine
    )


def draws_points(holdout_points: Any) -> bool:
    """Whether ``data.holdout_points`` (a config's value) is drawn with ``data.holdout_seed``:
    a count or a fraction. A list names its points and null holds none out, so there the
    seed of the draw changes nothing."""
    return holdout_points is not None and not isinstance(holdout_points, list | tuple)


def holdout_set(holdout_points: Any) -> Any:
    """``data.holdout_points`` as the points it holds out: a list of ids sorted (``[p7,p1]``
    holds out what ``[p1,p7]`` does), any other value as it is."""
    if isinstance(holdout_points, list | tuple):
        return sorted(str(point) for point in holdout_points)
    return holdout_points
