"""Per-turn checks of a BFCL episode: the progress reward and the success flag.

A turn with ground-truth calls passes when, as in BFCL's ``multi_turn_checker``, (1) the agent made at least
one call in it, (2) every backend instance's public state equals the ground truth's after the ground truth's
calls of turns 0..t, and (3) the ground truth's results of turn ``t`` are contained (as a multiset) in the
results of all the agent's calls so far. Turns with no ground-truth calls (the missing parameter's or
function's turn) are not checked, as in BFCL. ``success`` is every checked turn passing (BFCL's verdict);
the **progress reward** is EnvTuning's turn score (its ``ScoreCalculator``: 1 for a passing turn, else 0),
paid when the turn ends, over the number of checked turns, so it sums to 1 exactly when ``success`` holds.
(EnvTuning divides by all turns, unchecked ones included, so its ground truth scores below 1 on the missing
categories; dividing by the checked turns makes the ground truth score 1.0 on every task.)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from .backend import Backend
from .data import BFCLTask, Call


def contains_all(needed: Sequence[str], have: Sequence[str]) -> bool:
    """Whether every item of ``needed`` is in ``have``, with multiplicity, in any order (BFCL's response check)."""
    if not needed:
        return True
    pool = Counter(have)
    for item in needed:
        if pool[item] <= 0:
            return False
        pool[item] -= 1
    return True


class TurnScorer:
    """Runs the ground truth beside the agent's backend and checks each turn when it ends."""

    __slots__ = ("task", "gt", "checked", "weight", "passed")

    def __init__(self, task: BFCLTask) -> None:
        self.task = task
        self.gt = Backend(task)
        self.checked = tuple(t for t, calls in enumerate(task.ground_truth) if calls)
        if not self.checked:
            raise ValueError(f"BFCL task {task.id} has no turn with ground-truth calls")
        self.weight = 1.0 / len(self.checked)
        self.passed: list[bool | None] = []

    def end_turn(self, model: Backend, turn_calls: int, all_results: Sequence[str]) -> float:
        """Check the turn that just ended (the next unchecked one); its reward (``weight`` or 0)."""
        turn = len(self.passed)
        calls = self.task.ground_truth[turn]
        gt_results = self.gt.run(calls)
        if not calls:
            self.passed.append(None)
            return 0.0
        ok = turn_calls > 0 and model.same_state(self.gt) and contains_all(gt_results, all_results)
        self.passed.append(ok)
        return self.weight if ok else 0.0

    @property
    def progress(self) -> float:
        return self.weight * sum(1 for p in self.passed if p)

    @property
    def success(self) -> bool:
        """All turns ended and every checked one passed."""
        return len(self.passed) == self.task.n_turns and all(p is not False for p in self.passed)


@dataclass(frozen=True)
class Verdict:
    success: bool
    progress: float
    passed: tuple[bool | None, ...]


def check_transcript(task: BFCLTask, transcript: Sequence[Sequence[Call]]) -> Verdict:
    """Score a whole transcript (the agent's calls per turn) offline, as the env scores it step by step.
    A transcript with fewer turns than the task (a force-terminated episode) fails, as in BFCL."""
    model = Backend(task)
    scorer = TurnScorer(task)
    results: list[str] = []
    for turn in range(min(len(transcript), task.n_turns)):
        results.extend(model.run(list(transcript[turn])))
        scorer.end_turn(model, len(transcript[turn]), results)
    return Verdict(scorer.success and len(transcript) == task.n_turns, scorer.progress, tuple(scorer.passed))
