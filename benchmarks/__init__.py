"""The project's benchmarks, a package of thin scripts over shared parts (issue 47):

- :mod:`benchmarks.runner`: jobs (arm, seed, learner + settings) resumed from per-job JSON records; in this process,
  a local process pool, or Ray (``--ray local`` / ``--ray ADDRESS``);
- :mod:`benchmarks.evaluator`: the batched greedy evaluator of the Gymnasium views and the random masked agent;
- :mod:`benchmarks.stats`: bootstrap CIs over seeds x tasks, paired differences, the paper's targets (PASS / MISS);
- :mod:`benchmarks.recording`: the task-source wrapper that records every group a learner trained on, and the
  figures read from those groups;
- :mod:`benchmarks.provenance`: command, date, machine, commit and uncommitted paths;
- :mod:`benchmarks.report`: Markdown tables and sections; :mod:`benchmarks.plots`: the PNG figures;
- scales in ``benchmarks/configs/*.yaml``.

Every script runs as ``python benchmarks/X.py`` and as ``python -m benchmarks.X`` from the repository root. Library
code never imports this package (tests/test_import_graph.py).
"""
