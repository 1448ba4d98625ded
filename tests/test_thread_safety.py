"""Worlds generated in several threads at once are the worlds one thread generates (a threaded host: OpenEnv's
worker threads, a thread-pooled rollout worker). The suite's value pools fill lazily from one Faker instance, each
pool seeded by the order pools are first made in; two first world generations interleaved used to make pools in
another order, so the same world seed gave other emails and addresses than in a single-threaded process."""

from __future__ import annotations

import threading

from rods_gym import Suite


def tables(suite: Suite, seed: int) -> dict:
    return {entity: dict(rows) for entity, rows in suite.world(seed).tables.items()}


def test_worlds_made_in_threads_equal_worlds_made_in_one() -> None:
    seeds = list(range(24))
    reference = Suite.load()
    expected = {s: tables(reference, s) for s in seeds}
    for attempt in range(3):  # a fresh suite each time: the race is on the first generations
        suite = Suite.load()
        got: dict[int, dict] = {}
        barrier = threading.Barrier(8)

        def work(part: list[int]) -> None:
            barrier.wait()
            for s in part:
                got[s] = tables(suite, s)

        threads = [threading.Thread(target=work, args=(seeds[i::8],)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wrong = [s for s in seeds if got[s] != expected[s]]
        assert not wrong, f"attempt {attempt}: worlds {wrong} differ from the single-threaded ones"
