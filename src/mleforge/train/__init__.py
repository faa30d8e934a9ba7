"""Training (ML-Agent's SFT warm start and step-wise GRPO on AceGRPO's evolving curriculum).

    collect       `mleforge collect`: expert trajectories (exploration-enriched) as journals and SFT samples
    config        TrainConfig (nests ModelConfig, SFTConfig, GenerationConfig, ...), SFTRunConfig; presets
    model         load a model for training: bundled:NAME, hf:PATH (LoRA by default, or full)
    samples       SFT samples (JSONL, TRL's conversational prompt-completion format)
    sft           `mleforge sft`: TRL's SFTTrainer, loss on the completion only
    journals      expert journals: from collected runs, or made by the template expert
    prompts       the state -> chat messages renderer the trainer uses (a PromptConfig)
    generation    the seam between the trainer and whatever generates its rollouts
    feed          each step's prompts: states drawn from the buffer by the curriculum sampler
    rewards       the executing reward: parse, run the group in the sandbox, grade, reward
    metrics       one step's figures (pure functions)
    records       what a run writes: rollouts, metrics lines
    trainer       the narrow GRPOTrainer subclass: prompts from the feed, seeded steps
    feedback      the callback feeding each step back to the buffer, once, on the main process
    checkpoints   which checkpoint is complete, and the marker that makes it so
    progress      the rich progress bar with an ETA
    grpo          `mleforge train`: the whole run (set-up, warm start, train, resume, report)
    report        the report sections of train and sft runs (`mleforge report`)

torch, transformers, TRL and peft are imported where a model is loaded or trained, never
here: `pip install 'mleforge[train]'`. Import from the submodules.
"""
