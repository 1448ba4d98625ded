"""The skill-aligned resampler: signature fidelity per tier, solvability, lineage,
deduplication, decontamination, determinism, fallbacks, and the naive ablation."""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import replace

import networkx as nx
import numpy as np
import pytest
from networkx.algorithms import isomorphism as iso

import rods_gym
from rods_gym import DIFFICULTIES, Suite, TaskSampler, TaskSpec, ToolChainEnv, compute_signature, solve
from rods_gym.resampler import (
    Decontaminator, NaiveResampler, Resampler, ResamplerConfig, TaskIndex, binding_key, content_key, oracle_solves,
    signature_classes, task_depth,
)
from rods_gym.synth import resample
from rods_gym.tasksets import held_out_tools
from rods_gym.signature import WL_ITERATIONS, Signature, _simple
from rods_gym.task import Call, Dep, Turn


@pytest.fixture(scope="module")
def seeds(suite: Suite) -> list[TaskSpec]:
    medium = TaskSampler(suite, DIFFICULTIES["medium"], seed=21).sample_many(60)
    hard = TaskSampler(suite, DIFFICULTIES["hard"], seed=21).sample_many(30)
    return medium + hard


@pytest.fixture(scope="module")
def held_out(suite: Suite) -> list[TaskSpec]:
    """Stand-ins for dev/test/OOD: other sampler draws."""
    return TaskSampler(suite, DIFFICULTIES["medium"], seed=22, id_prefix="held").sample_many(120)


@pytest.fixture(scope="module")
def grown(suite: Suite, seeds: list[TaskSpec],
          held_out: list[TaskSpec]) -> tuple[Resampler, list[tuple[TaskSpec, TaskSpec]]]:
    """(resampler, [(parent, variant)]): 3 variants asked of every seed."""
    r = Resampler(suite, decontaminate=held_out)
    rng = np.random.default_rng(0)
    pairs = [(t, v) for t in seeds for v in r.resample(t, 3, rng)]
    return r, pairs


def relaxed_isomorphic(a: TaskSpec, b: TaskSpec, suite: Suite) -> bool:
    """Tier 1: labelled DAGs isomorphic once node skills are relaxed to tool kinds."""
    def graph(t: TaskSpec) -> nx.MultiDiGraph:
        g = compute_signature(t, suite).graph.copy()
        for n, d in g.nodes(data=True):
            skill, rest = d["label"].split("@", 1)
            d["label"] = skill.split(":")[0] + "@" + rest
        return g
    return nx.is_isomorphic(graph(a), graph(b), node_match=iso.categorical_node_match("label", None),
                            edge_match=iso.categorical_multiedge_match("label", None))


# -- signatures ------------------------------------------------------------------------------
def relabel(task: TaskSpec, rng: np.random.Generator) -> TaskSpec:
    """The same task with its call ids permuted (and calls listed in another valid order)."""
    ids = [c.id for c in task.calls]
    new = {old: f"k{int(j)}" for old, j in zip(ids, rng.permutation(len(ids)))}
    calls = tuple(Call(new[c.id], c.tool, c.args, c.turn) for c in reversed(task.calls))
    deps = tuple(Dep(new[d.src], new[d.dst], d.param, d.field) for d in task.deps)
    turns = tuple(Turn(t.message, t.locked, tuple((new[c], p) for c, p in t.withheld)) for t in task.turns)
    answer = None if task.answer is None else replace(task.answer, call=new[task.answer.call])
    return replace(task, id=task.id + "-relabelled", calls=calls, deps=deps, turns=turns, answer=answer)


def test_signature_is_invariant_under_relabeling(suite: Suite, seeds: list[TaskSpec]) -> None:
    rng = np.random.default_rng(1)
    for t in seeds:
        r = relabel(t, rng)
        a, b = compute_signature(t, suite), compute_signature(r, suite)
        assert a.key == b.key and a.same(b), t.id
        assert binding_key(t) == binding_key(r) and task_depth(t) == task_depth(r)
    # and the classes see through relabelling, but not through a real change of structure
    sigs = [compute_signature(t, suite) for t in seeds[:30]]
    sigs += [compute_signature(relabel(t, rng), suite) for t in seeds[:30]]
    classes = signature_classes(sigs)
    assert classes[:30] == classes[30:]


def _raw_signature(edges: list[tuple[int, int]], n: int) -> Signature:
    """A signature built exactly as ``compute_signature`` builds one, for a raw call DAG
    whose calls all have the same label and whose edges all carry ids."""
    g = nx.MultiDiGraph()
    g.add_nodes_from((f"c{i}", {"label": "read:person@0"}) for i in range(n))
    for s, d in edges:
        g.add_edge(f"c{s}", f"c{d}", label="id")
    level: dict[str, int] = {}
    for v in nx.topological_sort(g):
        level[v] = 1 + max((level[p] for p in g.predecessors(v)), default=0)
    depth = max(level.values())
    widths = tuple(sum(1 for x in level.values() if x == k) for k in range(1, depth + 1))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        wl = nx.weisfeiler_lehman_graph_hash(_simple(g), node_attr="label", edge_attr="label", iterations=WL_ITERATIONS)
    return Signature(wl, depth, widths, n, 1, (("plain",),), 0, g)


def test_hash_collisions_are_resolved_by_the_isomorphism_check() -> None:
    # two 6-call DAGs that 3 rounds of Weisfeiler-Lehman cannot tell apart (found by search)
    a = _raw_signature([(0, 1), (0, 2), (1, 2), (1, 3), (2, 3)], 6)
    b = _raw_signature([(0, 1), (0, 3), (1, 2), (1, 3), (2, 3)], 6)
    assert a.wl_hash == b.wl_hash and a.key == b.key  # a genuine collision of the bucket key
    assert not a.same(b)
    assert signature_classes([a, b, a, b]) == [0, 1, 0, 1]


# -- variants --------------------------------------------------------------------------------------
def test_variants_match_their_parent_at_their_tier(suite: Suite, seeds: list[TaskSpec], grown) -> None:
    r, pairs = grown
    assert len(pairs) >= 0.95 * 3 * len(seeds)
    tiers = Counter(v.meta["tier"] for _, v in pairs)
    assert tiers[0] >= 0.9 * len(pairs), tiers
    for parent, v in pairs:
        sp, sv = compute_signature(parent, suite), compute_signature(v, suite)
        tier = v.meta["tier"]
        assert sv.depth == sp.depth and sv.n_calls == sp.n_calls and sv.n_turns == sp.n_turns
        if tier == 0:
            assert sv.same(sp), (parent.id, v.id)
            assert sv.turn_types == sp.turn_types and sv.n_distractors == sp.n_distractors
        elif tier == 1:
            assert relaxed_isomorphic(parent, v, suite), (parent.id, v.id)
    assert r.stats["produced"] == len(pairs) == sum(r.stats[f"produced_tier{k}"] for k in range(3))


def test_variants_use_other_tools_values_and_worlds(grown) -> None:
    _, pairs = grown
    exact = [(p, v) for p, v in pairs if v.meta["tier"] == 0]
    other_tools = sum(1 for p, v in exact if [c.tool for c in p.calls] != [c.tool for c in v.calls])
    assert other_tools >= 0.5 * len(exact)
    assert all(v.world_seed != p.world_seed for p, v in pairs)
    assert all(content_key(v) != content_key(p) for p, v in pairs)
    # wording varies too: several styles, and never the parent's exact message
    assert len({v.meta["style"] for _, v in pairs}) >= 10
    assert all(v.turns[0].message != p.turns[0].message for p, v in pairs)


def test_variants_round_trip_and_carry_lineage(grown) -> None:
    _, pairs = grown
    ids = [v.id for _, v in pairs]
    assert len(set(ids)) == len(ids)
    assert len({content_key(v) for _, v in pairs}) == len(pairs)
    for parent, v in pairs:
        assert TaskSpec.from_json(v.to_json()) == v and TaskSpec.from_json(v.to_json()).to_json() == v.to_json()
        assert v.meta["source"] == "resample" and v.meta["resampler"] == "skill"
        assert v.meta["parent"] == parent.id and v.meta["root"] == parent.id
        assert v.meta["generation"] == 1 and v.meta["tier"] in (0, 1, 2)
        assert v.id.startswith(parent.id + "~")


def test_every_variant_is_solved_by_the_oracle_in_every_view(suite: Suite, grown) -> None:
    _, pairs = grown
    assert all(oracle_solves(v, suite) for _, v in pairs)
    envs = [ToolChainEnv(mode=m, suite=suite) for m in ("chat", "compact", "structured")]
    for _, v in pairs[::4]:
        for env in envs:
            env.reset(options={"task": v})
            ret, info = solve(env)
            assert info["success"] and info["progress"] == 1.0 and ret == pytest.approx(1.0), (env.mode, v.id)


def test_variants_never_collide_with_held_out_sets(suite: Suite, grown, held_out: list[TaskSpec]) -> None:
    _, pairs = grown
    held_content = {content_key(t) for t in held_out}
    held_bindings = {binding_key(t) for t in held_out}
    checker = Decontaminator(held_out)
    for _, v in pairs:
        assert content_key(v) not in held_content
        assert binding_key(v) not in held_bindings
        assert checker.check(v) is None


def test_real_splits_stay_clean(suite: Suite) -> None:
    """On the checked-in sets (when built): no held-out tool, no dev/test/OOD binding."""
    try:
        train = rods_gym.load_split("train")
        held = rods_gym.load_split("dev") + rods_gym.load_split("test") + rods_gym.load_split("ood")
    except FileNotFoundError:
        pytest.skip("task sets not built")
    r = Resampler(suite, decontaminate=held, config=ResamplerConfig(exclude_tools=held_out_tools()))
    rng = np.random.default_rng(5)
    variants = [v for t in train[::8] for v in r.resample(t, 2, rng)]
    assert len(variants) >= 90
    banned = set(held_out_tools())
    held_bindings = {binding_key(t) for t in held}
    for v in variants:
        assert not banned & {c.tool for c in v.calls} and not banned & set(v.distractors)
        assert binding_key(v) not in held_bindings


def test_generations_chain(suite: Suite, seeds: list[TaskSpec]) -> None:
    r = Resampler(suite)
    rng = np.random.default_rng(2)
    child = r.resample(seeds[3], 1, rng)[0]
    grandchild = r.resample(child, 1, rng)[0]
    assert grandchild.meta["generation"] == 2 and grandchild.meta["parent"] == child.id
    assert grandchild.meta["root"] == seeds[3].id and grandchild.id.startswith(seeds[3].id + "~")
    assert compute_signature(grandchild, suite).same(compute_signature(seeds[3], suite)) or grandchild.meta["tier"] > 0


# -- dedup, decontamination, determinism --------------------------------------------------------------
def test_same_rng_same_variants_and_exclude_is_respected(suite: Suite, seeds: list[TaskSpec]) -> None:
    parents = seeds[:25]

    def run(exclude=()) -> list[TaskSpec]:
        r, rng = Resampler(suite), np.random.default_rng(7)
        return [v for t in parents for v in r.resample(t, 2, rng, exclude=exclude)]

    first, again = run(), run()
    assert [v.to_json() for v in first] == [v.to_json() for v in again]
    for excl in (first, TaskIndex(first)):  # a plain collection and the O(1) index
        fresh = run(excl)
        assert fresh and not {content_key(v) for v in fresh} & {content_key(v) for v in first}


def test_contaminated_candidates_are_rejected_and_counted(suite: Suite, seeds: list[TaskSpec]) -> None:
    parent = seeds[5]
    plain = Resampler(suite).resample(parent, 1, np.random.default_rng(3))[0]
    # the same draw, with that very task held out: it must be rejected (same signature and calls)
    r = Resampler(suite, decontaminate=[plain])
    got = r.resample(parent, 1, np.random.default_rng(3))
    assert r.stats["rejected_contaminated_binding"] >= 1 and r.stats["rejected_contaminated"] >= 1
    assert got and content_key(got[0]) != content_key(plain)
    # a held-out task with other calls but a copied instruction: rejected on n-gram overlap
    other_calls = tuple(replace(c, args={k: "other" for k in c.args}) for c in plain.calls)
    copy = replace(plain, id="held-copy", calls=other_calls)
    r2 = Resampler(suite, decontaminate=[copy], config=ResamplerConfig(tiers=(0,)))
    assert Decontaminator([copy]).check(plain) == "ngram"
    r2.resample(parent, 1, np.random.default_rng(3))
    assert r2.stats["rejected_contaminated_ngram"] >= 1
    # tool-level decontamination: no variant reuses a held-out tool binding
    r3 = Resampler(suite, decontaminate=[plain], config=ResamplerConfig(decontaminate_on="tools"))
    for v in r3.resample(parent, 4, np.random.default_rng(4)):
        assert binding_key(v, values=False) != binding_key(plain, values=False)


def test_fallback_tiers_when_exact_is_impossible(suite: Suite, seeds: list[TaskSpec]) -> None:
    # remove every tool with the skill of the parent's first call: no exact embedding exists
    parent = next(t for t in seeds if len(t.calls) >= 2)
    skill = suite.skills[parent.calls[0].tool]
    allowed = tuple(t for t in suite.tools if suite.skills[t] != skill)
    r = Resampler(suite, config=ResamplerConfig(tools=allowed))
    got = r.resample(parent, 3, np.random.default_rng(0))
    assert got and all(v.meta["tier"] in (1, 2) for v in got)
    assert r.stats["infeasible_tier0"] >= 1 and r.stats["produced_tier0"] == 0
    for v in got:
        assert not any(suite.skills[c.tool] == skill for c in v.calls)
        sv, sp = compute_signature(v, suite), compute_signature(parent, suite)
        assert (sv.depth, sv.n_calls, sv.n_turns) == (sp.depth, sp.n_calls, sp.n_turns)
    # exact only: nothing, quickly (the plan is remembered as infeasible)
    exact_only = Resampler(suite, config=ResamplerConfig(tools=allowed, tiers=(0,)))
    assert exact_only.resample(parent, 3, np.random.default_rng(0)) == []
    assert exact_only.resample(parent, 3, np.random.default_rng(1)) == []
    assert exact_only.stats["infeasible_tier0"] >= 1


def test_tiny_budgets_still_terminate(suite: Suite, seeds: list[TaskSpec]) -> None:
    r = Resampler(suite, config=ResamplerConfig(search_budget=1, attempts=1, world_tries=1, size_samples=1,
                                                link_combinations=1))
    rng = np.random.default_rng(0)
    for t in seeds[:20]:
        assert len(r.resample(t, 2, rng)) <= 2
    assert r.resample(seeds[0], 0, rng) == []
    with pytest.raises(ValueError, match="n must be >= 0"):
        r.resample(seeds[0], -1, rng)


def test_config_errors_name_the_problem(suite: Suite) -> None:
    with pytest.raises(ValueError, match="tiers"):
        ResamplerConfig(tiers=(3,))
    with pytest.raises(ValueError, match="attempts"):
        ResamplerConfig(attempts=0)
    with pytest.raises(ValueError, match="unknown tools"):
        Resampler(suite, config=ResamplerConfig(tools=("no_such_tool",)))
    with pytest.raises(ValueError, match="decontaminate_on"):
        ResamplerConfig(decontaminate_on="values")


def test_redraw_keeps_the_task_but_changes_its_world(suite: Suite, seeds: list[TaskSpec]) -> None:
    r = Resampler(suite)
    rng = np.random.default_rng(0)
    redrawn = [(t, r.redraw(t, rng)) for t in seeds[:40]]
    done = [(t, n) for t, n in redrawn if n is not None]
    assert len(done) >= 30
    for t, n in done:
        assert n.id == t.id and [c.tool for c in n.calls] == [c.tool for c in t.calls] and n.deps == t.deps
        assert n.world_seed != t.world_seed and n.distractors == t.distractors
        assert compute_signature(n, suite).same(compute_signature(t, suite))
        assert oracle_solves(n, suite)


def test_module_level_resample(suite: Suite, seeds: list[TaskSpec]) -> None:
    got = resample(seeds[0], 2, np.random.default_rng(0))
    assert 1 <= len(got) <= 2 and all(v.meta["parent"] == seeds[0].id for v in got)
    banned = set(held_out_tools())
    assert not any(c.tool in banned for v in got for c in v.calls)


# -- the naive ablation ----------------------------------------------------------------------------
def test_naive_variants_spread_over_many_signatures(suite: Suite, seeds: list[TaskSpec]) -> None:
    parent = next(t for t in seeds if len(t.calls) == 3)
    r = NaiveResampler(suite)
    got = r.resample(parent, 30, np.random.default_rng(0))
    assert len(got) == 30
    sigs = [compute_signature(v, suite) for v in got]
    parent_sig = compute_signature(parent, suite)
    assert sum(s.same(parent_sig) for s in sigs) <= 3
    assert len(set(signature_classes(sigs))) >= 15
    assert all(abs(len(v.calls) - len(parent.calls)) <= 1 for v in got)
    assert all(v.meta["resampler"] == "naive" and v.meta["tier"] is None and oracle_solves(v, suite) for v in got)
