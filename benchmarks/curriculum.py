"""Uniform against Learnability-Potential sampling, on a SIMULATED learner.

This is a simulation, not training: no model, no executions. It runs the real
curriculum code (StateBuffer in SQLite, the samplers, `step_feedback` turning
rollouts into new states) and replaces the policy and the sandbox by a toy
learner, so the two samplers can be compared with the same seeds and the same
rollout budget in a minute on a laptop. The real comparison, on a model,
comes with training and reuses this output format.

The simulated learner
---------------------
* Tasks: `--tasks` tasks, one empty-journal draft seed each. Every state s has
  a latent logit z_s; a rollout from s succeeds with probability
  q_s = sigmoid(z_s). Seed logits are drawn from N(-0.5, 2^2): some tasks are
  nearly hopeless, some trivial, a few at the frontier.
* Rewards are binary: a success is a valid run (improve: a run that beat the
  state's best) with reward 1, a failure an execution error with reward 0.
  A group whose G rewards all tie has zero GRPO advantage.
* Learning: a group with reward standard deviation sigma > 0 is trained on:
  z_s += 2 sigma * lr_state, every other state of the same task gets
  2 sigma * lr_task, every state of every task 2 sigma * lr_all (transfer).
  A group whose rewards all tie teaches nothing and changes nothing. So each
  state's success probability rises when it is trained on with non-zero
  advantage, and only then.
* New states: every rollout is a node; a failure yields a debug state, a
  success an improve state (State.after, as in training). A child's logit is
  its parent's plus N(-0.5, 1) (debug) or N(-1, 1) (improve: beating a best
  is harder than being valid). A rollout writes one of `--variants` scripts,
  so repeated scripts give the same state and the buffer deduplicates them.
  A valid run's score is its parent's best plus U(0, 0.1), capped at 1; the
  task's baseline is 0 and its top 1, so long improve chains lose headroom.
* Budget: `--steps` steps of `--groups` groups of `--group-size` rollouts,
  identical for both samplers; each (seed, sampler) pair starts from the same
  seed logits, and outcomes are drawn from a generator seeded by (seed, step).
  The buffer is bounded (`--max-per-task` 48, `--max-states` 256), so
  eviction by priority shapes what either sampler can pick from.
* Ablation `--static-pool N`: N fixed draft states per task (logits drawn as
  above), no new states; it isolates the sampler from the evolving buffer.
  `--lp-variant`, `--prior-strength`, `--exploration-c`, `--gamma`, `--tau`,
  `--epsilon` override the curriculum's constants (default: the library's
  defaults; the LP's G is `--group-size`), `--debug-offset` and
  `--improve-offset` the simulated children's difficulty. The buffer evicts by
  the same LP under both samplers, so uniform's figures depend on the variant.

Figures, per sampler (mean over seeds; `per_seed` keeps each run):
  frac_zero_std_groups  fraction of groups whose rewards all tie (wasted compute)
  reward_per_rollout    mean reward per rollout in each window of steps (over time)
  buffer_states         live states after each step (buffer growth)
  seed_success_final    mean q over the seed states at the end (what was learned)
and `paired_difference`: learnability minus uniform, seed by seed.

    python benchmarks/curriculum.py --out /tmp/curriculum.json                 # the LP DESIGN.md defines
    python benchmarks/curriculum.py --lp-variant laplace --gamma 1 --out /tmp/curriculum-laplace.json
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from pathlib import Path

import numpy as np

from _record import invocation, table, write_result
from mleforge.agent.execution import ExecutionSummary
from mleforge.agent.state import State
from mleforge.curriculum.buffer import StateBuffer
from mleforge.curriculum.config import LP_VARIANTS, BufferConfig, LearnabilityConfig, SamplerConfig
from mleforge.curriculum.feedback import step_feedback
from mleforge.curriculum.records import RolloutRecord, TaskReference
from mleforge.curriculum.sampler import make_sampler, next_batch
from mleforge.reward.compute import RewardBreakdown

OK = ExecutionSummary(0, False, None, 1.0, "valid submission\n", "", True)
CRASH = ExecutionSummary(1, False, None, 1.0, "", "Traceback: simulated failure\n", False)
SUCCESS = RewardBreakdown(case="valid", total=1.0)
FAILURE = RewardBreakdown(case="execution_error", total=0.0)
SAMPLERS = ("uniform", "learnability")


def sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


class Learner:
    """The toy policy: a latent logit per state, raised by training with non-zero advantage."""

    def __init__(self, args: argparse.Namespace):
        self.args = args
        self.z: dict[str, float] = {}
        self.task_of: dict[str, str] = {}
        self.best: dict[str, float] = {}  # a state's best score (0 = the baseline)

    def add(self, state_id: str, task: str, z: float, best: float) -> None:
        if state_id not in self.z:  # a deduplicated state keeps what it had
            self.z[state_id], self.task_of[state_id], self.best[state_id] = z, task, best

    def train(self, state_id: str, rewards: list[float]) -> None:
        sigma = float(np.std(rewards))
        if sigma == 0.0:
            return
        a, task = self.args, self.task_of[state_id]
        for sid in self.z:
            if sid == state_id:
                self.z[sid] += 2 * sigma * a.lr_state
            elif self.task_of[sid] == task:
                self.z[sid] += 2 * sigma * a.lr_task
            else:
                self.z[sid] += 2 * sigma * a.lr_all


def run_one(kind: str, seed: int, args: argparse.Namespace, workdir: Path) -> dict:
    buffer = StateBuffer(
        workdir / f"{kind}-{seed}",
        BufferConfig(max_states_per_task=args.max_per_task, max_states=args.max_states, synchronous="NORMAL"),
        LearnabilityConfig(exploration_c=args.exploration_c, headroom_gamma=args.gamma, variant=args.lp_variant,
                           prior_strength=args.prior_strength, group_size=args.group_size),
    )
    learner = Learner(args)
    init = np.random.default_rng(seed)
    references, seeds = [], []
    for t in range(args.tasks):
        task = f"task{t}"
        references.append(TaskReference(task, "higher", top=1.0, baseline=0.0))
        for i in range(max(1, args.static_pool)):  # the empty-journal draft, then drafts with ideas
            ideas = (f"idea {i}",) if i else ()
            seeds.append(State.draft(task, ideas, direction="higher"))
            learner.add(seeds[-1].state_id, task, float(init.normal(-0.5, 2.0)), 0.0)
    buffer.set_up(references, seeds)
    seed_ids = [s.state_id for s in seeds]
    sampler = make_sampler(
        SamplerConfig(kind=kind, group_size=args.group_size, tau=args.tau, epsilon=args.epsilon, seed=seed),
        buffer.learnability,
    )

    tied, groups, step_rewards, live = 0, 0, [], []
    for step in range(args.steps):
        batch, states = next_batch(buffer, sampler, step, args.groups)
        rng = np.random.default_rng([seed, step, 1])
        completions, executions, rewards, children = [], [], [], []
        for state in states:
            sid = state.state_id
            success = bool(rng.random() < sigmoid(learner.z[sid]))
            variant = int(rng.integers(args.variants))
            code = f"# depth {len(state.journal)} variant {variant}\nprint({variant})"
            completions.append(f"attempt {variant}\n```python\n{code}\n```")
            executions.append(OK if success else CRASH)
            score = min(1.0, learner.best[sid] + float(rng.uniform(0, 0.1))) if success else None
            rewards.append(RewardBreakdown(case="valid", total=1.0, score=score) if success else FAILURE)
            offset = (args.improve_offset, 1.0) if success else (args.debug_offset, 1.0)
            children.append((state, success, float(rng.normal(*offset)), score))
        for g in range(args.groups):
            group = [r.total for r in rewards[g * args.group_size:(g + 1) * args.group_size]]
            groups += 1
            tied += int(min(group) == max(group))
            learner.train(batch.groups[g], group)
        if args.static_pool:  # the ablation without an evolving buffer: statistics only
            buffer.apply_feedback(step, [
                RolloutRecord(st.state_id, r.total, r.case == "valid", r.case, r.score) for st, r in zip(states, rewards)
            ], [])
        else:
            # register the children's latents before the buffer sees them (dedup keeps the first)
            for (state, success, noise, score), completion, execution, reward in zip(
                children, completions, executions, rewards
            ):
                node_state = _child(state, completion, execution, reward, step)
                best = max(learner.best[state.state_id], score) if success else learner.best[state.state_id]
                learner.add(node_state.state_id, state.task_id, learner.z[state.state_id] + noise, best)
            step_feedback(buffer, step, states, completions, executions, rewards, clock=lambda: 0.0)
        step_rewards.append(float(np.mean([r.total for r in rewards])))
        live.append(buffer.counts()["live_states"])
    buffer.close()
    window = max(1, args.steps // args.windows)
    curve = [float(np.mean(step_rewards[i:i + window])) for i in range(0, args.steps, window)]
    return {
        "frac_zero_std_groups": tied / groups,
        "reward_per_rollout": curve,
        "reward_per_rollout_mean": float(np.mean(step_rewards)),
        "buffer_states": live,
        "seed_success_final": float(np.mean([sigmoid(learner.z[s]) for s in seed_ids])),
    }


def _child(state: State, completion: str, execution: ExecutionSummary, reward: RewardBreakdown, step: int) -> State:
    """The state this rollout leads to, built exactly as step_feedback builds it."""
    from mleforge.curriculum.feedback import rollout_node

    node = rollout_node(state, completion, execution, reward, node_id="sim", policy_step=step, created_at=0.0)
    return State.after(state.journal.add(node), node)


def aggregate(runs: list[dict]) -> dict:
    out = {
        "frac_zero_std_groups": float(np.mean([r["frac_zero_std_groups"] for r in runs])),
        "frac_zero_std_groups_sd": float(np.std([r["frac_zero_std_groups"] for r in runs])),
        "reward_per_rollout": [float(x) for x in np.mean([r["reward_per_rollout"] for r in runs], axis=0)],
        "reward_per_rollout_mean": float(np.mean([r["reward_per_rollout_mean"] for r in runs])),
        "buffer_states": [float(x) for x in np.mean([r["buffer_states"] for r in runs], axis=0)],
        "seed_success_final": float(np.mean([r["seed_success_final"] for r in runs])),
        "seed_success_final_sd": float(np.std([r["seed_success_final"] for r in runs])),
        "per_seed": runs,
    }
    return out


def print_report(result: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    a = result["config"]
    console = Console()
    table = Table(title=(
        f"SIMULATED learner: {a['seeds']} seeds x {a['steps']} steps x {a['groups']} groups x "
        f"G={a['group_size']} ({result['rollouts_per_run']} rollouts per run), {a['tasks']} tasks, "
        f"LP {a['lp_variant']} gamma {a['gamma']:g} (sampling and eviction), "
        + (f"static pool of {a['static_pool']} states per task" if a["static_pool"] else "evolving buffer")
    ))
    for column in ("sampler", "tied groups (frac)", "reward/rollout", "first window", "last window",
                   "seed success at end", "live states at end"):
        table.add_column(column)
    for kind in SAMPLERS:
        r = result[kind]
        table.add_row(
            kind, f"{r['frac_zero_std_groups']:.3f} ± {r['frac_zero_std_groups_sd']:.3f}",
            f"{r['reward_per_rollout_mean']:.3f}", f"{r['reward_per_rollout'][0]:.3f}",
            f"{r['reward_per_rollout'][-1]:.3f}",
            f"{r['seed_success_final']:.3f} ± {r['seed_success_final_sd']:.3f}", f"{r['buffer_states'][-1]:.0f}",
        )
    console.print(table)
    if "paired_difference" in result:
        d = result["paired_difference"]
        console.print("learnability - uniform, paired by seed (mean ± sd): " + ", ".join(
            f"{name} {d[key]['mean']:+.3f} ± {d[key]['sd']:.3f}" for name, key in (
                ("tied groups", "frac_zero_std_groups"), ("reward/rollout", "reward_per_rollout_mean"),
                ("seed success", "seed_success_final"))
        ), highlight=False)
    curve = Table(title="reward per rollout over time (mean over seeds), by window of steps")
    curve.add_column("sampler")
    n = len(result["uniform"]["reward_per_rollout"])
    window = max(1, a["steps"] // a["windows"])
    for i in range(n):
        curve.add_column(f"{i * window}-")
    for kind in SAMPLERS:
        curve.add_row(kind, *(f"{x:.2f}" for x in result[kind]["reward_per_rollout"]))
    console.print(curve)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, help="write the figures as JSON here")
    p.add_argument("--seeds", type=int, default=5)
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--groups", type=int, default=8, help="groups (distinct states) per step")
    p.add_argument("--group-size", type=int, default=8)
    p.add_argument("--tasks", type=int, default=8)
    p.add_argument("--variants", type=int, default=4, help="distinct scripts a rollout may write")
    p.add_argument("--lr-state", type=float, default=0.3)
    p.add_argument("--lr-task", type=float, default=0.05)
    p.add_argument("--lr-all", type=float, default=0.005)
    p.add_argument("--debug-offset", type=float, default=-0.5, help="mean logit change parent -> debug child")
    p.add_argument("--improve-offset", type=float, default=-1.0, help="mean logit change parent -> improve child")
    p.add_argument("--max-per-task", type=int, default=48)
    p.add_argument("--max-states", type=int, default=256)
    # The curriculum's constants default to the library's defaults: the benchmark measures those.
    defaults_lp, defaults_sampler = LearnabilityConfig(), SamplerConfig()
    p.add_argument("--lp-variant", choices=LP_VARIANTS, default=defaults_lp.variant,
                   help="the LP's L (laplace: the earlier definition, measured with --gamma 1)")
    p.add_argument("--prior-strength", type=float, default=defaults_lp.prior_strength)
    p.add_argument("--exploration-c", type=float, default=defaults_lp.exploration_c)
    p.add_argument("--gamma", type=float, default=defaults_lp.headroom_gamma)
    p.add_argument("--tau", type=float, default=defaults_sampler.tau)
    p.add_argument("--epsilon", type=float, default=defaults_sampler.epsilon)
    p.add_argument("--static-pool", type=int, default=0,
                   help="ablation: N fixed draft states per task and no new states (0: the evolving buffer)")
    p.add_argument("--windows", type=int, default=6, help="points of the reward-over-time curve")
    return p


def run_benchmark(args: argparse.Namespace, samplers: tuple[str, ...] = SAMPLERS) -> dict:
    start = time.perf_counter()
    result = {
        "simulation": True,
        "description": "Simulated learner (see the docstring of benchmarks/curriculum.py); not a model.",
        "config": vars(args) | {"out": str(args.out) if args.out else None},
        "rollouts_per_run": args.steps * args.groups * args.group_size,
    }
    with tempfile.TemporaryDirectory(prefix="mleforge-curriculum-bench-") as tmp:
        for kind in samplers:
            result[kind] = aggregate([run_one(kind, seed, args, Path(tmp)) for seed in range(args.seeds)])
    if all(k in result for k in SAMPLERS):
        result["paired_difference"] = paired_difference(result["uniform"], result["learnability"])
    result["seconds"] = round(time.perf_counter() - start, 1)
    return result


def paired_difference(uniform: dict, learnability: dict) -> dict:
    """learnability minus uniform, seed by seed (same seeds: the seed-to-seed spread of task
    difficulty cancels), as mean and standard deviation over seeds."""
    out = {}
    for key in ("frac_zero_std_groups", "reward_per_rollout_mean", "seed_success_final"):
        diffs = [b[key] - a[key] for a, b in zip(uniform["per_seed"], learnability["per_seed"])]
        out[key] = {"mean": float(np.mean(diffs)), "sd": float(np.std(diffs)), "per_seed": diffs}
    return out


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    result = run_benchmark(args)
    print_report(result)
    if args.out:
        ran = invocation(__file__, argv)
        write_result(args.out, "curriculum", result_table(result), argv=ran, **result)
    return result


def result_table(result: dict) -> dict:
    """The results page's table: each sampler's figures (mean ± sd over seeds) and the paired difference."""
    a = result["config"]
    rows = [[kind, f"{r['frac_zero_std_groups']:.3f} ± {r['frac_zero_std_groups_sd']:.3f}",
             round(r["reward_per_rollout_mean"], 3), f"{r['seed_success_final']:.3f} ± {r['seed_success_final_sd']:.3f}",
             round(r["buffer_states"][-1])] for kind, r in ((k, result[k]) for k in SAMPLERS)]
    if "paired_difference" in result:
        d = result["paired_difference"]
        rows.append(["learnability - uniform (paired)",
                     *(f"{d[key]['mean']:+.3f} ± {d[key]['sd']:.3f}" for key in ("frac_zero_std_groups",
                                                                                  "reward_per_rollout_mean")),
                     f"{d['seed_success_final']['mean']:+.3f} ± {d['seed_success_final']['sd']:.3f}", None])
    title = (f"SIMULATED learner, LP {a['lp_variant']}: {a['seeds']} seeds x {a['steps']} steps x {a['groups']} "
             f"groups x G={a['group_size']} (mean ± sd over seeds)")
    return table(title, ["sampler", "tied groups (frac)", "reward / rollout", "seed success at end",
                         "live states at end"], rows)


if __name__ == "__main__":
    main()
