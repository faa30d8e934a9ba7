"""Training (ML-Agent's SFT warm start and step-wise GRPO on AceGRPO's evolving curriculum).

    recipe            `mleforge train`: the whole run, top to bottom (set-up, warm start, GRPO,
                      evaluation, report; resume)
    preflight         every check that needs no model, before anything heavy
    plan              the Plan preflight resolves, and the run record it writes
    warm_start        the model GRPO starts from: --sft none, PATH, or auto (collect, then sft)
    grpo/             the GRPO pieces:
        training          build_trainer: the trainer with its feed, reward and callbacks attached
        trainer           the narrow GRPOTrainer subclass: prompts from the feed, seeded steps
        state_feed        each step's prompts: states drawn from the buffer by the curriculum sampler
        executing_reward  the reward: parse, run the group in the sandbox, grade, reward
        buffer_callback   the callback feeding each step back to the buffer, once, on the main process
        generation        the seam between the trainer and whatever generates its rollouts
        ct2_rollout       CTranslate2 rollouts with the trained weights synced
    config            TrainConfig (nests ModelConfig, SFTConfig, GenerationConfig, ...), SFTRunConfig; presets
    model             load a model for training: bundled:NAME, hf:PATH (LoRA by default, or full)
    samples           SFT samples (JSONL, TRL's conversational prompt-completion format)
    sft               `mleforge sft`: TRL's SFTTrainer, loss on the completion only
    sft_trainer       the SFTTrainer subclass (the completion-only LM head on a CPU)
    prompt_renderer   the state -> chat messages renderer the trainer uses (a PromptConfig)
    metrics           one step's figures (pure functions)
    records           what a run writes: rollouts, metrics lines
    checkpoint_marks  which checkpoint is complete, and the marker that makes it so
    progress          the rich progress bar with an ETA, on the console the caller passes

The run directory's layout and record names are mleforge.runs'; the expert's collection and
episodes are mleforge.expert's; the report sections of train runs and the step-wise
evaluations at a run's stages are mleforge.eval's (train_sections, stages, background).
torch, transformers, TRL and peft are imported where a model is loaded or trained, never
here: `pip install 'mleforge[train]'`. Import from the submodules.
"""
