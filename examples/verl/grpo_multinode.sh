#!/usr/bin/env bash
# GRPO with verl on mleforge's curriculum across a Ray cluster of 8-GPU nodes.
# On every node: pip install "verl[vllm]==0.9.1" && pip install "mleforge[verl]"
#   head:     ray start --head --port=6379
#   workers:  ray start --address=HEAD_IP:6379
#   head:     bash examples/verl/grpo_multinode.sh /shared/runs/verl-4node trainer.nnodes=4
# RUN_DIR must be on a file system every node mounts at the same path.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
run="${1:?usage: grpo_multinode.sh RUN_DIR [hydra overrides ...]}"; shift
python "$here/prepare.py" "$run" --config "${MLEFORGE_CONFIG:-$here/mleforge_multinode.yaml}"
export MLEFORGE_RUN="$(cd "$run" && pwd)"
export RAY_ADDRESS="${RAY_ADDRESS:-auto}"   # verl's ray.init() joins the running cluster
python -m verl.trainer.main_ppo --config-path="$here/config" --config-name=mleforge_grpo_multinode \
    trainer.default_local_dir="$MLEFORGE_RUN/checkpoints" "$@"
