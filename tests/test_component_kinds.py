"""One value-type check for every component parameter, and one comma-list parser for every flag."""

import numpy as np
import pytest

import dlrm_multiepoch.components as components
from dlrm_multiepoch.command_options import SweepOptions
from dlrm_multiepoch.component_params import app_flags, take_options
from dlrm_multiepoch.config_section import split_list
from dlrm_multiepoch.data.val_design import unseen_codes


@pytest.mark.parametrize("value", [True, False])
def test_app_flags_refuses_a_bool_for_a_number(value):
    # take_options refused a bool for an int; the app flags let it through as 1/0 once.
    with pytest.raises(TypeError, match=f"--epochs must be int, got {value}"):
        app_flags(components.train, {"epochs": value})
    with pytest.raises(TypeError, match=f"--learning_rate must be float, got {value}"):
        app_flags(components.train, {"learning_rate": value})
    assert app_flags(components.train, {"learning_rate": 1}) == ["--learning_rate=1"]


def test_take_options_names_a_missing_experiment_dir():
    with pytest.raises(TypeError, match=r"^--experiment_dir is required$"):
        take_options(components.sweep, SweepOptions, {})


def test_split_list():
    assert split_list(" a, b ,,c, ") == ["a", "b", "c"]
    assert split_list("") == []


def test_unseen_codes():
    known = {"user": np.array([True, False]), "item": np.zeros(0, bool)}  # no item in train: every item unseen
    raw = {"user": np.array([0, 1, -1]), "item": np.array([0, 0, -1])}
    codes = unseen_codes(raw, known, {"user": 0, "item": 1}, 3, np.uint8)
    assert codes.dtype == np.uint8 and codes.tolist() == [0b10, 0b11, 0b11]
