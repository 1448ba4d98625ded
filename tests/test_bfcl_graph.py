"""``rods graph --bfcl``: the BFCL classes' API dependency graph (type and name matching of returns to parameters)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import networkx as nx
import pytest

from rods_gym.cli import main


def test_without_bfcl_eval_the_command_says_how_to_install_it() -> None:
    # a fresh interpreter: the BFCL data folder is cached once found, so hiding bfcl_eval must come first
    hide = "import sys; sys.modules['bfcl_eval'] = None; from rods_gym.cli import main; sys.exit(main(['graph', '--bfcl']))"
    done = subprocess.run([sys.executable, "-c", hide], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-800:]
    assert "rods graph --bfcl: error" in done.stderr and "--no-deps bfcl-eval" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_graph_links_returned_fields_to_parameters_of_that_name_and_type(tmp_path: Path, capsys) -> None:
    pytest.importorskip("bfcl_eval", reason="bfcl-eval is not installed (README, BFCL)")
    assert main(["graph", "--bfcl", "--json", "--out", str(tmp_path)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert len(stats["classes"]) == 8 and stats["functions"] > 100 and 0 < stats["edges"]
    graph = nx.node_link_graph(json.loads((tmp_path / "bfcl_api_graph.json").read_text()), edges="links")
    assert graph.number_of_edges() == stats["edges"] and (tmp_path / "bfcl_api_graph.png").stat().st_size > 1000
    from rods_gym.bfcl.data import func_docs  # every edge: a response field that is a parameter of the target

    docs = {f"{c}.{d['name']}": d for c in stats["classes"] for d in func_docs(c)}
    for src, dst, param in graph.edges(data="param"):
        response = docs[src]["response"]["properties"]
        assert param in response and param in docs[dst]["parameters"]["properties"]
