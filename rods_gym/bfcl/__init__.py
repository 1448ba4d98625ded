"""BFCL-V3 multi-turn (the RODS paper's and EnvTuning's setting) as Gymnasium environments.

The tasks, ground truth, function docs and executable backends come from the optional dependency
``bfcl-eval`` (``pip install 'rods-gym[bfcl]'``); nothing is downloaded at run time, the data is in its wheel.

Importing ``bfcl_eval``'s top-level helpers (``bfcl_eval.utils``, ``bfcl_eval.constants.eval_config``) creates
``result/``, ``score/`` and ``.file_locks/`` folders beside the installed package and pulls in its model
handlers' dependencies, so this package never does: it reads the JSON data files from the package folder
(found with ``importlib.util.find_spec``, which runs none of its code) and imports only the backend modules
(``bfcl_eval.eval_checker.multi_turn_eval.func_source_code.*``, standard library plus ``mpmath``), lazily,
when an episode first needs a class. BFCL's own checker is imported by the tests only, to compare with ours.

Modules: :mod:`.data` (tasks, ground truth, function docs), :mod:`.backend` (a fresh backend per episode,
executing calls as BFCL does), :mod:`.scoring` (per-turn checks: the progress reward and the success flag),
:mod:`.env` (the chat-view env), :mod:`.split` (train/test files under ``envs/bfcl``), :mod:`.taskmodel`
(call DAGs, signatures, the API dependency graph), :mod:`.resample` (RODS tier-0 variants).
"""

from __future__ import annotations

CATEGORIES = ("base", "miss_param", "miss_func", "long_context")
INSTALL_HINT = "pip install 'rods-gym[bfcl]' && pip install --no-deps bfcl-eval==2026.3.23 (its own pins conflict with numpy 2 and networkx 3.5)"
