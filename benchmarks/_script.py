"""How every benchmark script ends: ``run_script(main)`` runs it, and a mistake in what it was given (a
policy path that does not exist, a bad split, config or override, an out-of-range option) is printed
as one line naming it, ``SCRIPT: error: ...``, with exit code 2, as ``rods`` does. ``RODS_TRACEBACK=1``
shows the whole traceback instead."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Callable

import yaml


def run_script(main: Callable[[], Any]) -> None:
    try:
        result = main()
    except (ValueError, OSError, KeyError, yaml.YAMLError) as exc:
        if os.environ.get("RODS_TRACEBACK"):
            raise
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"{Path(sys.argv[0]).name}: error: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    raise SystemExit(result if isinstance(result, int) else 0)
