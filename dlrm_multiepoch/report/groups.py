"""Which runs are compared together: configuration groups, and one row per strategy and configuration.

Runs are averaged over seeds only when their whole training configuration is the same
but for per-run bookkeeping (seed, run folder, resume mode, logging, checkpoints), and
they trained on the same data: the same ``--dataset`` and ``--data_path`` and the same
content of each source file (its sha256, recorded by the run). The data is never a
strategy's: runs of other data (another ``--data_path``, a file rewritten between runs) go
to separate groups, each with its own table, so no winner is named across datasets. A
branch's ``--start_from`` counts by what it names, its parent's strategy and checkpoint,
not by the seed's run folder it lies in: the seeds of a search's branch are one row.
Strategies of one table may differ only in their strategies' own flags (from the
sweep's manifest; without one, the flags constant within each strategy name and
different between names, which the table names). Runs whose other flags differ (another
``--data_path``, ``--embedding_dim``, ...) go to separate, labelled groups; two runs of
one strategy name with different configurations become separate rows named by the flags
that differ.

Example::

    for group in config_groups(runs):
        print(group.label or "all runs", [r.name for r in group.runs], group.strategy_flags)
"""

import os
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Set, Tuple

from dlrm_multiepoch.config_section import BOOKKEEPING as BOOKKEEPING_ROLE
from dlrm_multiepoch.report.runs import RunRecord
from dlrm_multiepoch.run_files import parse_run_folder_name
from dlrm_multiepoch.train.config import flags_with

# Flags that name, place or log a run but cannot change what it learns, and the seed (the BOOKKEEPING role).
BOOKKEEPING = frozenset(flags_with(BOOKKEEPING_ROLE))
# Set per strategy by the sweep (joint runs one epoch more than the budget).
PER_STRATEGY = frozenset({"epochs"})
# The data a run trains on: its source and the content of its files (DATA). Never a strategy's own flag, so no
# table ranks runs of other data together (a strategy may still encode the same data otherwise: --min_count 2).
DATA = "data"
DATA_FLAGS = frozenset({"dataset", "data_path", DATA})


@dataclass
class ConfigGroup:
    """Runs that share every flag but their strategies' own.

    Args:
        label: ``flag=value, ...`` of the flags that differ between groups ("" when there is one group).
        runs: its runs.
        differs: those flags and this group's values.
        strategy_flags: the flags that differ between its strategies (what the table compares).
        rows: row label -> runs averaged into it (a strategy name, with the flags that
            differ when one name has several configurations in the group).
    """

    label: str
    runs: List[RunRecord]
    differs: Dict[str, Any] = field(default_factory=dict)
    strategy_flags: List[str] = field(default_factory=list)
    rows: Dict[str, List[RunRecord]] = field(default_factory=dict)


def strategy_flag_names(runs: Sequence[RunRecord]) -> Set[str]:
    """Every flag some strategy of ``runs`` sets: from the manifest, or (without) the flags
    constant within each strategy name and different between names; never a data flag."""
    names: Set[str] = set(PER_STRATEGY)
    unknown = [r for r in runs if r.strategy_flags is None]
    for run in runs:
        names.update(run.strategy_flags or ())
    by_strategy: Dict[str, List[RunRecord]] = {}
    for run in unknown:
        by_strategy.setdefault(run.strategy, []).append(run)
    for key in {k for r in unknown for k in r.config} - BOOKKEEPING:
        within = all(len({_text(_config(r).get(key)) for r in rs}) == 1 for rs in by_strategy.values())
        if within and len({_text(_config(r).get(key)) for r in unknown}) > 1:
            names.add(key)
    return names - DATA_FLAGS


def config_groups(runs: Sequence[RunRecord]) -> List[ConfigGroup]:
    """``runs`` split by their common configuration (first-seen order), each with its rows."""
    own = strategy_flag_names(runs)
    keyed: Dict[Tuple[Tuple[str, str], ...], List[RunRecord]] = {}
    for run in runs:
        keyed.setdefault(_key(run, BOOKKEEPING | own), []).append(run)
    keys = list(keyed)
    flags = sorted({k for key in keys for k, _ in key})
    varying = [f for f in flags if len({dict(key).get(f) for key in keys}) > 1]
    groups = []
    for key, members in keyed.items():
        values = dict(key)
        differs = {f: values.get(f, "unset") for f in varying}
        label = _label(differs)
        strategy_flags = sorted(f for f in own if len({_text(_config(r).get(f)) for r in members}) > 1)
        groups.append(ConfigGroup(label, members, differs, strategy_flags, _rows(members)))
    return groups


def _rows(runs: Sequence[RunRecord]) -> Dict[str, List[RunRecord]]:
    """Strategy name -> runs; a name with several full configurations is split, each named by what differs."""
    by_name: Dict[str, Dict[Tuple[Tuple[str, str], ...], List[RunRecord]]] = {}
    for run in runs:
        by_name.setdefault(run.strategy, {}).setdefault(_key(run, BOOKKEEPING), []).append(run)
    rows: Dict[str, List[RunRecord]] = {}
    for name, configs in by_name.items():
        if len(configs) == 1:
            rows[name] = next(iter(configs.values()))
            continue
        flags = sorted({k for key in configs for k, _ in key})
        varying = [f for f in flags if len({dict(key).get(f) for key in configs}) > 1]
        for key, members in configs.items():
            values = dict(key)
            rows[f"{name} ({_label({f: values.get(f, 'unset') for f in varying})})"] = members
    return rows


def _key(run: RunRecord, ignored: frozenset) -> Tuple[Tuple[str, str], ...]:
    data = [(DATA, run.data)] if run.data else []  # the content it trained on (unknown for older runs)
    return tuple(sorted([(k, _text(v)) for k, v in _config(run).items() if k not in ignored] + data))


def _config(run: RunRecord) -> Dict[str, Any]:
    """The run's flags as compared: a branch's ``--start_from`` as its parent's strategy and checkpoint
    (``joint/checkpoints/step_10``) when it lies in the run folder of the branch's own seed
    (``.../joint-s0/checkpoints/step_10``), wherever the experiment folder is."""
    start = run.config.get("start_from")
    if not start:
        return run.config
    parts = os.path.normpath(str(start)).split(os.sep)
    for i in range(len(parts) - 1, -1, -1):
        parsed = parse_run_folder_name(parts[i])
        if parsed is not None and parsed[1] == run.seed:
            return dict(run.config, start_from="/".join([parsed[0], *parts[i + 1 :]]))
    return run.config


def _label(values: Dict[str, str]) -> str:
    return ", ".join(f"{flag}={value}" for flag, value in values.items())


def _text(value: Any) -> str:
    return value if isinstance(value, str) else repr(value)
