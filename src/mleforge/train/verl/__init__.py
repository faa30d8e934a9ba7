"""mleforge's parts on verl (`pip install 'mleforge[verl]'`): verl trains, mleforge scores and chooses.

verl (Ray, FSDP/Megatron, vLLM/SGLang rollouts) owns the losses, advantages, rollout engines,
sharding and weight sync; mleforge supplies what is ours, through verl's own hooks:

    reward.compute_score     `reward.custom_reward_function`: the same parse, sandbox, grader
                             and reward module as `mleforge train` (mleforge.agent.step.run_step)
    dataset.CurriculumDataset  `data.custom_cls`: each prompt drawn by the curriculum sampler
                             from a state buffer owned by one Ray actor (owner.BufferOwner)
    rows.export_verl         the buffer's live states as verl's parquet (RLHFDataset's columns)
    run.prepare_run          a run directory: the mleforge config, the prepared tasks, the seeded buffer

Nothing here imports verl except `dataset`, which verl loads itself.
"""
