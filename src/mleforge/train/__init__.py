"""Training: expert trajectories (collect), SFT and step-wise GRPO. Torch, TRL and PEFT are
imported only by the modules that train (`pip install 'mleforge[train]'`)."""
