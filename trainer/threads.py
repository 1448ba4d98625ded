"""torch's CPU thread count for one phase of a job (warm start, rollouts, evaluation).

The phases want different counts on a small CPU: the warm start's padded batches and the
evaluation's wide generation batches use a second core well, the GRPO rollouts' small decode
steps do not (trainer README, "CPU notes"). ``0`` (or less) means: leave the count as it is.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import torch


@contextlib.contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """``torch.set_num_threads(n)`` for the block, the previous count restored after; ``n <= 0``
    leaves torch's count as it is."""
    before = torch.get_num_threads()
    if n > 0:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)
