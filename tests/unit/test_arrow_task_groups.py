"""arrow_ingest.task_groups: the ingest's chunks dealt to a few Spark tasks with even bytes."""

from __future__ import annotations

import random

from controller_svc.analytics.arrow_ingest import Chunk, task_groups


def _chunks(sizes: list[int]) -> list[Chunk]:
    return [Chunk(file_id, f"/logs/{file_id}", 0, size) for file_id, size in enumerate(sizes)]


def test_every_chunk_goes_to_one_task_and_no_task_ends_a_chunk_after_another() -> None:
    rng = random.Random(13)
    for _ in range(300):
        sizes = [rng.choice([rng.randint(1, 10), rng.randint(1, 1 << 26)]) for _ in range(rng.randint(0, 60))]
        tasks = rng.randint(1, 12)
        chunks = _chunks(sizes)
        groups = task_groups(chunks, tasks)
        assert sorted(c.file_id for group in groups for c in group) == [c.file_id for c in chunks]
        assert len(groups) == min(tasks, len(chunks)) and all(groups)
        loads = [sum(c.end - c.start for c in group) for group in groups]
        assert loads == sorted(loads, reverse=True)  # the largest task first
        if chunks:
            # LPT: the busiest task holds at most one chunk more than the least busy one's bytes.
            assert loads[0] - loads[-1] <= max(sizes)
            for group in groups:
                assert [c.end for c in group] == sorted((c.end for c in group), reverse=True)


def test_33_files_of_equal_size_make_8_tasks_of_4_or_5() -> None:
    groups = task_groups(_chunks([1000] * 30 + [300] * 3), 8)
    assert sorted(len(group) for group in groups) == [4, 4, 4, 4, 4, 4, 4, 5]
    assert sum(c.end for c in groups[0]) == 4000  # the largest task: four of the large chunks


def test_no_chunks_no_tasks() -> None:
    assert task_groups([], 8) == []


def test_each_chunk_goes_to_the_task_with_the_fewest_bytes_so_far() -> None:
    # 5 and 4 open the two tasks; 3 joins the 4 (7), the next 3 the 5 (8), the last 3 the 7.
    groups = task_groups(_chunks([3, 5, 3, 4, 3]), 2)
    assert [[c.end for c in group] for group in groups] == [[4, 3, 3], [5, 3]]


def test_small_chunks_share_tasks_and_large_ones_keep_one_each_per_chunk_bytes() -> None:
    from controller_svc.analytics.arrow_ingest import TASK_BYTES, TASKS_PER_CORE, task_count

    small = _chunks([5 << 20] * 33)  # 1M events: 33 files of ~5 MB
    assert task_count(small, 2) == 2 * TASKS_PER_CORE
    large = _chunks([TASK_BYTES * 3 // 4] * 33)  # 10M events: 33 files of ~48 MB
    assert task_count(large, 2) == -(-33 * (TASK_BYTES * 3 // 4) // TASK_BYTES) == 25
    assert task_count(_chunks([10] * 3), 2) == 3
    assert task_count([], 2) == 0
