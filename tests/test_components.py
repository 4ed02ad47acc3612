"""The TorchX component: its AppDef, both ways to name it, and what each scheduler gets.

The dry runs go through the real ``torchx`` command line; no cluster is needed.
"""

import inspect
import json
import re
import shlex
import sys
from pathlib import Path
from typing import Optional

import pytest
import yaml
from torchx.specs.file_linter import get_fn_docstring
from torchx.specs.finder import get_component

import dlrm_multiepoch.components as components
from dlrm_multiepoch.train.config import config_fields, parse_config
from tests.torchx_cli import MODULE_ENTRY, REPO_ROOT, application, scheduler_request, split_torchrun, torchx

SCRIPT = MODULE_ENTRY


def _role_command(app) -> str:
    (role,) = app.roles
    assert role.entrypoint == "bash" and role.args[0] == "-c", role.args
    return role.args[1]


def test_train_passes_set_parameters_as_flags_then_script_args():
    app = components.train(
        "--pipeline_warmup_batches", "2", dataset="movielens", epochs=3, learning_rate=1e-3, seed=-7,
        freeze_schedule="tables=frozen@[0,1) train@[1,end)",
    )  # fmt: skip
    opts, app_args = split_torchrun(_role_command(app), SCRIPT)
    # In the order of TRAIN_PARAMS (the training app's --help), then the pass-through flags verbatim.
    assert app_args == [
        "--epochs=3",
        "--seed=-7",
        "--dataset=movielens",
        "--learning_rate=0.001",
        "--freeze_schedule=tables=frozen@[0,1) train@[1,end)",
        "--pipeline_warmup_batches",
        "2",
    ]
    assert (opts["--nnodes"], opts["--nproc_per_node"]) == ("1", "2")


# Parameters that shape the job rather than being flags of the app.
_LAUNCHER_PARAMETERS = {
    "script_args", "m", "script", "j", "cpu", "gpu", "memMB", "h", "image", "name", "env", "max_retries", "max_restarts",
    "mounts",
}  # fmt: skip


def test_app_parameters_are_the_config_fields_with_their_types_and_help():
    fields = config_fields()
    parameters = inspect.signature(components.train).parameters
    app_parameters = [name for name in parameters if name not in _LAUNCHER_PARAMETERS]
    assert app_parameters == list(components.TRAIN_PARAMS)
    for name in app_parameters:
        p = parameters[name]
        assert (p.kind, p.default, p.annotation) == (inspect.Parameter.KEYWORD_ONLY, None, Optional[fields[name].kind])
    _, help_of = get_fn_docstring(components.train)
    assert help_of["epochs"] == f"{fields['epochs'].help} (app default: 3)"
    assert help_of["j"].startswith("{nnodes}x{nproc_per_node}")  # the hand-written Args stay


def test_every_app_parameter_parses_in_the_training_app_to_its_value():
    # Values other than the defaults where a flag's format needs one; any other parameter given its default.
    samples = dict(
        dataset="movielens", data_path="/data/ml.zip", max_rows=1000, history_length=4, model="dlrm_dcn",
        embedding_dim=8, dense_arch_layer_sizes="32,8", over_arch_layer_sizes="16", learning_rate=0.002,
        embedding_learning_rate=0.1, epochs=2, batch_size=512, seed=5, freeze_schedule="tables=frozen@[0,1) train@[1,end)",
        pipeline="semi_sync", pretrained_tables="ckpt/tables", tensorboard_dir="runs", run_name="probe", resume="auto",
    )  # fmt: skip
    fields = config_fields()
    values = {name: samples.get(name, fields[name].default) for name in components.TRAIN_PARAMS}
    _, app_args = split_torchrun(_role_command(components.train(**values)), SCRIPT)
    flags = parse_config(app_args).flags()
    assert {name: flags[name] for name in values} == values
def test_train_refuses_an_unknown_parameter():
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) \['epoch'\]"):
        components.train(epoch=3)


def test_train_leaves_unset_parameters_to_the_app():
    _, app_args = split_torchrun(_role_command(components.train()), SCRIPT)
    assert app_args == []


def test_train_sets_replicas_resources_and_job_fields():
    app = components.train(
        j="3x4",
        cpu=16,
        gpu=4,
        memMB=65536,
        image="registry.example/dlrm:1",
        name="exp/run7",
        env={"NCCL_DEBUG": "WARN"},
        max_retries=2,
        script="train_app.py",
    )
    (role,) = app.roles
    assert app.name == "run7"
    assert (role.num_replicas, role.min_replicas) == (3, 3)
    assert (role.resource.cpu, role.resource.gpu, role.resource.memMB) == (16, 4, 65536)
    assert role.image == "registry.example/dlrm:1"
    assert role.env["NCCL_DEBUG"] == "WARN"
    assert role.env["TORCHX_TRACKING_EXPERIMENT_NAME"] == "exp"
    assert role.max_retries == 2
    opts, app_args = split_torchrun(role.args[1], "train_app.py")
    assert (opts["--nnodes"], opts["--nproc_per_node"]) == ("3", "4")
    assert "--max_restarts" not in opts


def test_train_runs_the_module_unless_given_another_entry_point(tmp_path):
    from dlrm_multiepoch.launch_options import LaunchOptions

    assert "-m dlrm_multiepoch.train " in _role_command(components.train(epochs=1))
    _, app_args = split_torchrun(_role_command(components.train(m="dlrm_multiepoch.pretrain", epochs=1)), "-m dlrm_multiepoch.pretrain")
    assert app_args == ["--epochs=1"]
    command = _role_command(components.train(script="my_train.py", epochs=1))
    assert split_torchrun(command, "my_train.py")[1] == ["--epochs=1"] and " -m " not in command
    with pytest.raises(ValueError, match=r"--script 'my_train.py' and -m 'dlrm_multiepoch.pretrain' name two entry points: give one"):
        components.train(script="my_train.py", m="dlrm_multiepoch.pretrain")
    # What the sweep and the search check before launching on this machine: the script exists, the module imports.
    LaunchOptions().check_entry_point()
    LaunchOptions(m="dlrm_multiepoch.pretrain").check_entry_point()
    with pytest.raises(ValueError, match=rf"-m 'dlrm_multiepoch.trian': no such module in {re.escape(sys.executable)}"):
        LaunchOptions(m="dlrm_multiepoch.trian").check_entry_point()
    for missing in ("no_such_package.train", "dlrm_multiepoch.no_such.train"):
        with pytest.raises(ValueError, match=rf"-m '{missing}': no such module"):
            LaunchOptions(m=missing).check_entry_point()
    with pytest.raises(ValueError, match=r"--script 'nosuch.py' not found from .*; leave it out to run -m dlrm_multiepoch.train"):
        LaunchOptions(script="nosuch.py").check_entry_point()


def test_train_lets_torchrun_restart_the_workers():
    app = components.train(max_restarts=3)
    opts, _ = split_torchrun(_role_command(app), SCRIPT)
    assert opts["--max_restarts"] == "3"
    assert app.roles[0].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    with pytest.raises(ValueError, match="--max_restarts must be >= 0, got -1"):
        components.train(max_restarts=-1)


@pytest.mark.parametrize("given", [("--epochs", "5"), ("--epochs=5",)])
def test_train_rejects_a_flag_set_twice(given):
    with pytest.raises(ValueError, match=r"--epochs is set both as a component parameter \(3\)"):
        components.train(*given, epochs=3)


def test_train_parses_numbers_given_as_strings():
    # The torchx CLI passes Optional[int] / Optional[float] parameters as strings.
    _, app_args = split_torchrun(_role_command(components.train(epochs="3", learning_rate="1e-3")), SCRIPT)
    assert app_args == ["--epochs=3", "--learning_rate=0.001"]


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"epochs": "three"}, ValueError, "--epochs must be int, got 'three'"),
        ({"learning_rate": "fast"}, ValueError, "--learning_rate must be float, got 'fast'"),
        ({"epochs": 2.5}, TypeError, "--epochs must be int, got 2.5"),
    ],
)
def test_train_rejects_values_of_the_wrong_type(kwargs, error, message):
    with pytest.raises(error, match=re.escape(message)):
        components.train(**kwargs)


def test_cli_rejects_a_bad_number_at_submission():
    with pytest.raises(AssertionError, match=re.escape("--epochs must be int, got 'three'")):
        torchx("run", "--dryrun", "-s", "local_cwd", "components/dlrm.py:train", "--epochs", "three")


def test_train_accepts_flags_that_only_share_a_prefix():
    # --epochs_per_eval is a different flag from --epochs.
    _, app_args = split_torchrun(_role_command(components.train("--epochs_per_eval=2", epochs=3)), SCRIPT)
    assert app_args == ["--epochs=3", "--epochs_per_eval=2"]


def test_entry_point_resolves_and_keeps_torchx_builtins():
    component = get_component("dlrm_multiepoch.train")
    assert component.fn is components.train
    assert component.validation_errors == []
    # Registering our entry point must not hide TorchX's own components.
    assert get_component("dist.ddp").fn.__module__ == "torchx.components.dist"


def test_file_form_is_the_same_definition():
    assert (REPO_ROOT / "components/dlrm.py").resolve() == Path(components.__file__).resolve()


def test_builtins_lists_the_component():
    assert "dlrm_multiepoch.train" in torchx("builtins").stdout.split()


def test_file_and_entry_point_forms_materialise_the_same_app():
    args = ["-j", "1x2", "--epochs", "2", "--", "--freeze_schedule", "delayed"]
    by_name = torchx("run", "--dryrun", "-s", "local_cwd", "dlrm_multiepoch.train", *args)
    by_file = torchx("run", "--dryrun", "-s", "local_cwd", "components/dlrm.py:train", *args)
    assert application(by_name.stdout) == application(by_file.stdout)
    assert all(word in application(by_name.stdout) for word in ("-m ", "dlrm_multiepoch.train --epochs=2", "--freeze_schedule"))


def test_slurm_dryrun_writes_one_hetjob_group_per_node():
    out = torchx(
        "run", "--dryrun", "-s", "slurm", "dlrm_multiepoch.train",
        "-j", "2x2", "--cpu", "4", "--memMB", "4096", "--epochs", "3", "--batch_size", "2048",
        "--", "--freeze_schedule", "delayed",
    )  # fmt: skip
    request = scheduler_request(out.stdout)
    assert request.startswith("sbatch --parsable $SBATCH_SCRIPT")
    sbatch_lines = [line for line in request.splitlines() if line.startswith("#SBATCH")]
    assert sbatch_lines == [
        "#SBATCH --job-name=train-0 --requeue --ntasks-per-node=1 --cpus-per-task=4 --mem=4096",
        "#SBATCH hetjob",
        "#SBATCH --job-name=train-1 --requeue --ntasks-per-node=1 --cpus-per-task=4 --mem=4096",
    ]
    # The srun statement spans lines joined by "\"; each group runs `bash -c TORCHRUN`.
    srun = request[request.index("\nsrun ") : request.index("\nexitcode=")].replace("\\\n", " ")
    tokens = shlex.split(srun)
    commands = [tokens[i + 2] for i, t in enumerate(tokens) if t == "bash" and tokens[i + 1] == "-c"]
    assert len(commands) == 2
    for command in commands:
        opts, app_args = split_torchrun(command, SCRIPT)
        assert (opts["--nnodes"], opts["--nproc_per_node"]) == ("2", "2")
        assert app_args == ["--epochs=3", "--batch_size=2048", "--freeze_schedule", "delayed"]


def test_kubernetes_dryrun_writes_a_volcano_job():
    out = torchx(
        "run", "--dryrun", "-s", "kubernetes", "-cfg", "queue=research", "--workspace", "",
        "dlrm_multiepoch.train", "-j", "2x4", "--gpu", "4", "--image", "registry.example/dlrm:1",
        "--epochs", "3", "--", "--freeze_schedule", "delayed",
    )  # fmt: skip
    job = yaml.safe_load(scheduler_request(out.stdout))
    assert (job["apiVersion"], job["kind"]) == ("batch.volcano.sh/v1alpha1", "Job")
    assert (job["spec"]["schedulerName"], job["spec"]["queue"]) == ("volcano", "research")
    tasks = job["spec"]["tasks"]
    assert [t["name"] for t in tasks] == ["train-0", "train-1"]
    for task in tasks:
        assert (task["replicas"], task["minAvailable"]) == (1, 1)
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == "registry.example/dlrm:1"
        assert container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert container["command"][:2] == ["bash", "-c"]
        opts, app_args = split_torchrun(container["command"][2], SCRIPT)
        assert (opts["--nnodes"], opts["--nproc_per_node"]) == ("2", "4")
        assert app_args == ["--epochs=3", "--freeze_schedule", "delayed"]


def test_launch_pages_kubernetes_line_gives_each_pod_its_cpus_memory_and_gpus():
    """Issue 38, row 5: docs/LAUNCH.md's Kubernetes line, as a dry run: every 8-GPU pod gets the CPUs and memory
    the line gives (as its Slurm line does), not TorchX's default 2 CPUs and 8 GB; --workspace "" runs the image."""
    page = (REPO_ROOT / "docs" / "LAUNCH.md").read_text()
    block = re.search(r"<!-- kubernetes:[^>]*-->\s*```bash\n(.*?)```", page, re.S).group(1)
    line = shlex.split(block.replace("\\\n", " "))
    assert line[:3] == ["torchx", "run", "-s"] and line[line.index("--workspace") + 1] == ""
    job = yaml.safe_load(scheduler_request(torchx("run", "--dryrun", *line[2:]).stdout))
    for task in job["spec"]["tasks"]:
        (container,) = task["template"]["spec"]["containers"]
        resources = container["resources"]
        assert resources["limits"] == {"cpu": "64000m", "memory": "400000M", "nvidia.com/gpu": "8"}, resources
        assert resources["requests"] == {"cpu": "63900m", "memory": "398976M", "nvidia.com/gpu": "8"}, resources
    assert [t["name"] for t in job["spec"]["tasks"]] == ["train-0", "train-1"]


_PROBE_APP = """\
import json, os, sys
path = os.path.join(os.environ["PROBE_OUT"], "rank%s.json" % os.environ["RANK"])
with open(path, "w") as f:
    json.dump({"argv": sys.argv[1:], "world_size": os.environ["WORLD_SIZE"]}, f)
"""


def test_local_cwd_launch_runs_every_rank_with_the_flags(tmp_path):
    # A real 2-process torchrun launch, of a probe script in place of apps/train.py.
    probe = tmp_path / "probe.py"
    probe.write_text(_PROBE_APP)
    torchx(
        "run", "-s", "local_cwd", "dlrm_multiepoch.train", "-j", "1x2", "--script", str(probe),
        "--env", f"PROBE_OUT={tmp_path}", "--epochs", "2", "--", "--freeze_schedule", "delayed",
    )  # fmt: skip
    seen = {p.name: json.loads(p.read_text()) for p in sorted(tmp_path.glob("rank*.json"))}
    expected = {"argv": ["--epochs=2", "--freeze_schedule", "delayed"], "world_size": "2"}
    assert seen == {"rank0.json": expected, "rank1.json": expected}


# -- the launch settings: one dataclass for the commands' flags, the components' parameters and torchx --


def test_launch_flags_and_component_parameters_come_from_launch_options():
    from dlrm_multiepoch.config_section import PREPROCESS_COMPONENT, SWEEP_SEARCH_COMPONENT, TRAIN_COMPONENT, options_of
    from dlrm_multiepoch.launch_options import LaunchOptions
    from dlrm_multiepoch.sweep.command import build_parser

    actions = {a.dest: a for a in build_parser()._actions}
    for o in options_of(LaunchOptions):
        action = actions[o.name]
        assert f"--{o.name}" in action.option_strings and action.help, o.name
        assert action.default == ("" if isinstance(o.default, (dict, list)) else o.default)
    own_defaults = {components.preprocess: {"cpu": 8, "memMB": 16384}}
    roles = ((components.train, TRAIN_COMPONENT), (components.sweep, SWEEP_SEARCH_COMPONENT), (components.preprocess, PREPROCESS_COMPONENT))
    for component, role in roles:
        parameters = inspect.signature(component).parameters
        _, help_of = get_fn_docstring(component)
        for o in options_of(LaunchOptions):
            if role not in o.roles:
                assert o.name not in parameters, (component, o.name)
                continue
            default = own_defaults.get(component, {}).get(o.name, o.default)
            assert parameters[o.name].default == (None if isinstance(default, (dict, list)) else default), o.name
            assert help_of[o.name], o.name


def test_launch_options_round_trip_through_the_sweep_flags():
    from dlrm_multiepoch.config_section import argv_of, from_args
    from dlrm_multiepoch.launch_options import LaunchOptions
    from dlrm_multiepoch.sweep.command import build_parser

    options = LaunchOptions(
        scheduler="slurm", scheduler_args="partition=cpu", dryrun=True, j="2x4", script="train_app.py", cpu=16,
        gpu=4, memMB=65536, h="gpu.small", image="reg/dlrm:1", env={"A": "1", "B": "x=y"}, max_retries=2,
        mounts=["type=bind", "src=/data", "dst=/data"],
    )  # fmt: skip
    parsed = from_args(LaunchOptions, build_parser().parse_intermixed_args(["exp", *argv_of(options)]))
    assert parsed == options
    assert argv_of(LaunchOptions()) == []  # defaults are left to the command's own defaults


def test_torchx_args_launch_the_same_job_as_the_component(tmp_path):
    from dataclasses import asdict
    from pprint import pformat

    from torchx.runner import get_runner

    from dlrm_multiepoch.launch_options import LaunchOptions

    options = LaunchOptions(scheduler="slurm", dryrun=True, j="2x2", cpu=4, memMB=4096, env={"A": "1"}, max_retries=1)
    out = torchx(*options.torchx_args("dlrm_multiepoch.train", "--epochs", "2"))
    runner = get_runner()
    try:  # the request the sweep makes for a run with these options (SweepLauncher.app)
        info = runner.dryrun(components.train("--epochs", "2", **options.component_kwargs()), "slurm", cfg={})
    finally:
        runner.close()
    assert application(out.stdout) == pformat(asdict(info._app), indent=2, width=80)
    assert scheduler_request(out.stdout) == str(info).strip()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"j": "1x0"}, "-j '1x0': expected {nnodes}x{nproc_per_node} with positive integers"),
        ({"cpu": 0}, "--cpu must be >= 1, got 0"),
        ({"gpu": -1}, "--gpu must be >= 0, got -1"),
        ({"memMB": 0}, "--memMB must be >= 1, got 0"),
        ({"max_retries": -2}, "--max_retries must be >= 0, got -2"),
        ({"image": ""}, "--image must not be empty"),
        ({"mounts": ["src=/a"]}, "--mounts 'src=/a': type must be specified first"),
    ],
)
def test_components_refuse_a_bad_launch_setting_by_its_flag(kwargs, message):
    for component, extra in ((components.train, {}), (components.sweep, {"experiment_dir": "e"})):
        with pytest.raises(ValueError, match=re.escape(message)):
            component(**extra, **kwargs)
    with pytest.raises(TypeError, match=re.escape("--cpu must be int, got '4'")):
        components.train(cpu="4")
