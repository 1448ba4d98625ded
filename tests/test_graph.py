"""Suite facts and the API graph: derived from the domains, typed edges keyed by the
consumer's parameter, cross-domain links, exports and the ``rods graph`` command."""

from __future__ import annotations

import json
from pathlib import Path

import networkx as nx
import pytest

from rods_gym import Suite
from rods_gym.domain import KINDS
from rods_gym.graph import build_api_graph, export_graph, graph_stats, output_ports


def test_suite_size_and_coverage(suite: Suite) -> None:
    assert len(suite.domains) >= 8
    assert len(suite.tools) >= 80
    assert {t.kind for t in suite.tools.values()} == set(KINDS)
    assert len({d.name for d in suite.domains}) == len(suite.domains)
    # every domain has tools of several kinds, and every tool belongs to exactly one domain
    assert sum(len(d.tools) for d in suite.domains) == len(suite.tools)
    for d in suite.domains:
        assert len({t.kind for t in d.tools}) >= 5, d.name


def test_graph_nodes_and_typed_edges(suite: Suite) -> None:
    g = suite.graph
    assert isinstance(g, nx.MultiDiGraph)
    assert set(g.nodes) == set(suite.tools)
    for name, data in g.nodes(data=True):
        tool = suite.tools[name]
        assert (data["domain"], data["kind"]) == (tool.domain, tool.kind)
    assert g.number_of_edges() > 300
    for u, v, key, d in g.edges(keys=True, data=True):
        producer, consumer = suite.tools[u], suite.tools[v]
        assert u != v
        assert key in consumer.param_names, (u, v, key)  # keyed by the consumer's parameter
        assert consumer.param(key).type == d["type"]  # ... whose type is what flows
        ports = dict((f, t) for f, t in output_ports(producer, suite.types))
        assert d["fields"] and all(ports[f] == d["type"] for f in d["fields"])  # produced by u
        assert suite.types[d["type"]].linkable
        assert d["cross_domain"] == (producer.domain != consumer.domain)


def test_graph_is_complete_and_derived(suite: Suite) -> None:
    """Every (producer output, consumer parameter) pair of a linkable type is an edge, and the
    graph rebuilt from the domains alone is identical."""
    g = suite.graph
    expected = set()
    for a in suite.tools.values():
        for _, vtype in output_ports(a, suite.types):
            for b in suite.tools.values():
                for p in b.params:
                    if b.name != a.name and p.type == vtype:
                        expected.add((a.name, b.name, p.name))
    assert set(g.edges(keys=True)) == expected
    rebuilt = build_api_graph([t for d in suite.domains for t in d.tools], suite.types, suite.entities)
    assert set(rebuilt.edges(keys=True)) == expected
    # free text and categories never make edges
    assert all(suite.types[d["type"]].role not in ("text", "category", "flag") for *_, d in g.edges(data=True))


def test_cross_domain_edges(suite: Suite) -> None:
    g = suite.graph
    cross = [(u, v, k) for u, v, k, d in g.edges(keys=True, data=True) if d["cross_domain"]]
    assert len(cross) > 50
    # a person's email from any domain feeds the messaging domain's send_email
    feeders = {suite.tools[u].domain for u, v, k in cross if v == "send_email" and k == "to"}
    assert len(feeders) >= 4
    domains_linked = {(suite.tools[u].domain, suite.tools[v].domain) for u, v, _ in cross}
    assert len({a for a, _ in domains_linked}) == len(suite.domains)  # every domain feeds another


def test_the_png_title_and_the_printed_statistics_count_the_same(suite: Suite, capsys) -> None:
    """The drawing shows one arrow per tool pair and the statistics count one edge per parameter fed: both name
    both counts in the same words (once the title said 514 cross-domain tool pairs and the statistics 550
    cross-domain edges, as if they disagreed)."""
    from rods_gym.cli import main
    from rods_gym.graph import graph_stats, graph_title

    g = suite.graph
    stats = graph_stats(g)
    cross = [(u, v) for u, v, d in g.edges(data=True) if d["cross_domain"]]
    assert stats["cross_domain_edges"] == len(cross) > stats["cross_domain_tool_pairs"] == len(set(cross))
    assert stats["tool_pairs"] == len(set(g.edges())) < stats["edges"]
    title = graph_title(g)
    edges = f"{stats['edges']} (between {stats['tool_pairs']} tool pairs)"
    cross_edges = f"{stats['cross_domain_edges']} (between {stats['cross_domain_tool_pairs']} tool pairs"
    assert f"{stats['edges']} edges (between {stats['tool_pairs']} tool pairs)" in title
    assert f"{stats['cross_domain_edges']} cross-domain edges (between {stats['cross_domain_tool_pairs']} tool pairs" in title
    assert main(["graph", "--samples", "1"]) == 0
    out = capsys.readouterr().out
    assert f"edges               {edges}" in out and f"cross-domain edges  {cross_edges}" in out


def test_graph_stats(suite: Suite) -> None:
    stats = graph_stats(suite.graph)
    assert stats["tools"] == len(suite.tools)
    assert stats["edges"] == suite.graph.number_of_edges()
    assert stats["domains"] == len(suite.domains)
    assert sum(stats["tools_per_kind"].values()) == len(suite.tools)
    assert stats["longest_chain"] >= 4
    assert stats["chain_shapes_per_depth"][1] == len(set(nx.get_node_attributes(suite.graph, "skill").values()))


def _check_exports(g: nx.MultiDiGraph, out: Path) -> None:
    data = json.loads((out / "api_graph.json").read_text())
    back = nx.node_link_graph(data, edges="edges", multigraph=True, directed=True)
    assert set(back.nodes) == set(g.nodes)
    assert set(back.edges(keys=True)) == set(g.edges(keys=True))
    assert all(back.nodes[n]["domain"] == g.nodes[n]["domain"] for n in g)
    gm = nx.read_graphml(out / "api_graph.graphml", force_multigraph=True)
    assert set(gm.nodes) == set(g.nodes)
    assert set(gm.edges(keys=True)) == set(g.edges(keys=True))
    # attributes come back typed: booleans as booleans (the string 'False' would be truthy), field
    # tuples as comma-joined names
    for u, v, k, d in g.edges(keys=True, data=True):
        back_d = gm.edges[u, v, k]
        assert back_d["cross_domain"] is d["cross_domain"]
        assert back_d["fields"] == ",".join(d["fields"])
    assert all(gm.nodes[n]["mutating"] is g.nodes[n]["mutating"] for n in g)
    png = (out / "api_graph.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 10_000


def test_export_graph(suite: Suite, tmp_path: Path) -> None:
    """export_graph on a two-domain subgraph (small, so the drawing is quick)."""
    keep = [t for t, spec in suite.tools.items() if spec.domain in ("banking", "messaging")]
    g = nx.MultiDiGraph(suite.graph.subgraph(keep))
    paths = export_graph(g, tmp_path / "out")
    assert paths == {k: tmp_path / "out" / f"api_graph.{ext}"
                     for k, ext in (("json", "json"), ("graphml", "graphml"), ("png", "png"))}
    assert any(d["cross_domain"] for *_, d in g.edges(data=True))
    _check_exports(g, tmp_path / "out")


def test_rods_graph_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str], suite: Suite) -> None:
    """``rods graph --out DIR`` prints the statistics and exports the whole graph."""
    from rods_gym.cli import main

    assert main(["graph", "--out", str(tmp_path), "--samples", "3"]) == 0
    out = capsys.readouterr().out
    assert f"tools               {len(suite.tools)}" in out
    assert f"edges               {suite.graph.number_of_edges()}" in out
    assert "cross-domain edges" in out and "wrote png" in out
    _check_exports(suite.graph, tmp_path)
    assert main(["graph", "--json", "--samples", "2", "--out", str(tmp_path / "again")]) == 0
    captured = capsys.readouterr()
    stats = json.loads(captured.out)  # with --json, stdout is the JSON alone; "wrote ..." goes to stderr
    assert "wrote png" in captured.err
    assert stats["tools"] == len(suite.tools)
    assert set(stats["sampled_signatures_per_depth"]) == {str(d) for d in range(1, 7)}
    assert all(1 <= n <= 2 for n in stats["sampled_signatures_per_depth"].values())


def test_rods_graph_cli_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A file given as --out, and an unknown option, are one-line errors with the graph command's usage."""
    from rods_gym.cli import main

    target = tmp_path / "taken.txt"
    target.write_text("keep me")
    assert main(["graph", "--out", str(target), "--samples", "0"]) == 2
    assert "--out" in capsys.readouterr().err and target.read_text() == "keep me"
    with pytest.raises(SystemExit) as exit_info:
        main(["graph", "--bogus"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "usage: rods graph" in err and "unrecognized arguments: --bogus" in err
