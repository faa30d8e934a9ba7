"""Samplers: the distribution they draw from, the GRPO group layout, and the same batch on every rank."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from scipy.special import betaln

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
from mleforge.errors import ConfigError
from tests.curriculum.helpers import idea_state, rec

WORKERS = Path(__file__).with_name("workers.py")
# No exploration term, headroom off (the default): LP = L; GRPO groups of 3.
FLAT = LearnabilityConfig(exploration_c=0.0, group_size=3)
G = FLAT.group_size


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
    # LP = L = 1 - E[p^3] - E[(1-p)^3], p ~ Beta(k + 2q, n - k + 2(1 - q)), all five one pool:
    # q = (14 + 1) / (26 + 2) = 15/28; E[p^G] = B(a + G, b) / B(a, b), independently of the product
    q = 15 / 28
    out = []
    for s in snapshot.states:
        a, b = s.successes + 2 * q, s.rollouts - s.successes + 2 * (1 - q)
        out.append(1 - np.exp(betaln(a + G, b) - betaln(a, b)) - np.exp(betaln(a, b + G) - betaln(a, b)))
    return np.array(out)


def test_learnability_frequencies_match_the_mixed_softmax(buffer):
    snapshot = buffer.snapshot(0)
    sampler = LearnabilitySampler(SamplerConfig(tau=0.05, epsilon=0.2, group_size=G), FLAT)
    lp = expected_lp(snapshot)
    expected = mixed_softmax(lp, 0.05, 0.2)
    assert sampler.probabilities(snapshot) == pytest.approx(expected)
    by_counts = dict(zip([(s.successes, s.rollouts) for s in snapshot.states], lp))
    # 1 of 2 leads (0.599), then 3 of 4 (0.561), untried (0.497); 0 of 10 (0.225), 10 of 10 (0.198) trail
    assert by_counts[(1, 2)] > by_counts[(3, 4)] > by_counts[(0, 0)] > by_counts[(0, 10)] > by_counts[(10, 10)]
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
    batch = LearnabilitySampler(SamplerConfig(group_size=G), FLAT).sample(snapshot, 3, n_groups=3)
    ids = batch.state_ids
    assert len(ids) == 9 and len(set(batch.groups)) == 3  # distinct groups while there are enough states
    assert all(ids[g * 3:(g + 1) * 3] == (batch.groups[g],) * 3 for g in range(3))
    big = LearnabilitySampler(SamplerConfig(group_size=G), FLAT).sample(snapshot, 3, n_groups=8)
    assert len(big.groups) == 8 and len(set(big.groups)) <= 5  # more groups than states: with replacement
    assert len(big.state_ids) == 24


def test_lp_group_size_must_be_the_samplers(buffer):
    # L is the chance that a group of G is not all tied: G must be the group the sampler lays out
    with pytest.raises(ConfigError, match="learnability.group_size is 3 but sampler.group_size is 4"):
        LearnabilitySampler(SamplerConfig(group_size=4), FLAT)
    with pytest.raises(ConfigError, match="num_generations"):
        make_sampler(SamplerConfig(group_size=4), buffer.learnability)
    # without a LearnabilityConfig the sampler's own group size is used; laplace has no G
    assert LearnabilitySampler(SamplerConfig(group_size=4)).learnability.group_size == 4
    LearnabilitySampler(SamplerConfig(group_size=4), LearnabilityConfig(variant="laplace", group_size=3))
    with pytest.raises(ConfigError, match="group of one"):
        LearnabilitySampler(SamplerConfig(group_size=1))
    assert isinstance(make_sampler(SamplerConfig(kind="uniform", group_size=1), FLAT), UniformSampler)


def test_same_seed_and_step_same_batch(buffer):
    snapshot = buffer.snapshot(0)
    a = LearnabilitySampler(SamplerConfig(seed=5, group_size=G), FLAT)
    b = LearnabilitySampler(SamplerConfig(seed=5, group_size=G), FLAT)
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
