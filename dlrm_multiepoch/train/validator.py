"""The validator: when a run evaluates (every N steps, an automatic schedule's cadence, each epoch end) and what follows.

A :class:`Validator` calls an evaluation it is given (the app's evaluates its loaders;
in a user's loop, any function from split names to per-task metrics), reports the
results, and hands them to its :class:`Decisions`: none by default, or an
:class:`~dlrm_multiepoch.train.auto_run.AutoRun` that freezes, unfreezes, checkpoints
the best weights and stops the run (``--freeze_schedule auto``).
"""

import math
import time
from typing import Callable, Dict, List, Optional, Sequence

from torch.distributed.checkpoint.stateful import Stateful

from dlrm_multiepoch.part import Position, TrainPart
from dlrm_multiepoch.train.evaluate import TaskMetrics

Results = Dict[str, TaskMetrics]  # split (or split.slice) -> task -> metric -> value
Evaluate = Callable[[Sequence[str]], Results]


class Decisions(TrainPart):
    """What a run decides from its evaluations: nothing (this default); subclasses decide.

    Example::

        class StopBelow(Decisions):
            def observe(self, results, step):
                self.stopped = results["val"]["label"]["auc"] < 0.5
    """

    eval_every_n_steps = 0  # an own cadence of evaluations (0: none)
    splits: Sequence[str] = ()  # what those evaluate
    stopped = False  # whether the run ends before its budget

    def evaluation_due(self, step: int) -> bool:
        """Whether an evaluation of :attr:`splits` is due after ``step`` steps."""
        return False

    def observe(self, results: Results, step: int) -> None:
        """Decide on the results of an evaluation after ``step`` steps."""

    def finish(self, step: int, evaluate: Callable[[], Results]) -> None:
        """The run ended after ``step`` steps; ``evaluate`` evaluates every split."""


class Validator(TrainPart):
    """Owns a run's evaluation cadence and passes each evaluation's results on.

    Args:
        evaluate: split names -> per-split, per-task metrics (e.g. a
            :class:`~dlrm_multiepoch.train.evaluate.SplitEvaluator`, or the user's function).
        splits: the splits evaluated every ``every_n_steps`` and at each epoch end.
        every_n_steps: evaluate ``splits`` every this many steps mid-epoch too (0: only at epoch ends).
        decisions: what follows from the results (default: nothing); with its own cadence.
        report: called with ``(results, step, epoch)`` after each evaluation (the app logs them).

    Example::

        validator = Validator(my_evaluate, ["val"], decisions=AutoRun(auto, "ckpt", dmp, opt, logger))
        for step in ...:                               # after each training step
            validator.at_step(step, epoch=step / steps_per_epoch)
            if validator.stopped:
                break
        validator.finish(step)                         # the auto schedule restores its best weights
    """

    def __init__(
        self,
        evaluate: Evaluate,
        splits: Sequence[str],
        every_n_steps: int = 0,
        decisions: Optional[Decisions] = None,
        report: Callable[[Results, int, float], None] = lambda results, step, epoch: None,
    ) -> None:
        self.evaluate, self.splits, self.every_n_steps = evaluate, list(splits), every_n_steps
        self.decisions = decisions or Decisions()
        self.report = report
        self.seconds = 0.0  # spent evaluating

    def _timed_evaluate(self, splits: List[str]) -> Results:
        start = time.perf_counter()
        try:
            return self.evaluate(splits)
        finally:
            self.seconds += time.perf_counter() - start

    def steps_to_next(self, step: int) -> float:
        """Steps from ``step`` to the next mid-epoch evaluation (``inf``: none): train that many, let the
        pipeline drain (its dataloader ends), then call :meth:`at_step`."""
        periods = (self.every_n_steps, self.decisions.eval_every_n_steps)
        return min((p - step % p for p in periods if p), default=math.inf)

    @property
    def stopped(self) -> bool:
        """Whether the decisions ended the run."""
        return self.decisions.stopped

    def at_step(self, step: int, epoch: float) -> Optional[Results]:
        """Evaluate if an evaluation is due after ``step`` steps (``epoch``: the position in epochs)."""
        if self.every_n_steps and step % self.every_n_steps == 0:
            return self.validate(step, epoch)
        if self.decisions.evaluation_due(step):
            return self.validate(step, epoch, self.decisions.splits)
        return None

    def validate(self, step: int, epoch: float, splits: Optional[Sequence[str]] = None, observe: bool = True) -> Results:
        """Evaluate ``splits`` (default: all of :attr:`splits`) now, report, and decide unless not ``observe``.
        A run that evaluates nothing (pre-training) reports nothing."""
        names = list(splits or self.splits)
        if not names:
            return {}
        results = self._timed_evaluate(names)
        self.report(results, step, epoch)
        if observe:
            self.decisions.observe(results, step)
        return results

    def finish(self, step: int) -> None:
        """The run ended after ``step`` steps: the decisions' last word (the auto schedule's best weights)."""
        self.decisions.finish(step, lambda: self._timed_evaluate(list(self.splits)))

    # The decisions' state and checkpoints follow the run's.
    def checkpoint_parts(self) -> Dict[str, Stateful]:
        return self.decisions.checkpoint_parts()

    def after_save(self) -> None:
        self.decisions.after_save()

    def after_load(self, position: Position) -> None:
        self.decisions.after_load(position)
