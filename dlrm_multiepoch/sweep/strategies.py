"""The strategy presets a sweep compares: one registry, ``NAME -> training-app flags``.

A strategy is how the same model is trained over several epochs: when its tables
train (freeze schedules), which gradient paths reach them (gates), and the remedies
(learning-rate schedules, re-initialisation, ...) as they land. Each is a set of flags
of the training app (``python -m dlrm_multiepoch.train``) plus how many epochs it runs.
Remedies register their presets here with :func:`register_strategy`; ``default=True``
puts one in the default sweep.

A strategy can also be given free-form, ``NAME=FLAGS``, where FLAGS is a shell-quoted
flag string (``late='--freeze_schedule "tables=frozen@[0,2) train@[2,end)"'``).

Example::

    strategy = parse_strategy("joint")                     # a preset
    strategy.run_epochs(budget=3)                          # 4: joint shows its peak
    parse_strategy('late=--freeze_schedule "tables=frozen@[0,2) train@[2,end)"').flags
"""

import re
import shlex
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+@-]*$")
WINDOW_PREFIX = "window@"


@dataclass(frozen=True)
class Strategy:
    """One way to train the model, as flags of the training app.

    Args:
        name: its name in run folders and tables (letters, digits, ``_.+@-``).
        flags: training-app flags, e.g. ``("--freeze_schedule", "delayed")``.
        help: one line for ``dlrm-multiepoch sweep --list``.
        epochs: a fixed number of epochs; None: the sweep's budget ``--epochs``.
        extra_epochs: epochs beyond the budget (joint runs one more, to show its peak).
        model: the ``--model`` it needs (gates exist only on the multi-path model).
        needs_val: it decides on a validation split, so the sweep's common flags need
            ``--val_fraction`` (every strategy of the sweep then trains on the same rows).
        window: for update-window strategies, the epoch the tables start training.
        search: a candidate of ``dlrm-multiepoch search`` too (its place in the search's tree follows from
            its schedule: ``search/candidates.py``).
    """

    name: str
    flags: Tuple[str, ...] = ()
    help: str = ""
    epochs: Optional[int] = None
    extra_epochs: int = 0
    model: Optional[str] = None
    needs_val: bool = False
    window: Optional[float] = None
    search: bool = False

    def run_epochs(self, budget: int) -> int:
        """Epochs this strategy trains for a sweep whose budget is ``budget`` epochs."""
        own = flag_value(self.flags, "epochs")
        if own is not None:
            return int(own)
        return self.epochs if self.epochs is not None else budget + self.extra_epochs


STRATEGIES: Dict[str, Strategy] = {}
DEFAULT_STRATEGIES: List[str] = []


def register_strategy(
    name: str,
    flags: str,
    help: str,
    *,
    default: bool = False,
    epochs: Optional[int] = None,
    extra_epochs: int = 0,
    model: Optional[str] = None,
    needs_val: bool = False,
    search: bool = False,
) -> Strategy:
    """Add a preset to the registry (``flags`` is shell-quoted text); ``default`` adds it to the default sweep,
    ``search`` to the search's candidates."""
    if name in STRATEGIES:
        raise ValueError(f"strategy {name!r} is registered twice")
    strategy = Strategy(
        check_name(name),
        tuple(shlex.split(flags)),
        help,
        epochs=epochs,
        extra_epochs=extra_epochs,
        model=model,
        needs_val=needs_val,
        search=search,
    )
    STRATEGIES[name] = strategy
    if default:
        DEFAULT_STRATEGIES.append(name)
    return strategy


# -- parsing ----------------------------------------------------------------------


def parse_strategy(spec: str) -> Strategy:
    """A preset name, or ``NAME=FLAGS`` with FLAGS shell-quoted (``'...'`` keeps spaces) and NAME not a preset's."""
    name, eq, flags = spec.partition("=")
    name = name.strip()
    if not eq:
        if name not in STRATEGIES:
            raise ValueError(
                f"unknown strategy {spec!r}: give a preset ({', '.join(STRATEGIES)}) or NAME=FLAGS, "
                "e.g. 'late=--freeze_schedule \"tables=frozen@[0,2) train@[2,end)\"'"
            )
        return STRATEGIES[name]
    if name in STRATEGIES:
        raise ValueError(
            f"strategy {spec!r}: {name!r} is a preset ({shlex.join(STRATEGIES[name].flags)}); give yours another "
            f"name, e.g. '{name}-2={flags.strip()}'"
        )
    try:
        tokens = tuple(shlex.split(flags))
    except ValueError as e:
        raise ValueError(f"strategy {name!r}: cannot split its flags {flags!r}: {e}") from None
    if tokens and not tokens[0].startswith("--"):
        raise ValueError(f"strategy {name!r}: FLAGS must start with a --flag, got {flags!r}")
    return Strategy(check_name(name), tokens, help=f"free: {flags.strip()}")


def window_strategy(start: float, budget: int) -> Strategy:
    """Tables frozen for the first ``start`` epochs, then trained until the budget ends."""
    if not 0 <= start < budget:
        raise ValueError(f"--windows: start {start:g} must be in [0, {budget}) (the --epochs budget)")
    schedule = "tables=train" if start == 0 else f"tables=frozen@[0,{start:g}) train@[{start:g},end)"
    return Strategy(
        f"{WINDOW_PREFIX}{start:g}",
        ("--freeze_schedule", schedule),
        help=f"tables updated from epoch {start:g} to {budget}",
        window=start,
    )


def flag_value(flags: Tuple[str, ...], name: str) -> Optional[str]:
    """The value of ``--name`` in a flag list (``--name V`` or ``--name=V``; the last wins), else None."""
    value = None
    for i, token in enumerate(flags):
        if token == f"--{name}" and i + 1 < len(flags):
            value = flags[i + 1]
        elif token.startswith(f"--{name}="):
            value = token.split("=", 1)[1]
    return value


def flag_names(flags: Tuple[str, ...]) -> List[str]:
    """The ``--flag`` names a flag list sets (``--no-x`` counts as ``x``)."""
    return [name for name, _ in flag_items(flags)]


def flag_items(flags: Sequence[str]) -> List[Tuple[str, str]]:
    """``(name, value)`` of each ``--flag`` in a flag list, in order.

    ``--name V`` and ``--name=V`` give ``V``; a switch (``--x``, ``--no-x``, followed by
    another flag or nothing) gives its own token, and ``--no-x`` is named ``x``.

    Example::

        flag_items(["--data_path", "d", "--no-checkpoint"])  # [("data_path", "d"), ("checkpoint", "--no-checkpoint")]
    """
    items = []
    for i, token in enumerate(flags):
        if not token.startswith("--") or len(token) <= 2:
            continue
        name, eq, value = token[2:].partition("=")
        if not eq:
            switch = i + 1 == len(flags) or flags[i + 1].startswith("--")
            value = token if switch else flags[i + 1]
        items.append((name[3:] if name.startswith("no-") else name, value))
    return items


def check_name(name: str, what: str = "strategy name") -> str:
    """``name`` if it can name a run folder, else ValueError naming ``what``."""
    if not NAME_PATTERN.match(name):
        raise ValueError(
            f"{what} {name!r} must start with a letter or digit and hold only letters, digits and _.+@- "
            "(it names run folders)"
        )
    return name


# -- the presets ----------------------------------------------------------------
# Baselines: joint training after one epoch, and joint run past the budget so that its
# best epoch (what early stopping on the test curve would give) is visible.
register_strategy(
    "joint-1ep", "--freeze_schedule joint", "tables train with the rest, one epoch (the usual baseline)",
    default=True, epochs=1,
)  # fmt: skip
register_strategy(
    "joint", "--freeze_schedule joint",
    "tables train with the rest every epoch, budget + 1 epochs (shows where joint peaks)",
    default=True, extra_epochs=1, search=True,
)  # fmt: skip
# Freeze schedules (dlrm_multiepoch/schedule.py presets).
register_strategy("early", "--freeze_schedule early", "tables train in epoch 1 only, then frozen", default=True, search=True)
register_strategy(
    "delayed", "--freeze_schedule delayed", "tables frozen until the last epoch, trained in it", default=True, search=True
)
register_strategy("frozen", "--freeze_schedule frozen", "tables never train (their init or pre-trained values)")
# Gradient-path gates of the multi-path model: which paths may update the tables.
register_strategy(
    "no-cross-grad", "--freeze_schedule gate:feature_cross=closed",
    "multi-path: the feature-cross path never sends gradient into the tables", model="multipath",
)  # fmt: skip
register_strategy(
    "cross-grad-1ep", "--freeze_schedule 'gate:feature_cross=open@[0,1) closed@[1,end)'",
    "multi-path: feature-cross gradient reaches the tables in epoch 1 only", model="multipath",
)  # fmt: skip
register_strategy(
    "delayed-no-cross", "--freeze_schedule 'delayed; gate:feature_cross=closed'",
    "multi-path: delayed, and the feature-cross path never updates the tables", model="multipath",
)  # fmt: skip
# The automatic schedule (dlrm_multiepoch/auto): decided on a validation split; the run
# ends holding its best-validation weights, which the comparison reports as its result.
# Not in the default sweep: it misses the issue-18 target on MovieLens with a random split
# (below joint after 3 epochs by more than a seed std; docs/RESULTS.md, "today's verdicts").
register_strategy(
    "auto", "--freeze_schedule auto",
    "validation-driven: tables frozen until val plateaus, trained until it stops improving, then the rest alone",
    default=False, needs_val=True, search=True,
)  # fmt: skip
register_strategy(
    "joint-early-stop", "--freeze_schedule auto --auto_frozen_cap 0 --auto_after_tables stop",
    "joint training, stopped when validation stops improving (best-validation weights kept)",
    default=True, needs_val=True,
)  # fmt: skip
# The table remedies (dlrm_multiepoch/optim): learning rates, re-initialisation, the unknown row.
register_strategy(
    "falr", "--falr log",
    "frequency-adaptive per-row table LR: lr * log(1+count)/log(1+max count) (Pinterest Ads)",
)  # fmt: skip
# In the default sweep: the best fixed strategy on Book-Crossing (docs/RESULTS.md, "Which strategy to deploy").
register_strategy(
    "reinit", "--reinit tables@each",
    "re-initialise every table (seeded) and its optimizer state before each epoch after the first (MEDA)",
    default=True, search=True,
)  # fmt: skip
register_strategy(
    "unknown-row", "--min_count 2",
    "ids seen once in train fold into the unknown row, so the row unseen ids use is trained",
)  # fmt: skip
register_strategy(
    "id-dropout", "--id_dropout 0.05",
    "5% of training ids (seeded) are looked up as the unknown row, so it trains on a sample of all rows",
)  # fmt: skip
register_strategy(
    "lr-cosine", "--table_lr_warmup 5% --table_lr_decay cosine",
    "table LR warm-up over 5% of the run, then cosine decay to 0 (a sparse-optimizer schedule)",
)  # fmt: skip
register_strategy(
    "delayed+unknown-row", "--freeze_schedule delayed --min_count 2",
    "tables frozen until the last epoch; ids seen once fold into the trained unknown row",
)  # fmt: skip
register_strategy(
    "reinit+unknown-row", "--reinit tables@each --min_count 2",
    "tables re-initialised before each epoch after the first; ids seen once fold into the unknown row",
)  # fmt: skip
register_strategy(
    "delayed+falr", "--freeze_schedule delayed --falr log",
    "tables frozen until the last epoch, then trained with the frequency-adaptive LR",
)  # fmt: skip
