"""Paired comparison of two step-wise evaluations on the same states and sampling seeds.

    c = compare_results(before, after, labels=("before", "after"))   # refuses other states/seeds
    c.metrics["mean_reward"].diff, .ci_low, .ci_high, .up, .down, .tied   # eval.paired.PairedDifference
    null = null_control(result)        # one evaluation's seeds split in halves: its CI should cover 0
    columns, rows = comparison_rows(c)

Every metric of mleforge.eval.stepwise.METRICS is compared as B - A with the state as the unit
(eval.paired: a state's seeds averaged first, then a t-interval over states), over the states
with headroom (a state's headroom is a property of the state, so both sides agree on it); the
states without headroom are counted apart. Two results pair only if they hold the same states
at the same seeds; `other_seeds=True` pairs the same states at other seeds (a null control
of a policy against itself; a comparison of two policies wants the same seeds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mleforge.errors import ConfigError
from mleforge.eval.paired import PairedDifference, paired_difference
from mleforge.eval.stepwise import METRICS, StepwiseRecord, StepwiseResult, state_values

COMPARISON_FILE = "comparison.json"
COLUMNS = ("metric", "A", "B", "B − A (paired)", "95% CI", "up / down / tied", "states")
SETTINGS = ("temperature", "top_p", "max_new_tokens")


@dataclass(frozen=True)
class StepwiseComparison:
    """B - A of each metric (PairedDifference) over the states with headroom."""

    label_a: str
    label_b: str
    policy_a: str
    policy_b: str
    states: tuple[str, ...]  # the states compared (with headroom)
    seeds_a: tuple[int, ...]
    seeds_b: tuple[int, ...]
    metrics: dict[str, PairedDifference]
    no_headroom: int = 0  # states of both left out: their reference is the top already
    kind: str = "paired"  # paired (same seeds), other_seeds, or null_halves
    notes: tuple[str, ...] = field(default_factory=tuple)  # settings the two sides differ in

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label_a": self.label_a, "label_b": self.label_b, "policy_a": self.policy_a,
                "policy_b": self.policy_b, "states": list(self.states), "n_states": len(self.states),
                "seeds_a": list(self.seeds_a), "seeds_b": list(self.seeds_b), "no_headroom": self.no_headroom,
                "unit": "state (its seeds averaged first; a t-interval over states)",
                "metrics": {k: v.to_dict() for k, v in self.metrics.items()}, "notes": list(self.notes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> StepwiseComparison:
        return cls(data["label_a"], data["label_b"], data["policy_a"], data["policy_b"], tuple(data["states"]),
                   tuple(data["seeds_a"]), tuple(data["seeds_b"]),
                   {k: PairedDifference.from_dict(v) for k, v in data["metrics"].items()},
                   data.get("no_headroom", 0), data.get("kind", "paired"), tuple(data.get("notes") or ()))


def _pairs(result: StepwiseResult) -> dict[str, list[int | None]]:
    out: dict[str, list[int | None]] = {}
    for record in result.records:
        out.setdefault(record.state_id, []).append(record.seed)
    return {k: sorted(v, key=lambda s: -1 if s is None else s) for k, v in out.items()}


def _check_pairing(a: StepwiseResult, b: StepwiseResult, labels: tuple[str, str], other_seeds: bool) -> None:
    pa, pb = _pairs(a), _pairs(b)
    if set(pa) != set(pb):
        only_a, only_b = sorted(set(pa) - set(pb)), sorted(set(pb) - set(pa))
        raise ConfigError(
            f"{labels[0]} and {labels[1]} were not evaluated on the same states ({len(pa)} and {len(pb)} states; "
            f"{len(only_a)} only in {labels[0]}, e.g. {only_a[:2]}; {len(only_b)} only in {labels[1]}, e.g. "
            f"{only_b[:2]}); evaluate both with the same --tasks, --states, --state-seed and --journals")
    if other_seeds:
        return
    differ = sorted(s for s in pa if pa[s] != pb[s])
    if differ:
        raise ConfigError(
            f"{labels[0]} and {labels[1]} sampled {len(differ)} states at other seeds (e.g. {differ[0][:12]}: "
            f"{pa[differ[0]]} against {pb[differ[0]]}); a paired comparison needs the same (state, seed) pairs: "
            "evaluate both with the same --samples and --sample-seed (or pass --other-seeds for a null control "
            "of one policy against itself)")


def _notes(a: StepwiseResult, b: StepwiseResult) -> tuple[str, ...]:
    notes = [f"{key}: {a.sampling.get(key)} against {b.sampling.get(key)}" for key in SETTINGS
             if a.sampling.get(key) != b.sampling.get(key)]
    if a.prompt_profile != b.prompt_profile:
        notes.append(f"prompt profile: {a.prompt_profile} against {b.prompt_profile}")
    return tuple(notes)


def _differences(ra: Sequence[StepwiseRecord], rb: Sequence[StepwiseRecord]) -> dict[str, PairedDifference]:
    out = {}
    for key, _, _ in METRICS:
        va, vb = state_values(ra, key), state_values(rb, key)
        common = set(va) & set(vb)
        out[key] = paired_difference({s: va[s] for s in common}, {s: vb[s] for s in common}, metric=key)
    return out


def compare_results(a: StepwiseResult, b: StepwiseResult, *, labels: tuple[str, str] = ("A", "B"),
                    other_seeds: bool = False) -> StepwiseComparison:
    """B - A of every metric, paired by state (see the module docstring); refused with a
    ConfigError when the two do not hold the same states at the same seeds."""
    _check_pairing(a, b, labels, other_seeds)
    # The states with headroom on both sides: the sides agree unless one was written before
    # headroom was recorded (unknown there, known on the other side).
    both = {r.state_id for r in a.headline_records} & {r.state_id for r in b.headline_records}
    ra = [r for r in a.headline_records if r.state_id in both]
    rb = [r for r in b.headline_records if r.state_id in both]
    states = tuple(s for s in a.states if s in both)
    kind = "other_seeds" if other_seeds and tuple(a.seeds) != tuple(b.seeds) else "paired"
    return StepwiseComparison(labels[0], labels[1], a.policy, b.policy, states, tuple(a.seeds), tuple(b.seeds),
                              _differences(ra, rb), len(a.states) - len(states), kind, _notes(a, b))


def null_control(result: StepwiseResult, label: str = "") -> StepwiseComparison:
    """The evaluation against itself: its first half of the seeds (A) against the second (B), on
    the same states. Nothing differs but the sampling, so the interval should cover 0 (in about
    95% of such controls); needs k >= 2."""
    seeds = tuple(result.seeds)
    if len(seeds) < 2:
        raise ConfigError(f"a null control splits the sampling seeds in halves; {label or result.policy} has "
                          f"{len(seeds)} (evaluate with --samples 2 or more)")
    half = len(seeds) // 2
    first, second = set(seeds[:half]), set(seeds[half:])
    kept = result.headline_records
    ra = [r for r in kept if r.seed in first]
    rb = [r for r in kept if r.seed in second]
    name = f"{label} " if label else ""  # the policy is in policy_a and policy_b
    return StepwiseComparison(f"{name}seeds {sorted(first)}", f"{name}seeds {sorted(second)}", result.policy,
                              result.policy, tuple(dict.fromkeys(r.state_id for r in kept)), seeds[:half],
                              seeds[half:], _differences(ra, rb), result.no_headroom["n_states"], "null_halves")


def _signed(value: float, scale: float) -> str:
    digits = 1 if scale != 1.0 else 3
    return f"{value * scale:+.{digits}f}"


def _plain(value: float | None, scale: float) -> str:
    if value is None:
        return "–"
    return f"{value * scale:.1f}" if scale != 1.0 else f"{value:.3f}"


def difference_cells(d: PairedDifference, scale: float) -> tuple[str, str, str]:
    """'diff ± se', '[low, high]' and 'up / down / tied' of a PairedDifference, rates in percent."""
    if d.diff is None:
        return "–", "–", "–"
    change = _signed(d.diff, scale) + ("" if d.se is None else f" ± {_plain(d.se, scale)}")
    ci = "–" if d.ci_low is None else f"[{_signed(d.ci_low, scale)}, {_signed(d.ci_high, scale)}]"
    return change, ci, f"{d.up} / {d.down} / {d.tied}"


def comparison_rows(c: StepwiseComparison) -> tuple[tuple[str, ...], list[tuple[str, ...]]]:
    """COLUMNS (A and B headed by their labels) and a row per metric: A's and B's means, the
    paired difference ± its SE, the 95% CI, states up / down / tied, states paired."""
    rows = []
    for key, name, scale in METRICS:
        d = c.metrics[key]
        rows.append((name, _plain(d.mean_a, scale), _plain(d.mean_b, scale), *difference_cells(d, scale),
                     str(d.n)))
    columns = ("metric", c.label_a, c.label_b, f"{c.label_b} − {c.label_a} (paired)", *COLUMNS[4:])
    return columns, rows


def comparison_caption(c: StepwiseComparison) -> str:
    seeds = (f"seeds {list(c.seeds_a)}" if c.seeds_a == c.seeds_b
             else f"seeds {list(c.seeds_a)} against {list(c.seeds_b)}")
    caption = (f"{c.label_b} − {c.label_a} on the same {len(c.states)} states with headroom ({seeds}); the state is "
               "the unit: its seeds averaged first, then the mean difference over states ± its standard error "
               "and a 95% t-interval; up / down / tied count states")
    if c.no_headroom:
        caption += f"; {c.no_headroom} states without headroom left out"
    if c.notes:
        caption += "; the two differ in " + "; ".join(c.notes)
    return caption
