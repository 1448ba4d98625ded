"""``rods skills``: the skill taxonomy and how many tools each domain has per skill.

A tool's skill is its kind (lookup, search, read, create, update, delete, transact,
aggregate) crossed with the role of the entity it acts on (person, account, item, record,
event, message, document, group): ``read:person``, ``transact:account``... It is derived
from the domain files, never listed by hand, and it is the node label of a task's
signature, so it is what the skill-aligned resampler preserves.
"""

from __future__ import annotations

import argparse
import json

from ..domain import KINDS
from ..suite import Suite


def skill_table(suite: Suite) -> dict[str, dict[str, list[str]]]:
    """``{skill: {domain: [tool, ...]}}`` for every skill some tool of ``suite`` has, sorted
    by kind (in :data:`rods_gym.domain.KINDS` order), then entity role."""
    table: dict[str, dict[str, list[str]]] = {}
    for name in suite.tool_names:
        table.setdefault(suite.skills[name], {}).setdefault(suite.tools[name].domain, []).append(name)

    def order(skill: str) -> tuple[int, str]:
        kind, role = skill.split(":", 1)
        return KINDS.index(kind), role

    return {s: dict(sorted(table[s].items())) for s in sorted(table, key=order)}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("skills", help="print the skill taxonomy (tool kind x entity role) with tool counts per domain")
    p.add_argument("--domains", default=None, help="domain directory (default: the built-in domains)")
    p.add_argument("--tools", action="store_true", help="list the tools of each skill")
    p.add_argument("--json", action="store_true", help="print {skill: {domain: [tools]}} as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    suite = Suite.load(args.domains)
    table = skill_table(suite)
    if args.json:
        print(json.dumps(table, indent=2))
        return 0
    domains = [d.name for d in suite.domains]
    width = max(len(s) for s in table) + 2
    cols = [max(len(d), 3) for d in domains]
    print(f"{len(table)} skills (tool kind x entity role) over {len(suite.tools)} tools in {len(domains)} domains\n")
    print("skill".ljust(width) + "  ".join(d.rjust(c) for d, c in zip(domains, cols)) + "  total")
    for skill, per_domain in table.items():
        counts = [len(per_domain.get(d, ())) for d in domains]
        cells = "  ".join((str(n) if n else ".").rjust(c) for n, c in zip(counts, cols))
        print(skill.ljust(width) + cells + f"  {sum(counts):5d}")
        if args.tools:
            for d, tools in per_domain.items():
                print(" " * 4 + f"{d}: {', '.join(tools)}")
    totals = [sum(len(v.get(d, ())) for v in table.values()) for d in domains]
    print("total".ljust(width) + "  ".join(str(n).rjust(c) for n, c in zip(totals, cols)) + f"  {sum(totals):5d}")
    roles = sorted({e.role for e in suite.entities.values()})
    print(f"\nkinds: {', '.join(k for k in KINDS if any(s.startswith(k + ':') for s in table))}")
    print(f"entity roles: {', '.join(roles)}")
    return 0
