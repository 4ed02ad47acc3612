"""The sweep's and the search's own options: one dataclass each, from which the commands' parsers, the
TorchX components' parameters and help, and the checks come (``dlrm_multiepoch/command_options.py``)."""

import dataclasses
import inspect

import pytest
from torchx.specs.file_linter import get_fn_docstring

import dlrm_multiepoch.components as components
from dlrm_multiepoch.command_options import SearchOptions, SweepOptions
from dlrm_multiepoch.config_section import SWEEP_SEARCH_COMPONENT, flag_fields, from_args, roles_of
from dlrm_multiepoch.search.command import build_parser as search_parser
from dlrm_multiepoch.sweep.command import build_parser as sweep_parser


def option_fields(cls, component=False):
    """The options of ``cls`` (``component``: those its TorchX component offers, by their role)."""
    return [f for f in flag_fields(cls) if not component or SWEEP_SEARCH_COMPONENT in roles_of(f)]


def option_help(cls, f):
    """The help of option ``f``: each command declares its own options, with their help."""
    return f.metadata["help"]


COMMANDS = [(components.sweep, SweepOptions, sweep_parser), (components.search, SearchOptions, search_parser)]


@pytest.mark.parametrize("component, cls, parser", COMMANDS, ids=["sweep", "search"])
def test_the_components_and_the_commands_take_each_option_with_its_default_and_help(component, cls, parser):
    parameters = inspect.signature(component).parameters
    _, help_of = get_fn_docstring(component)
    actions = {a.dest: a for a in parser()._actions}
    names = list(parameters)
    for f in option_fields(cls):
        default = inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default
        action = actions[f.name]
        assert (action.default, action.help) == (None if default is inspect.Parameter.empty else default, option_help(cls, f))
        assert action.type is (None if f.metadata["positional"] else f.type), f.name
        if SWEEP_SEARCH_COMPONENT not in roles_of(f):  # the command's alone (--group, --jobs)
            assert f.name not in parameters
            continue
        p = parameters[f.name]
        assert (p.kind, p.default, p.annotation) == (inspect.Parameter.KEYWORD_ONLY, default, f.type), f.name
        assert help_of[f.name] == option_help(cls, f)
    # Right after the *args, as the components wrote them by hand (sweep: experiment_dir, epochs, seeds, windows).
    own = [f.name for f in option_fields(cls, component=True)]
    assert names[1 : 1 + len(own)] == own and names[1 + len(own)] == "name"


@pytest.mark.parametrize(
    "component, options, parser",
    [
        (components.sweep, SweepOptions("runs/bx", epochs=5, seeds="1,2", windows="0,0.5"), sweep_parser),
        (components.sweep, SweepOptions("runs/bx"), sweep_parser),
        (components.search, SearchOptions("runs/ml", 2, "0,3", eta=4, rung_fraction=0.25, candidates="joint,auto"), search_parser),
        (components.search, SearchOptions("runs/ml", rung_fraction=1 / 3), search_parser),
    ],
)  # fmt: skip
def test_a_components_job_runs_its_command_with_the_same_options(component, options, parser):
    given = {f.name: getattr(options, f.name) for f in option_fields(type(options), component=True)}
    (role,) = component(**given).roles
    at = role.args.index("--")
    parsed = from_args(type(options), parser().parse_args(role.args[1:at]))
    assert parsed == options  # every option, floats exactly (1/3 too)


@pytest.mark.parametrize(
    "component, given, error, message",
    [
        (components.search, {"eta": 1}, ValueError, "--eta must be at least 2, got 1"),
        (components.search, {"rung_fraction": 1.5}, ValueError, r"--rung_fraction must be in \(0, 1\], got 1.5"),
        (components.search, {"seeds": "0,0"}, ValueError, "--seeds '0,0' names a seed twice"),
        (components.search, {"epochs": "3"}, TypeError, "--epochs must be int, got '3'"),
        (components.sweep, {"seeds": "a"}, ValueError, "--seeds expects comma-separated integers, got 'a'"),
        (components.sweep, {"windows": "x"}, ValueError, "--windows expects comma-separated epochs, got 'x'"),
        (components.sweep, {"epochs": 0}, ValueError, "--epochs must be positive, got 0"),
        (components.sweep, {"group": "g"}, TypeError, r"unexpected keyword argument\(s\) \['group'\]"),
    ],
)  # fmt: skip
def test_the_components_refuse_a_bad_option_at_submission_naming_it(component, given, error, message):
    with pytest.raises(error, match=message):
        component(experiment_dir="e", **given)
