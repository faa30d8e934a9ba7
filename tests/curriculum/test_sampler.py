"""Samplers: the distribution they draw from, the GRPO group layout, and the same batch on every rank."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import LearnabilityConfig, SamplerConfig
from mleforge.curriculum.errors import CurriculumError
from mleforge.curriculum.records import SETUP_STEP, Offer
from mleforge.curriculum.sampler import (
    LearnabilitySampler,
    UniformSampler,
    make_sampler,
    mixed_softmax,
    next_batch,
)
from tests.curriculum.helpers import idea_state, rec

WORKERS = Path(__file__).with_name("workers.py")
FLAT = LearnabilityConfig(exploration_c=0.0)


@pytest.fixture
def buffer(tmp_path):
    """Five seeds with known statistics, sealed through step 0."""
    buf = StateBuffer(tmp_path, learnability=FLAT)
    states = [idea_state("alpha", i) for i in range(5)]
    buf.offer(states, seed=True)
    buf.seal(SETUP_STEP)
    outcomes = [(0, 0), (1, 2), (10, 10), (0, 10), (3, 4)]  # (successes, rollouts) per state
    records = []
    for state, (s, n) in zip(states, outcomes):
        records += [rec(state, 1.0, success=True)] * s + [rec(state, 0.0, success=False)] * (n - s)
    buf.apply_feedback(0, records, [])
    return buf


def expected_lp(snapshot):
    # exploration off, no references (H = 1): LP = L = p (1 - p), p = (s + 1) / (n + 2)
    return np.array([(s.successes + 1) / (s.rollouts + 2) * (1 - (s.successes + 1) / (s.rollouts + 2))
                     for s in snapshot.states])


def test_learnability_frequencies_match_the_mixed_softmax(buffer):
    snapshot = buffer.snapshot(0)
    sampler = LearnabilitySampler(SamplerConfig(tau=0.05, epsilon=0.2, group_size=1), FLAT)
    expected = mixed_softmax(expected_lp(snapshot), 0.05, 0.2)
    assert sampler.probabilities(snapshot) == pytest.approx(expected)
    # the untried state and the 1-of-2 state (L = 0.25) lead; 10/10 and 0/10 (L = 0.076) trail
    assert expected.max() / expected.min() > 5
    draws = 6000
    counts = Counter(sampler.sample(snapshot, step, 1).groups[0] for step in range(draws))
    freq = np.array([counts[sid] / draws for sid in snapshot.state_ids])
    sd = np.sqrt(expected * (1 - expected) / draws)
    assert np.all(np.abs(freq - expected) < 4 * sd), (freq, expected)


def test_uniform_baseline(buffer):
    snapshot = buffer.snapshot(0)
    sampler = UniformSampler(SamplerConfig(kind="uniform", group_size=1))
    assert sampler.probabilities(snapshot) == pytest.approx([0.2] * 5)
    counts = Counter(sampler.sample(snapshot, step, 1).groups[0] for step in range(3000))
    assert all(abs(c / 3000 - 0.2) < 0.03 for c in counts.values()) and len(counts) == 5
    assert isinstance(make_sampler(SamplerConfig(kind="uniform")), UniformSampler)


def test_group_layout_and_replacement(buffer):
    snapshot = buffer.snapshot(0)
    batch = LearnabilitySampler(SamplerConfig(group_size=4), FLAT).sample(snapshot, 3, n_groups=3)
    ids = batch.state_ids
    assert len(ids) == 12 and len(set(batch.groups)) == 3  # distinct groups while there are enough states
    assert all(ids[g * 4:(g + 1) * 4] == (batch.groups[g],) * 4 for g in range(3))
    big = LearnabilitySampler(SamplerConfig(group_size=2), FLAT).sample(snapshot, 3, n_groups=8)
    assert len(big.groups) == 8 and len(set(big.groups)) <= 5  # more groups than states: with replacement


def test_same_seed_and_step_same_batch(buffer):
    snapshot = buffer.snapshot(0)
    a = LearnabilitySampler(SamplerConfig(seed=5), FLAT)
    b = LearnabilitySampler(SamplerConfig(seed=5), FLAT)
    assert a.sample(snapshot, 1, 3) == b.sample(snapshot, 1, 3)
    assert len({a.sample(snapshot, step, 3).groups for step in range(10)}) > 1  # the step reseeds
    with pytest.raises(CurriculumError, match="start at 0"):
        a.sample(snapshot, -1, 1)


def sample_in_process(path, step, n_groups=2):
    out = subprocess.run([sys.executable, str(WORKERS), "sample", str(path), str(step), str(n_groups)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_ranks_in_separate_processes_draw_the_same_batch_even_when_late(buffer):
    # rank 0 samples step 1 before step 1's feedback commits; rank 1 after it.
    early = sample_in_process(buffer.path, 1)
    (first,) = buffer.snapshot(0).states[:1]
    buffer.apply_feedback(1, [rec(first.state_id, 1.0)] * 6, [Offer(idea_state("alpha", 99))])
    late = sample_in_process(buffer.path, 1)
    assert early == late
    assert len(early["ids"]) == 6 and early["ids"][:3] == [early["groups"][0]] * 3
    sampler = make_sampler(SamplerConfig(group_size=3, seed=11), buffer.learnability)
    batch, states = next_batch(buffer, sampler, 1, 2)  # this process too
    assert list(batch.groups) == early["groups"] and [s.state_id for s in states] == early["ids"]
    assert sample_in_process(buffer.path, 2) != early  # the next step reads the new snapshot


def test_empty_buffer_is_an_error(tmp_path):
    buf = StateBuffer(tmp_path)
    buf.seal(SETUP_STEP)
    with pytest.raises(CurriculumError, match="seed it first"):
        next_batch(buf, UniformSampler(), 0, 1)
