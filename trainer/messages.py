"""What a job prints for its user, once per job (not once per process)."""

from __future__ import annotations

import os
import sys


def note(message: str, *, stderr: bool = False) -> None:
    """Print ``message`` once per job: on the main process of an ``accelerate launch`` (which sets ``RANK``), alone
    otherwise. Config notes come before the accelerator exists, so its ``is_main_process`` cannot be asked yet.
    ``stderr``: there, not on standard output (which ``rods evaluate --json`` keeps for its JSON)."""
    if os.environ.get("RANK", "0") == "0":
        print(message, flush=True, file=sys.stderr if stderr else sys.stdout)
