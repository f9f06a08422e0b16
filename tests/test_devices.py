"""``trainer.devices`` read once (cloudlstm.assembly.devices), for the Trainer's own machine
(``run_device``, ``processes``) and for ``compare``'s reading of other runs' configs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from cloudlstm.assembly.batch_limits import processes
from cloudlstm.assembly.compile import run_device
from cloudlstm.assembly.devices import named_devices
from cloudlstm.errors import UserError
from cloudlstm.models.capture import RunDevice


@pytest.mark.parametrize(
    ("devices", "count"),
    [
        (2, 2),
        ("2", 2),
        (" 2 ", 2),
        ("0,1", 2),
        ("0,", 1),  # Lightning leaves out the empty part: device 0
        ([3], 1),
        ((0, 1), 2),
        ("auto", None),  # every device of the machine, which only it can count
        (-1, None),
        ("-1", None),
    ],
)
def test_the_devices_lightning_takes_are_counted(devices, count):
    assert named_devices(devices) == count


@pytest.mark.parametrize(
    ("devices", "problem"),
    [
        (0, "no device to run on"),
        ("0", "no device to run on"),
        ([], "no device to run on"),
        (",", "no device to run on"),
        (-2, "a negative number, of which Lightning takes only -1 (every device)"),
        ("-2", "a negative number, of which Lightning takes only -1 (every device)"),
        ("two", "no number of devices, nor a list of device indices"),
        ("[0,1]", "no number of devices, nor a list of device indices"),
        ("0,a", "no number of devices, nor a list of device indices"),
        ("", "no number of devices, nor a list of device indices"),
        (True, "no number of devices, nor a list of device indices"),
        (1.0, "no number of devices, nor a list of device indices"),
        ([0, 0], "device 0 is listed twice"),
        ([-1], "-1 is no device index (a whole number >= 0)"),
    ],
)
def test_a_value_lightning_refuses_or_that_names_no_device_is_refused(devices, problem):
    """The Trainer's machine counted 0 devices for 0 and "," (``processes`` then took 1),
    -2 for -2, and failed with a traceback on "two"; compare took them all for "not known"."""
    with pytest.raises(ValueError, match=f"^{problem}$".replace("(", r"\(").replace(")", r"\)")):
        named_devices(devices)


def test_the_machine_that_runs_the_trainer_refuses_them_in_one_line():
    trainer = {"accelerator": "cpu", "devices": "two"}
    with pytest.raises(UserError) as refused:
        run_device(trainer)
    assert str(refused.value) == (
        "trainer.devices=two: no number of devices, nor a list of device indices: give a number "
        ">= 1, -1 or auto (all there are), or a list of device indices, e.g. trainer.devices=1."
    )
    with pytest.raises(UserError, match="^trainer.devices=0: no device to run on: give "):
        processes({"accelerator": "cpu", "devices": 0})


def test_every_device_is_counted_on_the_machine():
    """``auto`` on the CPU is one process; two nodes of it two."""
    assert run_device({"accelerator": "cpu", "devices": "auto", "num_nodes": 2}) == RunDevice(
        False, 2
    )
    assert processes({"accelerator": "cpu", "devices": "auto"}) == 1


def test_the_reading_imports_no_torch():
    """compare reads it for every run it finds, and imports no torch to do so."""
    code = "import sys, cloudlstm.assembly.devices; print('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.stdout.strip() == "False", done.stderr[-2000:]
