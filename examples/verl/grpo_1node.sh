#!/usr/bin/env bash
# GRPO with verl on mleforge's curriculum, one node of 8 GPUs.
#   pip install "verl[vllm]==0.9.1" && pip install "mleforge[verl]"
#   bash examples/verl/grpo_1node.sh runs/verl-1node [hydra overrides ...]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run="${1:?usage: grpo_1node.sh RUN_DIR [hydra overrides ...]}"; shift
python "$here/prepare.py" "$run"   # does nothing to a directory it prepared before
export MLEFORGE_RUN="$(cd "$run" && pwd)"
python -m verl.trainer.main_ppo --config-path="$here/config" --config-name=mleforge_grpo_1node \
    trainer.default_local_dir="$MLEFORGE_RUN/checkpoints" "$@"
