"""The run directories' record names and layout: every command that writes a run folder, and
every reader of one (the contamination guard, `mleforge report`, a resume), names its files
from here.

Every run folder records what it ran in `run.json` (RUN_RECORD): its kind ("train", "sft",
"collect", "eval", "stepwise"), the tasks it used (the contamination guard reads them), its
settings and status. A checkpoint names the run that trained it with `mleforge_run.json`
(CHECKPOINT_RECORD) beside its weights. A folder that can be resumed keeps its full resolved
config in `config.yaml` (CONFIG_FILE).

A `mleforge train` run directory holds

    config.yaml                the full resolved TrainConfig
    run.json                   kind "train", its tasks (the contamination guard reads them)
    expert/<task>/             the template expert's episodes (--sft none or PATH, no --journals)
    collect/                   --sft auto: `mleforge collect` with the template expert (compact
                               prompts, the training tasks); its journals seed the buffer
    sft/                       the warm start of --sft auto (an `mleforge sft` run on collect/)
    buffer.sqlite              the state buffer (mleforge.curriculum)
    results.sqlite             the result cache of the rollouts' executions
    checkpoints/checkpoint-<k> adapter (or model), optimizer, scheduler, RNG states, trainer
                               state, and the buffer's step (mleforge.train.checkpoint_marks)
    rollouts/step-<k>.jsonl    every rollout of step k (mleforge.train.records.RolloutLine)
    metrics.jsonl              one line per step (mleforge.train.records.StepMetrics)
    stepwise/{before,after}.json   the step-wise evaluation on the eval tasks: before, the model
                               as given (before any warm start; made alongside collect/ on a
                               run that collects, mleforge.eval.background.BeforeEvaluation);
                               after, final/. The same states (from stepwise/expert/,
                               template-expert journals of the eval tasks), sampling seeds and
                               sampling each time; run.json's `stepwise` holds their paired
                               differences (mleforge.eval.stages.paired_summary)
    stepwise/sft.json          the same for the warm start's model (stepwise.after_sft)
    ct2-rollouts/rank-<i>/     generation ct2: the engine's converted weights while it runs
                               (deleted at the end, and when a killed run resumes)
    frozen-weights/            a one-process LoRA run on a CPU from a checkpoint: its merged
                               weights, written to be memory-mapped and deleted as soon as they
                               are (a killed run's go when it resumes; mleforge.train.model)
    final/                     the trained adapter (or model): `hf:<run>/final`
    report/                    `mleforge report <run>`, written at the end

An `mleforge sft` run directory holds run.json, config.yaml, metrics.jsonl, checkpoints/ and
model/ (mleforge.train.sft).
"""

from __future__ import annotations

RUN_RECORD = "run.json"
CHECKPOINT_RECORD = "mleforge_run.json"
CONFIG_FILE = "config.yaml"

# a train run's folders and files
CHECKPOINTS_DIR = "checkpoints"
FINAL_DIR = "final"
SFT_DIR = "sft"
STEPWISE_DIR = "stepwise"
COLLECT_DIR = "collect"
EXPERT_DIR = "expert"
ROLLOUTS_DIR = "rollouts"
FROZEN_DIR = "frozen-weights"
METRICS_FILE = "metrics.jsonl"
RESULTS_CACHE = "results.sqlite"
REPORT_DIR = "report"

# an sft run's model folder
MODEL_DIR = "model"
