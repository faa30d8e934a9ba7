"""Prompt length in real tokens (Qwen2.5-Coder's tokenizer), per stage and prompt profile.

    python benchmarks/prompt_tokens.py --out prompt_tokens.json
    python benchmarks/prompt_tokens.py --journals runs/collect --code-chars 2400,3200,4000,0
    python benchmarks/prompt_tokens.py --journals runs/a,runs/b --tasks lite   # several folders

The states come from template-expert journals of the lite tasks: `--journals DIR` (what
`mleforge collect` or `mleforge eval` wrote), else `mleforge collect` makes them in
`--work` (one episode per task, resumable). The expert rarely fails, so each task also
gets a real debug state: its first draft with the training file's path misspelled, run in
the sandbox (a FileNotFoundError traceback). Every state's prompt is rendered with the
`full` and the `compact` profile and counted with the chat template applied (system,
user and the assistant's header: what a model prefills).

The sweep over the compact profile's script budget (`code_chars`, 0 = the whole script)
also reports how many of the expert's own debug and improve edits stay within the lines
the prompt shows: an edit of a hidden line cannot become an SFT sample (collect leaves
it out), so a tighter budget costs samples.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from _record import table as record_table
from _record import write_result
from mleforge.agent.actions import edit_blocks, write_action
from mleforge.agent.elision import target_view
from mleforge.agent.journal import Journal
from mleforge.agent.prompt_config import COMPACT_CODE_CHARS, PromptConfig
from mleforge.agent.prompts import render_prompt
from mleforge.agent.state import State
from mleforge.agent.step import RewardContext, run_step
from mleforge.expert.collect import CollectConfig, collect_samples, episode_states
from mleforge.policies.bundled import prepare_bundled
from mleforge.sandbox import make_executor
from mleforge.tasks.preparation import prepare
from mleforge.tasks.registry import TaskRegistry

console = Console(stderr=True)
MODEL = "qwen2.5-coder-0.5b"
TRAIN_READ = 'pd.read_csv("input/train.csv")'


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(prepare_bundled(MODEL)))


def count(tok: Any, messages: list[dict[str, str]]) -> dict[str, int]:
    def n(text: str) -> int:
        return len(tok(text, add_special_tokens=False)["input_ids"])

    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return {"system": n(messages[0]["content"]), "user": n(messages[1]["content"]), "total": n(text)}


def journal_ideas(path: Path) -> tuple[str, ...]:
    config = path.parent / "config.json"
    return tuple(json.loads(config.read_text()).get("ideas", ())) if config.is_file() else ()


def expert_states(journals: list[Path]) -> list[tuple[State, Any]]:
    """(state, the node the expert made from it) along every journal."""
    out = []
    for path in journals:
        journal = Journal.load(path)
        out += list(zip(episode_states(journal, journal_ideas(path)), journal.nodes))
    return out


def debug_states(registry: TaskRegistry, journals: list[Path]) -> list[State]:
    """One real failure per task: its first valid draft with a misspelled data path, run."""
    out, done = [], set()
    with make_executor("local") as executor:
        for path in journals:
            journal = Journal.load(path)
            draft = next((n for n in journal.nodes if n.stage == "draft" and n.valid and TRAIN_READ in n.code), None)
            if journal.task_id in done or draft is None:
                continue
            task = registry.get(journal.task_id)
            prefix = Journal(journal.task_id, journal.direction, journal.nodes[: journal.position(draft.id) + 1])
            state = State.draft(task.id, journal=prefix, direction=journal.direction)
            broken = draft.code.replace(TRAIN_READ, 'pd.read_csv("input/train_data.csv")', 1)
            outcome = run_step(state, write_action("draft", draft.plan, broken), task, executor, RewardContext(task))
            grown = prefix.add(outcome.node)
            out.append(State.debug(grown, outcome.node.id))
            done.add(journal.task_id)
    return out


def _edited(base: str, code: str, config: PromptConfig) -> str:
    """The script the sample's edits give: a compact profile that hides the bookkeeping header
    keeps the base's (agent.actions.keep_base_bookkeeping; absent before it existed)."""
    if not getattr(config, "hide_bookkeeping", False):
        return code
    from mleforge.agent.actions import keep_base_bookkeeping

    return keep_base_bookkeeping(base, code)


def summarize(values: list[int]) -> dict[str, Any]:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return {"n": len(values), "mean": round(statistics.fmean(values), 1), "median": statistics.median(values),
            "min": min(values), "p95": p95, "max": max(values)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="lite")
    parser.add_argument("--journals", help="folders of journals (collect or eval output), separated by commas; "
                                           "default: made in --work")
    parser.add_argument("--work", default="runs/bench/prompt_tokens", help="where the expert journals are made")
    parser.add_argument("--steps", type=int, default=6, help="steps of each expert episode made here")
    parser.add_argument("--code-chars", default="2400,3200,4000,4800,0",
                        help="compact script budgets to sweep (comma-separated; 0 = whole script)")
    parser.add_argument("--out", default="prompt_tokens.json")
    args = parser.parse_args()

    start = time.perf_counter()
    registry = TaskRegistry()
    if args.journals:
        roots = [Path(r) for r in args.journals.split(",")]
    else:
        config = CollectConfig(tasks=args.tasks, episodes=1, steps=args.steps, embedder="tfidf")
        roots = [Path(collect_samples(config, args.work, registry=registry, progress=True,
                                      console=console).journals_dir)]
    task_ids = {t.id for t in registry.select(args.tasks)}
    journals = [p for root in roots for p in sorted(root.rglob("journal.json")) if Journal.load(p).task_id in task_ids]
    if not journals:
        console.print(f"no journals of {args.tasks} under {', '.join(map(str, roots))}")
        return 1
    for task_id in task_ids:
        prepare(registry.get(task_id))
    pairs = expert_states(journals)
    states = [s for s, _ in pairs] + debug_states(registry, journals)
    tok = tokenizer()

    rows: list[dict[str, Any]] = []
    profiles = {"full": PromptConfig(), "compact": PromptConfig.compact()}
    for name, config in profiles.items():
        for state in states:
            counts = count(tok, render_prompt(state, registry.get(state.task_id), config))
            rows.append({"profile": name, "task_id": state.task_id, "stage": state.stage,
                         "state_id": state.state_id, **counts})
    table: dict[str, dict[str, Any]] = {}
    for name in profiles:
        for stage in ("draft", "debug", "improve"):
            values = [r["total"] for r in rows if r["profile"] == name and r["stage"] == stage]
            if values:
                table[f"{name}/{stage}"] = summarize(values)

    sweep = []
    for chars in (int(c) for c in args.code_chars.split(",")):
        config = PromptConfig.compact(code_chars=chars)
        totals = {"debug": [], "improve": []}
        for state in states:
            if state.stage in totals:
                totals[state.stage].append(count(tok, render_prompt(state, registry.get(state.task_id), config))["total"])
        edits = [(s, n) for s, n in pairs if s.stage != "draft" and n.execution is not None]
        visible = sum(not any(line in target_view(s, config).hidden
                              for b in edit_blocks(s.target.code, _edited(s.target.code, n.code, config))
                              for line in b.base_lines)
                      for s, n in edits)
        sweep.append({"code_chars": chars, "debug_mean": round(statistics.fmean(totals["debug"]), 1)
                      if totals["debug"] else None,
                      "improve_mean": round(statistics.fmean(totals["improve"]), 1) if totals["improve"] else None,
                      "expert_edits": len(edits), "edits_visible": visible,
                      "edits_visible_rate": round(visible / len(edits), 3) if edits else None})

    result = {"model": MODEL, "tasks": sorted(task_ids), "journals": [str(p) for p in journals],
              "states": len(states), "compact_code_chars": COMPACT_CODE_CHARS, "by_profile_stage": table,
              "code_chars_sweep": sweep, "rows": rows, "seconds": round(time.perf_counter() - start, 1),
              "python": sys.version.split()[0]}
    main_table = record_table(f"prompt tokens ({MODEL} tokenizer, chat template applied), {len(states)} states",
                              ["profile/stage", "n", "mean", "min", "median", "p95", "max"],
                              [[key, *(s[k] for k in ("n", "mean", "min", "median", "p95", "max"))]
                               for key, s in table.items()])
    sweep_table = record_table("compact profile: script budget against tokens and the expert's edits it shows",
                               ["code_chars", "debug mean", "improve mean", "expert edits visible"],
                               [[s["code_chars"], s["debug_mean"], s["improve_mean"],
                                 f"{s['edits_visible']}/{s['expert_edits']}"] for s in sweep])
    write_result(args.out, "prompt_tokens", main_table, tables=[sweep_table], **result)

    out = Table(title=f"prompt tokens ({MODEL} tokenizer, chat template applied), {len(states)} states")
    for column in ("profile/stage", "n", "mean", "min", "median", "p95", "max"):
        out.add_column(column)
    for key, s in table.items():
        out.add_row(key, *(str(s[k]) for k in ("n", "mean", "min", "median", "p95", "max")))
    Console().print(out)
    out = Table(title="compact profile: script budget against tokens and the expert's edits it shows")
    for column in ("code_chars", "debug mean", "improve mean", "expert edits visible"):
        out.add_column(column)
    for s in sweep:
        out.add_row(str(s["code_chars"]), str(s["debug_mean"]), str(s["improve_mean"]),
                    f"{s['edits_visible']}/{s['expert_edits']}")
    Console().print(out)
    console.print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
