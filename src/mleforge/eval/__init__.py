"""Evaluation: run a policy over a suite of tasks for several seeds, aggregate like MLE-bench, report.

    from mleforge.eval.config import EvalConfig
    from mleforge.eval.runner import run_eval
    from mleforge.eval.report import write_report

    result = run_eval(EvalConfig(policy="template", tasks="lite", seeds=3, steps=4), "runs/eval/template")
    result.aggregate["metrics"]["any_medal"]     # {"mean": ..., "sem": ..., "n": 3, "per_seed": {...}}
    write_report([result.eval_dir], "runs/eval/template/report")

Modules: `config` (EvalConfig), `runner` (the grid), `records` (per-run reports), `aggregate`
(the pure aggregation math), `contamination` (the training-set guard), `stepwise` (ML-Agent's
step-wise evaluation: k seeds per state), `headroom` (which states can show an improvement),
`paired` (the pure statistics of a paired comparison), `stepwise_compare` (two step-wise results
compared, paired by state and seed; the null control), `stepwise_report` (their tables),
`stages` (a training run's step-wise evaluations before, after its warm start and after),
`background` (the one before, beside the expert's collection), `report`, `sections`,
`train_sections` and `plots` (Markdown and HTML). Nothing here imports
mleforge.train: a training run hands in what its evaluations need. This package imports
nothing itself.
"""
