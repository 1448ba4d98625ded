"""An independent check of tier-0 BFCL variants against the two rules of :mod:`rods_gym.bfcl.resample`.

    python -m rods_gym.bfcl.audit variants.jsonl [--examples 5]

For each variant (a JSON line of ``rods synth --bfcl``) against its parent: does its ground truth pass it
(replay), does the parent's ground truth also pass it (the issue the parent-fails rule closes), does some swapped
value not matter (putting it back still passes: the rule's per-value form), and is every swapped value of the kind
its parameter takes (the typed rule, :mod:`rods_gym.bfcl.valuekinds`)? It prints the counts, as JSON, and a few
examples of each failure. Reading files written before the rules existed is what it is for: it needs only the
variants' parents, ground truths and questions.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any, Sequence

from .data import BFCLTask, tasks_by_id
from .resample import changes, parent_fails, read_variants
from .scoring import check_transcript
from .split import split_tasks
from .valuekinds import ConfigPools, config_pools, conforms, slots


@dataclasses.dataclass(frozen=True)
class VariantAudit:
    """One variant's verdicts; ``untyped``: ``function.param: old -> new`` for each swap of the wrong kind (or of a
    parameter no kind allows swapping)."""

    id: str
    replays: bool
    parent_passes: bool
    value_ignored: bool
    untyped: tuple[str, ...]


def parent_of(variant: BFCLTask) -> BFCLTask:
    return tasks_by_id()[variant.id.split(".v", 1)[0]]


def untyped_swaps(parent: BFCLTask, variant: BFCLTask, pools: ConfigPools) -> tuple[str, ...]:
    """The swaps of ``variant`` whose new value is not of its parameter's kind where the call runs."""
    mapping = changes(parent, variant)
    typed = slots(parent, list(mapping), pools)
    bad = []
    for old, new in mapping.items():
        slot = typed.get(old)
        if slot is None or not conforms(slot, new):
            where = f"{slot.function}.{slot.param}" if slot else _first_param(parent, old)
            bad.append(f"{where}: {old!r} -> {new!r}")
    return tuple(bad)


def _first_param(task: BFCLTask, value: Any) -> str:
    for turn in task.ground_truth:
        for call in turn:
            for param, v in call.args.items():
                if v == value:
                    return f"{call.name}.{param}"
    return "?"


def audit_variant(variant: BFCLTask, pools: ConfigPools) -> VariantAudit:
    parent = parent_of(variant)
    mapping = changes(parent, variant)
    return VariantAudit(
        id=variant.id,
        replays=check_transcript(variant, variant.ground_truth).success,
        parent_passes=check_transcript(variant, parent.ground_truth).success,
        value_ignored=not parent_fails(parent, variant, mapping),
        untyped=untyped_swaps(parent, variant, pools),
    )


def summarize(audits: Sequence[VariantAudit]) -> dict[str, Any]:
    parents = {a.id.split(".v", 1)[0] for a in audits}
    kept = [a for a in audits if a.replays and not a.value_ignored and not a.untyped]
    return {
        "variants": len(audits), "parents": len(parents),
        "replay_fails": sum(not a.replays for a in audits),
        "parent_passes": sum(a.parent_passes for a in audits),
        "some_value_ignored": sum(a.value_ignored for a in audits),
        "untyped": sum(bool(a.untyped) for a in audits),
        "untyped_only": sum(bool(a.untyped) and not a.value_ignored for a in audits),
        "both_rules_pass": len(kept), "parents_both_rules_pass": len({a.id.split(".v", 1)[0] for a in kept}),
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m rods_gym.bfcl.audit", description=__doc__.split("\n")[0])
    ap.add_argument("variants", type=Path, help="a JSON-lines file of rods synth --bfcl")
    ap.add_argument("--examples", type=int, default=5, help="examples of each failure to print")
    args = ap.parse_args(argv)
    if not args.variants.is_file():
        print(f"audit: error: {args.variants} is not a file", file=sys.stderr)
        return 2
    pools = config_pools(frozenset(t.id for t in split_tasks("test")))
    audits = [audit_variant(v, pools) for v in read_variants(args.variants)]
    print(json.dumps(summarize(audits)))
    for label, hit in (("parent passes", lambda a: a.parent_passes), ("some value ignored", lambda a: a.value_ignored),
                       ("untyped", lambda a: bool(a.untyped))):
        for a in [a for a in audits if hit(a)][: args.examples]:
            print(f"{label}: {a.id} {'; '.join(a.untyped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
