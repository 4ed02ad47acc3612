"""The sweep: strategy presets and free strategies, the plan of runs, run states, and what each
scheduler is asked to run (real TorchX dry runs). Real launches: ``tests/test_sweep_runs.py``."""

import ast
import json
import re
import shlex
from contextlib import redirect_stdout

import pytest
import yaml

import dlrm_multiepoch.components as components
from dlrm_multiepoch.sweep import DEFAULT_STRATEGIES, STRATEGIES, RunState, build_plan, parse_strategy, run_state, window_strategy
from dlrm_multiepoch.sweep.command import main as sweep_main
from dlrm_multiepoch.sweep.jobs import failure_reason
from dlrm_multiepoch.sweep.manifest import check_experiment, update_manifest
from dlrm_multiepoch.train.config import parse_config
from tests.torchx_cli import application, scheduler_request, split_torchrun, torchx

LATE = "tables=frozen@[0,2) train@[2,end)"


def test_presets_and_free_strategies():
    assert parse_strategy("delayed") is STRATEGIES["delayed"]
    assert {"joint-1ep", "joint", "early", "delayed"} <= set(STRATEGIES)
    assert (STRATEGIES["joint-1ep"].run_epochs(3), STRATEGIES["joint"].run_epochs(3), STRATEGIES["early"].run_epochs(3)) == (1, 4, 3)
    free = parse_strategy(f"late=--freeze_schedule '{LATE}' --learning_rate 0.01")
    assert (free.name, free.flags) == ("late", ("--freeze_schedule", LATE, "--learning_rate", "0.01"))
    assert parse_strategy("long=--epochs 6").run_epochs(3) == 6
    with pytest.raises(ValueError, match="unknown strategy 'delay'"):
        parse_strategy("delay")
    with pytest.raises(ValueError, match="strategy name 'a b' must start"):
        parse_strategy("a b=--seed 1")
    with pytest.raises(ValueError, match="cannot split its flags"):
        parse_strategy("x=--freeze_schedule 'unclosed")
    with pytest.raises(ValueError, match="FLAGS must start with a --flag"):
        parse_strategy("x=delayed")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_preset_plans_and_the_app_parses_its_flags(name, tmp_path):
    strategy = STRATEGIES[name]
    common = [*(["--model", strategy.model, "--history_length", "3"] if strategy.model else []),
              *(["--val_fraction", "0.1"] if strategy.needs_val else [])]  # fmt: skip
    for budget in (2, 3):
        (run,) = build_plan(str(tmp_path / "exp"), [strategy], [0], budget, common).runs  # the app's parser on each run
        cfg = parse_config(list(run.flags))
        assert (run.name, cfg.epochs) == (f"{name}-s0", strategy.run_epochs(budget))
        if "--freeze_schedule" in strategy.flags and not cfg.freeze.is_auto:  # the schedule binds to the run's length
            cfg.freeze.schedule.resolve(steps_per_epoch=4, num_epochs=cfg.epochs)


def test_a_free_strategy_may_not_take_a_presets_name():
    with pytest.raises(ValueError, match=r"strategy 'delayed=--min_count 2': 'delayed' is a preset "
                                         r"\(--freeze_schedule delayed\); give yours another name"):  # fmt: skip
        parse_strategy("delayed=--min_count 2")


def test_window_strategies():
    assert window_strategy(0, 2).flags == ("--freeze_schedule", "tables=train")
    w = window_strategy(1.5, 2)
    assert (w.name, w.flags, w.window) == ("window@1.5", ("--freeze_schedule", "tables=frozen@[0,1.5) train@[1.5,end)"), 1.5)
    with pytest.raises(ValueError, match=r"--windows: start 2 must be in \[0, 2\)"):
        window_strategy(2, 2)


def test_plan_gives_each_run_its_flags_and_the_app_parses_them(tmp_path):
    exp = str(tmp_path / "exp")
    strategies = [parse_strategy("joint-1ep"), parse_strategy("joint"), parse_strategy(f"late=--freeze_schedule '{LATE}'")]
    plan = build_plan(exp, strategies, [0, 1], 3, ["--dataset", "movielens"])
    assert [r.name for r in plan.runs] == ["joint-1ep-s0", "joint-s0", "late-s0", "joint-1ep-s1", "joint-s1", "late-s1"]
    late = plan.runs[2]
    assert late.flags == (
        "--dataset", "movielens", "--freeze_schedule", LATE, "--epochs", "3", "--seed", "0",
        "--tensorboard_dir", exp, "--run_name", "late-s0", "--resume", "auto",
    )  # fmt: skip
    cfg = parse_config(list(late.flags))
    assert (cfg.freeze.freeze_schedule, cfg.epochs, cfg.seed, cfg.metrics.run_name, cfg.checkpoint.resume) == (LATE, 3, 0, "late-s0", "auto")
    assert [r.epochs for r in plan.runs[:3]] == [1, 4, 3]


@pytest.mark.parametrize(
    "strategies, common, message",
    [
        (["joint"], ["--epochs", "2"], r"the common flags set \['--epochs'\], which the sweep sets per run"),
        (["joint"], ["--run_name=x"], r"the common flags set \['--run_name'\]"),
        (["x=--seed 3"], [], "strategy 'x' sets --seed, which the sweep sets per run"),
        (["delayed"], ["--freeze_schedule", "joint"], r"strategy 'delayed' sets \['--freeze_schedule'\], also given"),
        (["no-cross-grad"], [], "strategy 'no-cross-grad' needs --model multipath .* the common flags give --model dlrm"),
        (["joint", "joint"], [], r"strategies \['joint'\] are given twice"),
        (["auto"], [], "strategy 'auto' decides on a validation split: add --val_fraction"),
        (["x=--freeze_schedule 'tables=frozen@[0,5) train@[5,end)'"], [], "run x-s0: --freeze_schedule: .*"),
        (["x=--embeding_dim 8"], [], "run x-s0: unrecognized arguments: --embeding_dim 8"),
        (["x=--freeze_schedule delayed --freeze_schedule joint"], [], r"strategy 'x' set --freeze_schedule 2 times \('delayed', 'joint'\); set it once"),
        (["x=--checkpoint --no-checkpoint"], [], r"strategy 'x' set --checkpoint 2 times \('--checkpoint', '--no-checkpoint'\)"),
        (["joint"], ["--max_rows", "10", "--max_rows=20"], r"the common flags set --max_rows 2 times \('10', '20'\)"),
    ],
)
def test_plan_refuses_bad_sweeps_naming_the_flag(tmp_path, strategies, common, message):
    with pytest.raises(ValueError, match=message):
        build_plan(str(tmp_path), [parse_strategy(s) for s in strategies], [0], 3, common)


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_run_states_and_manifest(tmp_path):
    exp = tmp_path / "exp"
    plan = build_plan(str(exp), [parse_strategy("joint"), parse_strategy("early"), parse_strategy("delayed")], [0], 2, [])
    joint, early, delayed = plan.runs
    assert run_state(str(exp), joint).status == "new"
    evaluations = [{"epoch": 1}, {"epoch": 1.5}, {"epoch": 2}, {"epoch": 3}]
    _write(exp / "joint-s0" / "summary.json", json.dumps({"evaluations": evaluations, "config": {"epochs": 3}, "wall_time_s": 9.0}))
    assert run_state(str(exp), joint) == RunState("finished", 3)
    # Finished after stopping itself (the automatic schedule) before its last epoch: still finished.
    _write(exp / "early-s0" / "summary.json", json.dumps({"evaluations": evaluations[:1], "config": {"epochs": 2}, "wall_time_s": 3.0}))
    assert run_state(str(exp), early) == RunState("finished", 1)
    # Interrupted after epoch 1 with a complete checkpoint: resumable.
    _write(exp / "early-s0" / "summary.json", json.dumps({"evaluations": evaluations[:1]}))
    state = {"step": 12, "parts": {"progress": {"epoch": 1, "batch_in_epoch": 2}}}
    _write(exp / "early-s0" / "checkpoints" / "step_12" / "trainer_state.json", json.dumps(state))
    assert run_state(str(exp), early).status == "resumable" and run_state(str(exp), early).epochs_done == 1
    # Interrupted without a checkpoint (only an incomplete save): starts over.
    _write(exp / "delayed-s0" / "checkpoints" / "step_10.tmp" / "x", "")
    assert run_state(str(exp), delayed).status == "stale"
    # The manifest keeps each run's flags (the group's common flags at the top level).
    update_manifest(plan)
    saved = json.loads((exp / "sweep.json").read_text())
    assert (saved["runs"]["joint-s0"]["epochs"], saved["runs"]["early-s0"]["epochs"], saved["common_flags"]) == (3, 2, [])


def _srun_app_args(sbatch: str):
    """The training-app flags of every srun group of an sbatch script."""
    srun = sbatch[sbatch.index("\nsrun ") : sbatch.index("\nexitcode=")].replace("\\\n", " ")
    tokens = shlex.split(srun)
    commands = [tokens[i + 2] for i, t in enumerate(tokens) if t == "bash" and tokens[i + 1] == "-c"]
    return [split_torchrun(c) for c in commands]


def test_slurm_dryrun_is_one_job_per_run_and_keeps_a_schedule_with_spaces(tmp_path, capsys):
    exp = str(tmp_path / "exp")
    late = f"late=--freeze_schedule '{LATE}'"
    assert sweep_main([exp, "joint", late, "-s", "slurm", "-j", "2x2", "--dryrun", "--seeds", "0,1", "--", "--dataset", "movielens"]) == 0
    out = capsys.readouterr().out
    runs = re.split(r"^=== run (\S+) \((\d+) epochs\) ===$", out, flags=re.M)[1:]
    names = runs[0::3]
    assert names == ["joint-s0", "late-s0", "joint-s1", "late-s1"] and runs[1::3] == ["4", "3", "4", "3"]
    for name, request in zip(names, runs[2::3]):
        assert request.strip().startswith("sbatch --parsable $SBATCH_SCRIPT")
        groups = _srun_app_args(request)
        assert len(groups) == 2  # one hetjob group per node
        for opts, app_args in groups:
            assert (opts["--nnodes"], opts["--nproc_per_node"]) == ("2", "2")
            cfg = parse_config(app_args)
            assert (cfg.metrics.run_name, cfg.metrics.tensorboard_dir, cfg.checkpoint.resume, cfg.data.dataset) == (name, exp, "auto", "movielens")
            assert cfg.freeze.freeze_schedule == (LATE if name.startswith("late") else "joint")
    assert not (tmp_path / "exp").exists()  # a dry run writes nothing


def test_the_default_sweep_gives_every_run_the_same_validation_split(tmp_path, capsys):
    assert sweep_main([str(tmp_path / "exp"), "-s", "slurm", "--dryrun"]) == 0
    out = capsys.readouterr().out
    needing = ", ".join(n for n in DEFAULT_STRATEGIES if STRATEGIES[n].needs_val)
    assert f"sweep: every run gets --val_fraction 0.1 ({needing} decide(s) on a validation split;" in out
    runs = re.split(r"^=== run (\S+) \(\d+ epochs\) ===$", out, flags=re.M)[1:]
    assert runs[0::2] == [f"{name}-s0" for name in DEFAULT_STRATEGIES]
    assert {parse_config(_srun_app_args(r)[0][1]).data.val_fraction for r in runs[1::2]} == {0.1}


def test_kubernetes_dryrun_is_one_volcano_job_per_run(tmp_path, capsys):
    exp = "/mnt/runs/exp"
    args = [exp, "delayed", "-s", "kubernetes", "-cfg", "queue=research", "-j", "1x4", "--gpu", "4", "--image", "reg/dlrm:1"]
    assert sweep_main([*args, "--dryrun", "--windows", "0,1", "--epochs", "2"]) == 0
    out = capsys.readouterr().out
    parts = re.split(r"^=== run (\S+) \(\d+ epochs\) ===$", out, flags=re.M)[1:]
    assert parts[0::2] == ["delayed-s0", "window@0-s0", "window@1-s0"]
    for name, request in zip(parts[0::2], parts[1::2]):
        job = yaml.safe_load(request)
        assert (job["kind"], job["spec"]["queue"]) == ("Job", "research")
        (task,) = job["spec"]["tasks"]
        (container,) = task["template"]["spec"]["containers"]
        assert container["image"] == "reg/dlrm:1" and container["resources"]["limits"]["nvidia.com/gpu"] == "4"
        _, app_args = split_torchrun(container["command"][2])
        assert parse_config(app_args).metrics.run_name == name


def test_sweep_component_runs_the_sweep_command_on_every_scheduler(tmp_path):
    strategy = f"late=--freeze_schedule '{LATE}'"
    app = components.sweep(
        "joint", strategy, "--", "--history_length", "10",
        experiment_dir="runs/bx", seeds="0,1", windows="0,1", j="1x2", env={"A": "1"}, model="multipath", max_rows=5000,
    )  # fmt: skip
    (role,) = app.roles
    assert role.entrypoint == "dlrm-multiepoch" and role.args[:2] == ["sweep", "runs/bx"]
    at = role.args.index("--")
    assert role.args[at - 2 :] == ["joint", strategy, "--", "--max_rows=5000", "--model=multipath", "--history_length", "10"]
    assert role.env["A"] == "1"
    # The job's command line is one the sweep command takes: its dry run plans the runs.
    out = tmp_path / "out.txt"
    with open(out, "w") as f, redirect_stdout(f):
        assert sweep_main([*role.args[1:at], "--dryrun", "-s", "local_cwd", *role.args[at:]]) == 0
    planned = re.findall(r"^=== run (\S+) ", out.read_text(), flags=re.M)
    assert planned == ["joint-s0", "late-s0", "window@0-s0", "window@1-s0", "joint-s1", "late-s1", "window@0-s1", "window@1-s1"]
    # Real TorchX CLI dry runs, by entry-point name and by file, on the three schedulers.
    cli = ["--experiment_dir", "runs/bx", "--seeds", "0,1", "--", "joint", strategy, "--", "--max_rows", "100"]
    tail = ["joint", strategy, "--", "--max_rows", "100"]
    local = application(torchx("run", "--dryrun", "-s", "local_cwd", "dlrm_multiepoch.sweep", *cli).stdout)
    (local_role,) = ast.literal_eval(re.sub(r"<RetryPolicy\.\w+: '\w+'>", "None", local))["roles"]
    assert local_role["entrypoint"] == "dlrm-multiepoch" and local_role["args"][-len(tail) :] == tail
    slurm = scheduler_request(torchx("run", "--dryrun", "-s", "slurm", "components/dlrm.py:sweep", *cli).stdout)
    srun = shlex.split(slurm[slurm.index("\nsrun ") : slurm.index("\nexitcode=")].replace("\\\n", " "))
    assert srun[srun.index("dlrm-multiepoch") + 1 : srun.index("dlrm-multiepoch") + 3] == ["sweep", "runs/bx"]
    assert srun[-len(tail) :] == tail
    k8s = torchx("run", "--dryrun", "-s", "kubernetes", "-cfg", "queue=q", "--workspace", "", "dlrm_multiepoch.sweep", "--image", "reg/dlrm:1", *cli)
    (task,) = yaml.safe_load(scheduler_request(k8s.stdout))["spec"]["tasks"]
    (container,) = task["template"]["spec"]["containers"]
    assert container["command"][:3] == ["dlrm-multiepoch", "sweep", "runs/bx"] and container["command"][-len(tail) :] == tail


def _app_config(flags):
    """The config the app records in summary.json and checkpoints for ``flags``."""
    return json.loads(json.dumps(parse_config(list(flags)).to_dict()))


def test_a_run_keeps_its_flags_and_a_group_its_common_flags(tmp_path):
    exp = str(tmp_path / "exp")
    common = ["--dataset", "movielens"]
    plan = build_plan(exp, [parse_strategy("joint-1ep"), parse_strategy("delayed")], [0], 2, common)
    update_manifest(plan)
    check_experiment(plan)  # the same sweep again
    check_experiment(build_plan(exp, [parse_strategy("joint-1ep")], [0], 3, common))  # joint-1ep is 1 epoch whatever the budget
    with pytest.raises(ValueError, match=re.escape(
        f"run delayed-s0 in {exp} was trained with other flags (sweep.json): --epochs 2 -> 3 (a schedule is laid out "
        "over the whole --epochs budget, so a run never continues under another one). Keep its flags, or sweep the new "
        "configuration as its own group with --group NAME"
    )):  # fmt: skip
        check_experiment(build_plan(exp, [parse_strategy("delayed")], [0], 3, common))
    with pytest.raises(ValueError, match=re.escape(f"{exp} holds runs swept with other common flags: --data_path (not set) -> d")):
        check_experiment(build_plan(exp, [parse_strategy("early")], [0], 2, [*common, "--data_path", "d"]))
    # Another configuration as a group of its own: its own folder, its own record in sweep.json.
    other = build_plan(exp, [parse_strategy("delayed")], [0], 3, [*common, "--data_path", "d"], group="d3")
    check_experiment(other)
    (run,) = other.runs
    assert (run.name, run.group) == ("d3/delayed-s0", "d3")
    assert parse_config(list(run.flags)).metrics.tensorboard_dir == f"{exp}/d3" and parse_config(list(run.flags)).metrics.run_name == "delayed-s0"
    update_manifest(other)
    saved = json.loads((tmp_path / "exp" / "sweep.json").read_text())
    assert saved["groups"] == {"d3": {"budget": 3, "common_flags": [*common, "--data_path", "d"]}}
    assert saved["common_flags"] == common and saved["runs"]["d3/delayed-s0"]["group"] == "d3"
    with pytest.raises(ValueError, match=re.escape(f"group 'd3' of {exp} holds runs swept with other common flags: --data_path d -> e")):
        check_experiment(build_plan(exp, [parse_strategy("delayed")], [0], 3, [*common, "--data_path", "e"], group="d3"))
    (tmp_path / "exp" / "sweep.json").write_text("{")
    with pytest.raises(ValueError, match=r"sweep.json is not valid JSON"):
        check_experiment(plan)


def test_a_run_folder_speaks_for_its_run_without_the_manifest(tmp_path):
    exp = tmp_path / "exp"
    plan = build_plan(str(exp), [parse_strategy("delayed")], [0], 2, [])
    (run,) = plan.runs
    _write(exp / "delayed-s0" / "summary.json", json.dumps({"config": _app_config(run.flags), "wall_time_s": 1.0}))
    check_experiment(plan)  # no sweep.json: the folder's own record agrees
    longer = build_plan(str(exp), [parse_strategy("delayed")], [0], 3, [])
    with pytest.raises(ValueError, match=re.escape("run delayed-s0 in ") + ".*" + re.escape("(delayed-s0/summary.json): --epochs 2 -> 3")):
        check_experiment(longer)
    # A moved experiment folder is the same experiment (where runs write is not what they are).
    moved = tmp_path / "moved"
    exp.rename(moved)
    check_experiment(build_plan(str(moved), [parse_strategy("delayed")], [0], 2, []))
    # Without a summary, the newest checkpoint's state file speaks; an older format is named with what to do.
    (moved / "delayed-s0" / "summary.json").unlink()
    state = moved / "delayed-s0" / "checkpoints" / "step_5" / "trainer_state.json"
    _write(state, json.dumps({"format": 2, "config": _app_config(run.flags)}))
    with pytest.raises(ValueError, match=re.escape("(delayed-s0/checkpoints/step_5/trainer_state.json): --epochs 2 -> 3")):
        check_experiment(build_plan(str(moved), [parse_strategy("delayed")], [0], 3, []))
    _write(state, json.dumps({"format": 1, "config": _app_config(run.flags)}))
    with pytest.raises(ValueError, match=re.escape(
        f"run delayed-s0: its checkpoint {state.parent} was written by an older version of dlrm-multiepoch (checkpoint "
        "format 1; this version reads format 2). Finish the run with the version that wrote it, or move its run folder aside"
    )):  # fmt: skip
        check_experiment(build_plan(str(moved), [parse_strategy("delayed")], [0], 2, []))


def test_launch_parameters_and_data_needs_are_checked_before_anything_is_written(tmp_path, capsys):
    exp = tmp_path / "exp"
    data = tmp_path / "prepped"
    _write(data / "meta.json", json.dumps({"name": "movielens", "splits": {"train": {}, "test": {}}}))
    cases = [
        (["-j", "abc"], "-j 'abc': expected {nnodes}x{nproc_per_node} with positive integers"),
        (["-j", "1x0"], "-j '1x0': expected"),
        (["-s", "nosuch"], "-s 'nosuch': not a TorchX scheduler; choose one of "),
        (["--env", "FOO"], "--env 'FOO': expected NAME=VALUE pairs separated by commas, got 'FOO'"),
        (["--env", "A=1,FOO"], "got 'FOO'"),
        (["-cfg", "foo"], "-cfg 'foo': "),
        (["-cfg", "partition=x"], "-cfg 'partition=x': local_cwd has no option 'partition'; its options: log_dir"),
        (["--group", "a/b"], "--group 'a/b' must start with a letter or digit"),
        (["auto", "--", "--data_path", str(data)], f"auto decide(s) on a validation split, but --data_path {data} is a "
         "preprocessed folder with splits ['train', 'test'] (it ignores --val_fraction)"),
        (["--", "--data_path", str(tmp_path / "nosuch")], f"--data_path {tmp_path / 'nosuch'} does not exist"),
    ]  # fmt: skip
    for args, message in cases:
        own, common = (args[: args.index("--")], args[args.index("--") :]) if "--" in args else (args, [])
        with pytest.raises(SystemExit) as e:
            sweep_main([str(exp), "joint", *own, "--script", __file__, *common])
        assert e.value.code == 2 and message in capsys.readouterr().err, args
    assert not exp.exists()  # nothing written


@pytest.mark.launch
def test_a_failed_run_is_told_by_the_apps_own_error_line(tmp_path):
    log = tmp_path / "combined.log"
    log.write_text(
        "[0]:[rank0]: Traceback (most recent call last):\n"
        '[0]:[rank0]:   File "apps/train.py", line 22, in main\n'
        "[0]:[rank0]: dlrm_multiepoch.train.lock.RunFolderBusy: run folder r is in use by a live trainer (pid 7)\n"
        "[0]:Traceback (most recent call last):\n"
        "[0]:torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n"
        "[0]:============================================================\n"
        "[0]:apps/train.py FAILED\n"
    )
    assert failure_reason(str(log)) == "RunFolderBusy: run folder r is in use by a live trainer (pid 7)"
    log.write_text("[0]:Killed\n")
    assert failure_reason(str(log)) is None and failure_reason(None) is None
