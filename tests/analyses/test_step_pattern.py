"""Findings name the steps a problem hit the way a person would."""

from __future__ import annotations

import pytest

from jaxdiag.analyses.step_pattern import describe_amounts, describe_steps, ordinal


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (1, "1st"),
        (2, "2nd"),
        (3, "3rd"),
        (4, "4th"),
        (11, "11th"),
        (12, "12th"),
        (13, "13th"),
        (21, "21st"),
        (102, "102nd"),
    ],
)
def test_ordinal(n: int, text: str) -> None:
    assert ordinal(n) == text


@pytest.mark.parametrize(
    ("steps", "text"),
    [
        ([6], "at step 6"),
        ([6, 9], "at steps 6 and 9"),
        ([4, 9, 14, 19], "at steps 4, 9, 14 and 19 (every 5th step)"),
        ([3, 4, 5, 6], "at steps 3-6"),
        ([2, 3, 7, 11], "at steps 2, 3, 7 and 11"),
        (list(range(2, 100, 3)), "at steps 2, 5, 8, 11, 14, ..., 98 (every 3rd step)"),
        ([1, 2, 4, 8, 16, 32, 64], "at 7 steps: 1, 2, 4, 8, 16, ..., 64"),
        ([-1], "outside the captured steps"),
        ([-1, 5], "at step 5 and outside the captured steps"),
    ],
)
def test_describe_steps(steps: list[int], text: str) -> None:
    assert describe_steps(steps) == text


def test_every_analysed_step_is_said_so() -> None:
    assert describe_steps(range(1, 14), all_steps=range(1, 14)) == "in every step (1-13)"
    assert describe_steps([s for s in range(1, 14) if s != 8], all_steps=range(1, 14)) == (
        "in every step (1-13) but step 8"
    )


def test_a_periodic_stall_is_named_with_its_amount_and_the_rest_summed_up() -> None:
    per_step = {s: 30.0 if s % 5 == 4 else 0.2 for s in range(20)}
    assert describe_amounts(per_step, list(range(20))) == (
        "30.0 ms each at steps 4, 9, 14 and 19 (every 5th step); 0.20 ms at most in the 16 others"
    )


def test_a_few_steps_hit_among_untouched_ones_are_named() -> None:
    assert describe_amounts({1: 2.0, 2: 2.2, 5: 1.8}, list(range(8))) == "2.0 ms each at steps 1, 2 and 5"
    # hit steps of unequal size give the range; one outlier among them does not hide the pattern
    per_step = {s: 0.4 for s in range(1, 14)} | {3: 15.4, 6: 45.0, 9: 15.5, 12: 15.6}
    assert describe_amounts(per_step, list(range(1, 14))) == (
        "15.4-45.0 ms at steps 3, 6, 9 and 12 (every 3rd step); 0.40 ms at most in the 9 others"
    )


def test_a_trace_of_the_cause_in_other_steps_does_not_join_the_hit_ones() -> None:
    # As in the CPU example on a loaded machine: 15 ms loads every third step, and 0.2 ms in two others.
    per_step = {2: 0.19, 3: 21.6, 6: 15.1, 9: 16.0, 12: 17.2, 13: 0.3}
    assert describe_amounts(per_step, list(range(1, 14))) == (
        "16.6 ms each at steps 3, 6, 9 and 12 (every 3rd step); 0.30 ms at most in the 9 others"
    )


def test_an_even_spread_gives_the_mean_and_where() -> None:
    assert describe_amounts({1: 2.0, 2: 1.0, 3: 1.5, 4: 0.9}, [1, 2, 3, 4]) == (
        "1.4 ms per step on average, in every step (1-4)"
    )
    assert describe_amounts({1: 2.0, 2: 1.0, 3: 1.5, 4: 0.9}, list(range(1, 7))) == (
        "1.4 ms per step on average, at steps 1-4 (4 of 6 steps)"
    )
    assert describe_amounts({}, [1, 2]) == "in no step"


def test_a_narrower_split_counts_when_it_stands_out_from_the_noise() -> None:
    # As on a real H100 capture: a 4 ms sleep every third step over 2-4 ms of input work.
    per_step = {0: 8.9, 1: 2.7, 2: 3.1, 3: 6.8, 4: 3.9, 5: 4.4, 6: 9.3, 7: 2.2, 8: 2.5, 9: 8.2, 10: 3.1, 11: 2.6}
    assert describe_amounts(per_step, list(range(12))).startswith("8.6 ms each at steps 0, 3, 6 and 9 (every 3rd step)")
    # Noise with no split that stands out gives the mean.
    noise = {s: 2.0 + 0.1 * ((s * 7) % 5) for s in range(12)}
    assert describe_amounts(noise, list(range(12))).startswith("2.2 ms per step on average")
