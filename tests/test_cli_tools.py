"""The parameter-count table and the space check (the comparison table: test_compare.py)."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys

import pytest

from cloudlstm.cli import space_check
from cloudlstm.cli.models_table import model_names, model_parameters
from cloudlstm.errors import UserError
from tests.conftest import ROOT, TINY, run_python


def test_parameter_counts_follow_the_configs():
    names = model_names()
    assert {"cloudlstm", "mlp", "cnn", "stgcn", "pointlstm", "persistence"} <= set(names)
    assert model_parameters("persistence") == 0
    # MLP: 5 hidden layers of 500 on the flattened 12 x 274 x 6 window, all outputs at once.
    d = 12 * 274 * 6
    expected = (d * 500 + 500) + 4 * (500 * 500 + 500) + (500 * d + d)
    assert model_parameters("mlp") == expected
    assert model_parameters("mlp", num_points=10) < expected


def test_the_models_table_module_imports_no_torch_before_its_program_runs():
    """As ``python -m cloudlstm.cli.models_table`` its imports run before program() holds a
    Ctrl-C, and a Ctrl-C in torch's initialisation can abort the process."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import cloudlstm.cli.models_table"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()}
    assert "cloudlstm.cli.models_table" in imported and "torch" not in imported


@pytest.mark.slow  # two kNN-LSTM trainings on Beijing-size data: minutes on 2 cores
def test_space_check_prints_test_mse_and_ratio_to_the_per_point_lstm(capsys):
    space_check.main(["--seeds", "0", "--epochs", "1", "--models", "lstm_k6"])
    rows = [line.split("|")[1:-1] for line in capsys.readouterr().out.splitlines()[2:]]
    # lstm_k1 is always trained first: it is the reference of the ratio
    assert [r[1].strip() for r in rows] == ["lstm_k1", "lstm_k6"]
    base, other = (float(r[2]) for r in rows)
    assert float(rows[0][3]) == 1.0
    assert float(rows[1][3]) == pytest.approx(other / base, abs=2e-3)
    assert 0 < base < 1  # one epoch already beats the training-mean forecast


def test_parameter_table_prints_a_row_per_model(capsys):
    from cloudlstm.cli import models_table

    assert models_table.main(["--num-points", "12", "persistence", "mlp"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[0] == "Parameters at N=12, C=6, M=12, J=12:"
    d = 12 * 12 * 6
    mlp = (d * 500 + 500) + 4 * (500 * 500 + 500) + (500 * d + d)
    assert rows[-2:] == ["| `persistence` | 0 |", f"| `mlp` | {mlp:,} |"]


def test_a_model_the_sizes_cannot_build_says_why_in_its_row(capsys):
    from cloudlstm.cli import models_table

    assert models_table.main(["--num-points", "2", "cloudlstm", "linear"]) == 1
    rows = capsys.readouterr().out.splitlines()
    assert rows[-2] == (
        "| `cloudlstm` | not built at these sizes: model.k=9 neighbours but the data has 2 "
        "point(s): give --num-points at least that many, or a config of a smaller K (e.g. "
        "cloudlstm_k3). |"
    )
    assert rows[-1] == "| `linear` | 936 |"


def test_the_whole_table_at_its_default_sizes_succeeds_with_a_row_that_says_what_it_needs(
    capsys,
):
    """Seasonal naive needs a day of input, more than the default M = 12: the table is still
    the answer asked for, and the row's fix is this program's option, not train.py's."""
    from cloudlstm.cli import models_table

    assert models_table.main([]) == 0
    out = capsys.readouterr().out.splitlines()
    rows = {row.split("|")[1].strip(" `"): row for row in out if row.startswith("| `")}
    assert "Set --input-steps to at least 24 (e.g. --input-steps 24," in rows["seasonal_naive"]
    assert "data.input_steps" not in rows["seasonal_naive"]
    assert models_table.main(["--input-steps", "24", "seasonal_naive"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "| `seasonal_naive` | 0 |"
    assert models_table.main(["seasonal_naive"]) == 1  # named, and not built: a failure


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["nope"], "error: no model 'nope'; the models: agcrn, "),
        (["--num-points", "0"], "error: argument --num-points: 0 is below 1"),
        (["--input-steps", "x"], "error: argument --input-steps: 'x' is not a whole number"),
    ],
)
def test_the_parameter_table_refuses_an_unknown_model_or_size_in_one_line(capsys, args, said):
    """A ZeroDivisionError, a ValueError or Hydra's search path before."""
    from cloudlstm.cli import models_table

    with pytest.raises(SystemExit) as stopped:
        models_table.main(args)
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and said in err.splitlines()[-1]


COMMANDS = [
    *[["benchmarks/" + p.name] for p in sorted((ROOT / "benchmarks").glob("bench_*.py"))],
    ["benchmarks/gpu_check.py"],
    ["benchmarks/layer_activity.py"],
    ["-m", "cloudlstm.cli.compare"],
    ["-m", "cloudlstm.cli.models_table"],
    ["-m", "cloudlstm.cli.space_check"],
]


# Runs each tool's main with its arguments in one interpreter, as its command would (a script
# with its folder first on sys.path, a module as -m runs it): one start of the stack, not
# one per tool. Takes [[command, arguments], ...]; prints [[exit code, stdout, stderr], ...]
# in that order as JSON.
DRIVER = """
import contextlib, io, json, os, runpy, sys
results = []
for command, arguments in json.loads(sys.argv[1]):
    out, err, code = io.StringIO(), io.StringIO(), 0
    sys.argv = [command[-1], *arguments]
    path = list(sys.path)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            if command[0] == "-m":
                runpy.run_module(command[1], run_name="__main__", alter_sys=True)
            else:
                sys.path.insert(0, os.path.dirname(os.path.abspath(command[0])))
                runpy.run_path(command[0], run_name="__main__")
        except SystemExit as stop:
            code = stop.code or 0
        except BaseException as error:
            code = repr(error)
    sys.path[:] = path
    results.append([code, out.getvalue(), err.getvalue()[-2000:]])
print(json.dumps(results))
"""


def run_tools(calls: list[tuple[list[str], list[str]]]) -> list[list]:
    """Each (command, arguments) run by :data:`DRIVER`: its [exit code, out, err]."""
    done = run_python("-c", DRIVER, json.dumps(calls))
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def helps() -> dict[str, list]:
    done = run_tools([(command, ["--help"]) for command in COMMANDS])
    return {" ".join(command): result for command, result in zip(COMMANDS, done, strict=True)}


# A count or amount below its least value, given to tools that then failed with a traceback
# further in (a range of 0 epochs, K = 0 neighbours, a division by 0 repeats)
BELOW_LEAST = [
    (["-m", "cloudlstm.cli.space_check"], ["--epochs", "0"], "argument --epochs: 0 is below 1"),
    (["-m", "cloudlstm.cli.space_check"], ["--seeds", "-1"], "argument --seeds: -1 is below 0"),
    (["benchmarks/bench_dconv.py"], ["--k", "0"], "argument --k: 0 is below 1"),
    (
        ["benchmarks/bench_dconv.py"],
        ["--k", "30", "--points", "20"],
        "--k 30 neighbours need at least as many --points (20)",
    ),
    (["benchmarks/bench_step.py"], ["--repeats", "-2"], "argument --repeats: -2 is below 1"),
    (
        ["benchmarks/bench_data_cache.py"],
        ["--seconds", "nan"],
        "argument --seconds: nan is not a number above 0",
    ),
]


def test_a_count_below_its_least_is_argparses_one_line():
    results = run_tools([(command, arguments) for command, arguments, _ in BELOW_LEAST])
    for (_, _, said), (code, _, err) in zip(BELOW_LEAST, results, strict=True):
        assert code == 2 and "Traceback" not in err, err
        assert err.splitlines()[-1].endswith(f"error: {said}"), err


def test_a_refusal_met_by_the_space_check_is_one_line_and_status_2(capsys, monkeypatch):
    """A refusal of the data or a model while training was a traceback."""

    def refused(*args: object, **kwargs: object) -> None:
        raise UserError("SyntheticAdvectionDiffusion: seed must be an integer >= 0; got -1.")

    monkeypatch.setattr(space_check, "check_config", refused)
    assert space_check.main(["--seeds", "0", "--models", "lstm_k1"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "space_check: SyntheticAdvectionDiffusion: seed must be an integer >= 0; got -1."
    ]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[-1])
def test_every_documented_tool_parses_its_arguments(command, helps):
    """Each tool's main runs as documented far enough to print its usage (the benchmarks
    import their whole stack to do so)."""
    code, out, err = helps[" ".join(command)]
    assert code == 0, err
    assert out.startswith("usage:")


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: c[-1])
def test_a_tools_help_has_no_docstring_markup(command, helps):
    """Descriptions taken from docstrings read as prose in a terminal: no Sphinx roles."""
    _, out, _ = helps[" ".join(command)]
    assert not re.search(r":(mod|func|class|data|meth):`", out), out


def test_layer_activity_prints_each_layer_before_and_during_training():
    """Every layer's row at steps 0, 1 and 2 of a tiny CloudLSTM, numbers that are finite;
    a model without the family's layers is one line."""
    tiny = [o for o in TINY if not o.startswith("trainer.")]
    done = run_python("benchmarks/layer_activity.py", "--steps", "2", "--every", "1", *tiny)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = [line.split("|")[1:-1] for line in done.stdout.splitlines() if line[:3] == "| 0"]
    rows += [
        line.split("|")[1:-1] for line in done.stdout.splitlines() if line[:3] in ("| 1", "| 2")
    ]
    layers = ["embed", "encoder 0", "encoder 1", "decoder 0", "decoder 1", "head"]
    assert [(r[0].strip(), r[1].strip()) for r in rows] == [
        (str(step), layer) for step in range(3) for layer in layers
    ]
    values = [float(cell) for row in rows for cell in row[2:]]
    assert all(math.isfinite(v) for v in values) and min(values[:4]) >= 0
    refused = run_python("benchmarks/layer_activity.py", "--steps", "1", "model=lstm")
    assert refused.returncode == 2
    assert refused.stderr.splitlines()[-1].startswith("layer_activity: SeqLSTM has no embedding")
