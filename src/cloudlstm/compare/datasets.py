"""What a run was tested on: its data set, within which best cells, sections and figures
are chosen, and on which ``--relative-to`` pairs a run with its baseline's.

Two runs are of one data set where their tests scored the same forecast windows: the same
data (its name, and the hash of its readings where both recorded one) and the same values
of every ``data.*`` setting but those that change only what a model reads or how it
trains (:data:`NOT_TEST_DATA`), and what a test that ``trainer.limit_test_batches`` limits
scored: the windows (:data:`WINDOWS_KEY`) where the limit is a number of batches and the
run recorded them, in place of the limit, the batch size and the processes, which they
say more exactly (``limit_test_batches=3`` in batches of 8 and ``=6`` in batches of 4
score the same first 24 windows); else the limit, with ``data.batch_size`` and the
processes that ran it (:data:`PROCESSES_KEY`). A limited test that scored every window of
the test part (as many as the run records it held, :data:`TEST_PART_WINDOWS_KEY`) is a test
of all of them, as one without a limit. A setting that does nothing without another
(:data:`ONLY_WITH`) counts only where that one is set.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from cloudlstm.compare.runs import Run
from cloudlstm.compare.settings import (
    PROCESSES_KEY,
    TEST_PART_WINDOWS_KEY,
    VALUES_DIGEST_KEY,
    WINDOWS_KEY,
    is_setting,
)

# The data's name (metrics.json's run.data): always part of the data set.
DATA_KEY = "data"
# The test's share of the test part's batches (1.0: all of them).
TEST_LIMIT_KEY = "trainer.limit_test_batches"
# Its values that score every test window: the default, and a run that lacks the key.
ALL_TEST_BATCHES = ("", "1.0")
# The processes of a test as one process's, which names no data set: a run that records
# none (:data:`PROCESSES_KEY`) counts as one, as compare took every run before it did.
ONE_PROCESS = ("", "1")
# Settings that change the test only where it scores a number or share of its batches:
# under DDP Lightning applies the limit in each process, rounding a share down in each, so
# ``limit_test_batches=3`` scores up to 6 batches in 2 processes and 0.5 of 41 windows in
# batches of 8 scores 16 windows where one process scores 24 (docs/cluster.md).
WITH_TEST_LIMIT = ("data.batch_size", PROCESSES_KEY)
# A limit of a whole number of batches, which each process applies to its own windows.
BATCHES_LIMIT = re.compile(r"[0-9]+")
# The keys that the windows scored replace where they tell a data set (:func:`_by_windows`).
REPLACED_BY_WINDOWS = (TEST_LIMIT_KEY, *WITH_TEST_LIMIT)

# The data.* settings that leave the scored windows as they are: test windows are cut with
# their targets in the test part however far back their inputs reach
# (cloudlstm.data.pipeline.splits.window_ranges), so the input's form and the inputs added to
# it, where training and validation lie, and the checks a finished run passed, change what
# a model reads or learns from, not what its test scores. Runs that differ in them are
# compared as models are, each a row.
NOT_TEST_DATA = frozenset(
    {
        "data._target_",  # the datamodule's class
        "data.input_steps", "data.seasonal", "data.seasonal_days",
        "data.seasonal_every_minutes",  # what a window's input reads
        "data.time_features", "data.time_zone",  # known-future inputs
        "data.source.covariates", "data.source.covariate_cols",  # measured inputs
        "data.source.graph",  # a graph model's adjacency
        "data.val_fraction", "data.split_times.val", "data.split_times.train",  # before the test
        "data.outliers", "data.dbscan_eps", "data.dbscan_min_samples",  # groups reported beside
        # checks a finished run passed (as data.max_abs_z, no setting); a value they turn
        # into a gap changes the readings' hash
        "data.source.bad_values", "data.source.sha256", "data.source.url",
        "data.source.missing_hint",  # a message
    }
)  # fmt: skip
NOT_TEST_DATA_PREFIXES = ("data.valid_ranges.",)

# A value written as a number (3, 0.2, 1e-3), which data sets sort by size.
NUMBER = r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?"

# Settings that change the test only where another is set: the key -> that one.
ONLY_WITH = {
    "data.subset_seed": "data.num_points",  # the draw of the point subset
    "data.holdout_history": "data.holdout_points",  # whether test inputs hold held-out points
    "data.outlier_count": "data.outlier_shift",  # how many points the shift moves
    "data.outlier_seed": "data.outlier_shift",  # which
}


def is_data_set_key(key: str) -> bool:
    """Whether ``key`` may tell a run's data set (where it acts: :func:`tested_on`): the
    data's name and readings' hash, every ``data.*`` setting but :data:`NOT_TEST_DATA`,
    ``trainer.limit_test_batches``, and the test's windows and processes."""
    if key in (DATA_KEY, VALUES_DIGEST_KEY, TEST_LIMIT_KEY, PROCESSES_KEY, WINDOWS_KEY):
        return True
    return (
        key.startswith("data.")
        and is_setting(key)
        and key not in NOT_TEST_DATA
        and not key.startswith(NOT_TEST_DATA_PREFIXES)
    )


def acts(key: str, value: Callable[[str], str]) -> bool:
    """Whether the setting ``key`` changes the test of a run whose values ``value`` gives:
    not ``data.test_fraction`` where ``data.split_times`` places the test part, nor a key of
    :data:`ONLY_WITH` without its setting, nor ``data.batch_size`` and the test's processes
    but where the test scores a number or share of its batches (``trainer.limit_test_batches``),
    which they count (:data:`WITH_TEST_LIMIT`). Of a limit of whole batches the windows
    scored tell instead of the limit, the batch size and the processes where the run
    recorded them (:func:`_by_windows`)."""
    value = as_tested(value)
    if key == "data.test_fraction":
        return not value("data.split_times.test")
    if key == WINDOWS_KEY:
        return _by_windows(value)
    if key in REPLACED_BY_WINDOWS:
        return (key == TEST_LIMIT_KEY or _limited(value)) and not _by_windows(value)
    return key not in ONLY_WITH or bool(value(ONLY_WITH[key]))


def as_tested(value: Callable[[str], str]) -> Callable[[str], str]:
    """A run's values (``value``) as its test scored: one that a limit of test batches left
    every window of the test part reads as a test without a limit, whatever the limit (3
    batches of 8 of a part of 20 windows), so that it shares its data set with such a test.
    A run that records no window count of its test part keeps its limit. So does one whose
    test part holds windows without an observed target: the windows scored count only
    those with one (``test.num_instances``), the part's count every window
    (``data.windows.test``, cut from the split's steps before any target is read), and no
    count of the part's observed windows is recorded to tell a test that scored all of
    them from one that stopped short of the last."""
    scored, held = value(WINDOWS_KEY), value(TEST_PART_WINDOWS_KEY)
    if not scored or scored != held or value(TEST_LIMIT_KEY) in ALL_TEST_BATCHES:
        return value
    # 1.0, the default, as a row of such runs reads it (row_value)
    return lambda key: ALL_TEST_BATCHES[1] if key == TEST_LIMIT_KEY else value(key)


def _limited(value: Callable[[str], str]) -> bool:
    """Whether the test scores a number or share of its batches."""
    return value(TEST_LIMIT_KEY) not in ALL_TEST_BATCHES


def _by_windows(value: Callable[[str], str]) -> bool:
    """Whether the windows a limited test scored tell its data set: where the run recorded
    them and the limit is a whole number of batches. Then each process scores the first of
    its windows ``r, r + P, ...``, up to the limit or all it has, which together are the
    test part's first windows, as many as were scored, in any number of processes and
    batches of any size: two runs that scored as many scored the same (3 batches of 8 and 6
    of 4: the first 24; a limit above every process's batches: all of them, which
    :func:`as_tested` reads as a test without a limit where the run records them), and windows
    without an observed target, which the count leaves out, score nothing. A share is
    rounded down in each process, so that as many windows may be other ones (0.7 of 17 and
    16 windows in batches of 8 scores 16 and 8, 24 as one process of 33 does, but windows
    up to the 31st; cloudlstm.engine.distributed): there the limit, the batch size and the
    processes tell."""
    return bool(value(WINDOWS_KEY)) and BATCHES_LIMIT.fullmatch(value(TEST_LIMIT_KEY)) is not None


def _value(run: Run, key: str) -> str:
    """``run``'s value of ``key`` (:meth:`Run.value`), empty for a test of all its batches
    and for one process."""
    value = as_tested(run.value)(key)
    if key == TEST_LIMIT_KEY and value in ALL_TEST_BATCHES:
        return ""
    return "" if key == PROCESSES_KEY and value in ONE_PROCESS else value


def tested_on(run: Run) -> dict[str, str]:
    """The values that tell ``run``'s data set: those of the keys :func:`is_data_set_key` that
    act (:func:`acts`) and are not empty (:meth:`Run.value`: a key a run lacks, as a run from
    before it was added, is empty as at its empty default)."""
    keys = {DATA_KEY, VALUES_DIGEST_KEY, *(k for k in run.keys if is_data_set_key(k))}
    return {key: value for key in keys if (value := _value(run, key)) and acts(key, run.value)}


def told_apart(runs: Sequence[Run]) -> dict[str, list[str]]:
    """For each data's name, the keys of :func:`tested_on` whose values differ between its
    ``runs`` that they act in: the settings that make two data sets of one data (those of
    another data's name are told apart by it). A key that acts in some runs alone is told
    apart by the setting it acts with (``data.split_times.test``, not the
    ``data.test_fraction`` it replaces). Those with a ``config.yaml`` decide, as for the
    settings (a run without one has unknown settings); the readings' hash only where two
    runs that recorded one differ (a run from before it shares any run's data)."""
    by_name: dict[str, list[Run]] = {}
    for run in runs:
        by_name.setdefault(run.value(DATA_KEY), []).append(run)
    return {name: _differing(members) for name, members in by_name.items()}


def _differing(runs: Sequence[Run]) -> list[str]:
    """The keys of :func:`tested_on` (but the data's name) whose values differ between the
    ``runs`` that they count in (:func:`_told`), as :func:`told_apart` says."""
    known = [run for run in runs if run.has_config] or list(runs)
    keys = set().union(*(tested_on(run) for run in known)) - {DATA_KEY}
    differ = []
    for key in sorted(keys):
        values = {told for run in known if (told := _told(run, key)) is not None}
        if key == VALUES_DIGEST_KEY:
            values.discard("")
        if len(values) > 1:
            differ.append(key)
    return differ


def _told(run: Run, key: str) -> str | None:
    """``run``'s value of ``key`` where it acts (:func:`_value`); None where it does not,
    and so tells nothing, but for the keys that the windows scored and those they replace
    (:func:`_by_windows`): a run told by its windows lacks the limit and what it counts, one
    told by those lacks the windows, and each is told apart from the other by them, as a
    run of 24 windows from a run of every window, or of a limit of a share."""
    if acts(key, run.value):
        return _value(run, key)
    if key == WINDOWS_KEY or (key in REPLACED_BY_WINDOWS and _by_windows(as_tested(run.value))):
        return ""
    return None


def row_value(run: Run, key: str) -> str:
    """``run``'s value of a key of :func:`told_apart` as rows are split by it: its value
    (:meth:`Run.value`), but empty for the windows scored and the keys they replace
    (:data:`REPLACED_BY_WINDOWS`) where they do not act (:func:`acts`): the limit and batch
    size of a test its windows tell, or the batch size of a test of every window."""
    if (key == WINDOWS_KEY or key in REPLACED_BY_WINDOWS) and not acts(key, run.value):
        return ""
    return as_tested(run.value)(key)


def setting_value(run: Run, key: str) -> str:
    """``run``'s value of the setting ``key`` as rows and samples of one setting compare it
    (:meth:`Run.value`), but of ``trainer.limit_test_batches``, which changes only what the
    test scores: empty where the test scored every window (:func:`as_tested`, and for the
    default 1.0) or where the windows it scored tell its data set (:func:`_by_windows`), as
    they then tell its rows apart in the limit's place (3 batches of 8 and 4 that scored the
    same 24 windows are one setting)."""
    if key != TEST_LIMIT_KEY:
        return run.value(key)
    tested = as_tested(run.value)
    if _by_windows(tested) or tested(key) in ALL_TEST_BATCHES:
        return ""
    return tested(key)


def all_told_apart(runs: Sequence[Run]) -> list[str]:
    """The keys :func:`told_apart` finds for any data's name, each once."""
    return sorted(set().union(*told_apart(runs).values()))


def label(run: Run, keys: Sequence[str]) -> str:
    """A data set's name: the data's, its readings' hash where ``keys`` holds it
    (``points (1a2b3c4d)``), then the values of the other ``keys`` that act in ``run``
    (``milan split_times.test=2013-12-09``)."""
    values = tested_on(run)
    name = run.value(DATA_KEY)
    if VALUES_DIGEST_KEY in keys and values.get(VALUES_DIGEST_KEY):
        name += f" ({values[VALUES_DIGEST_KEY][:8]})"
    named = [
        f"{key.removeprefix('data.').removeprefix('trainer.')}={values[key]}"
        for key in keys
        if key in values and key not in (DATA_KEY, VALUES_DIGEST_KEY)
    ]
    return " ".join([name, *named])


def order(run: Run, keys: Sequence[str]) -> tuple:
    """Where a data set (named by :func:`label`) comes among the others: by the data's name,
    then by the values of ``keys``, numbers as numbers (J=3 before J=12) and an empty value
    first."""
    values = tested_on(run)
    return (run.value(DATA_KEY), *(_sortable(key, values.get(key, "")) for key in keys))


def _sortable(key: str, value: str) -> tuple[int, float, str]:
    """A value as a sort key: empty, then numbers by size, then text (a readings' hash
    always, whose digits are no number)."""
    if not value:
        return (0, 0.0, "")
    if key != VALUES_DIGEST_KEY and re.fullmatch(NUMBER, value):
        return (1, float(value), "")
    return (2, 0.0, value)
