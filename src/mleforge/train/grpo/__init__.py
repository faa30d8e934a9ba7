"""Step-wise GRPO: TRL's GRPOTrainer with the curriculum's states as prompts and an executing
reward. `training.build_trainer` puts the pieces together; mleforge.train.recipe runs it.
Import from the submodules (they import TRL)."""
