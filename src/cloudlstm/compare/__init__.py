"""Comparison tables of finished runs, the library of ``python -m cloudlstm.cli.compare <dir> ...``
(``cloudlstm-compare``; its command line is :mod:`cloudlstm.cli.compare.command`).

Finds every ``metrics.json`` with test results under the given paths (a multirun folder,
several of them, single run dirs, or all of ``outputs/``), groups the runs, and prints one
row per group, no W&B needed::

    python -m cloudlstm.cli.compare outputs/multiruns/<date>/<time> \\
        --by model.k model.cell --horizons 1,6,12 --format latex --plot figures/

Grouping (``--by KEY ...``): ``model`` and ``data`` are the names train.py records in
``metrics.json``; any other key is a dotted key of the run's resolved ``config.yaml``
(``model.k``, ``trainer.max_epochs``, ...). ``data`` is always added, since metrics of two
data sets do not average. Without ``--by``, runs are grouped by ``model`` and ``data`` and
split further by every setting that still differs inside such a group: every config key
but ``seed``, the folders (``*dir``, ``*dirpath``, ``paths.*``, data roots: they differ per
run or machine), the loggers (``logger.*``, ``tags``, ``task_name``), the console and
execution options (``torch_threads``, ``data.num_workers``, ``model.compile``, ...) and the
derived ``data_info.*`` (:data:`cloudlstm.compare.settings.NOT_SETTINGS`);
``recipe_name`` is a setting. So the seeds of one setting form one row and different
settings never mix; with ``--by`` a warning names the keys that differ inside a row.
The code is no setting: seeds trained by different commits pool into one row, and a note
names each row whose runs came from more than one version of the code, or from code with
uncommitted changes (``provenance`` in ``metrics.json``); another note names each row
whose runs trained on different machines (a GPU and a CPU, two CPU models), whose time
columns then average their speeds. ``eval.py``'s results
(``<run>/eval/<time>/metrics.json``) test a run again and are left
out (a note says how many); ``--include-evals`` adds them as rows of their own.

Each metric cell is ``mean ± std`` over the runs (seeds) of a row: the mean and the sample
standard deviation (ddof=1) of each run's overall test mean; a single run shows its mean
alone. The std across test instances within a run, which metrics.json also holds, is not
shown. ``n`` is the number of runs; ``params``, ``epochs`` and ``train_s`` are means over
them. The metrics are the paper's four and ``smae``, the scale-free MAE (each channel's
MAE divided by its training std, averaged over channels; :mod:`cloudlstm.engine.metrics`); a
metric the runs of a row lack (``smae`` in a metrics.json written before it existed) is an
empty cell. ``--horizons 1,6,12`` adds the ``--horizon-metric`` (MAE by default) at those
forecast steps (1 = first), aggregated the same way; ``--channels PM2.5,CO`` adds the
``--channel-metric`` (MAE by default) of those channels (columns ``mae[PM2.5]``, ...; empty
for rows whose data has no such channel). Runs of the held-out-sites protocol
(``data.holdout_points``) get the MAE of their point groups (columns ``held_out/mae``,
``trained/mae``); ``--groups`` names other point groups and ``--group-metric`` another
metric. ``--pooled`` adds the test metrics pooled over every forecast value of a run
(``pooled/mae``, ``pooled/rmse``: the RMSE of all squared errors, as DCRNN's and T-GCN's
tables give it; the ``rmse`` column averages each test window's). The best cell of each
metric column is bold (lowest MAE/RMSE/sMAE, highest PSNR/SSIM, the coverage nearest its
nominal value: :func:`~cloudlstm.compare.table.better_of`), compared within each data
set: the data, and the settings that change the windows its test scores
(:mod:`cloudlstm.compare.datasets`: another test part, J or point subset is another data
set, shown in a column on every row). Rows are sorted by data set, then best first on the
first metric. A NaN mean (nothing scored) is never best and ranks last
(:func:`~cloudlstm.compare.table.scored`).

``--paper TABLE`` prints the runs next to the paper's values of that table
(``docs/paper/<TABLE>.csv``) with the difference; :mod:`cloudlstm.compare.paper` says how runs
are matched to the paper's rows.

``--format markdown|csv|latex``; ``--plot DIR`` writes, per data set, the horizon metric
against the forecast step (one line per row, a band of ± one std over seeds) and a bar
chart of its overall value with std error bars, and prints their paths to stderr (stdout
keeps only the table, for redirection). ``--html PATH`` writes all of it as one web page
that needs no network (:mod:`cloudlstm.compare.html`); ``--wandb`` logs it as one W&B
run, offline by default (:mod:`cloudlstm.compare.wandb_run`). User errors print one
``compare: ...`` line to stderr and exit with status 2.
"""

# Modules: runs (finding runs), cells (Stat, Diff, Column), groups (rows), datasets (what a
# run was tested on), table (columns, best cells), formats (markdown, LaTeX, CSV), plots,
# html (--html), wandb_run (--wandb), paper (--paper), relative (--relative-to), settings
# (what a setting is), calibration (quantile runs), style.
from cloudlstm.compare.cells import Column, Diff, Stat
from cloudlstm.compare.formats import to_latex, to_markdown, write_csv
from cloudlstm.compare.groups import (
    Group,
    default_keys,
    group_runs,
    mixed_keys,
    varying_keys,
)
from cloudlstm.compare.runs import RUN_KEYS, CompareError, Run, find_runs, flatten, load_run
from cloudlstm.compare.table import best_rows, build_table, compare, higher_is_better, ranked

__all__ = [
    "RUN_KEYS",
    "Column",
    "CompareError",
    "Diff",
    "Group",
    "Run",
    "Stat",
    "best_rows",
    "build_table",
    "compare",
    "default_keys",
    "find_runs",
    "flatten",
    "group_runs",
    "higher_is_better",
    "load_run",
    "mixed_keys",
    "plot",
    "ranked",
    "to_latex",
    "to_markdown",
    "varying_keys",
    "write_csv",
]


def __getattr__(name: str) -> object:
    # `plot` without importing matplotlib on `import cloudlstm.compare`: a table alone
    # starts in half the time
    if name == "plot":
        from cloudlstm.compare.plots import plot

        return plot
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
