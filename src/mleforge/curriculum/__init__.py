"""The curriculum (AceGRPO): the Evolving Data Buffer and Learnability-Potential sampling.

    buffer.StateBuffer      states in SQLite (WAL): seeds, states offered from rollouts,
                            statistics, bounds, per-step snapshots every rank reads alike
    learnability            LP = (L + U) H^gamma as pure functions
    sampler                 uniform (baseline) and learnability samplers, GRPO group layout
    feedback.step_feedback  a finished GRPO step -> statistics and new states, one transaction
    seeds                   draft seeds per task, states along expert journals
    export, summary         `mleforge buffer export|show`

The usual loop (every rank samples; one process feeds back):

    buffer = StateBuffer(run_dir)
    set_up_tasks(buffer, tasks, expert_journals)   # seeds + seal of the set-up step, atomic
    for step in range(start, steps):
        batch, states = next_batch(buffer, sampler, step, n_groups)   # snapshot of step - 1
        ... generate, execute, reward, gather across ranks ...
        step_feedback(buffer, step, states, completions, executions, rewards)   # rank 0

Import from the submodules; this package imports nothing itself.
"""
