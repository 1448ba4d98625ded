#!/usr/bin/env bash
# GRPO with the RODS curriculum in verl 0.9, on one node (default 8 GPUs): see README.md.
#   bash examples/verl/run_single_node.sh [extra hydra overrides ...]
#   MODEL=Qwen/Qwen2.5-3B-Instruct NGPUS=4 STEPS=100 bash examples/verl/run_single_node.sh trainer.logger='["console","wandb"]'
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/args.sh"
ARGS+=("$@")
rods_print_args
rods_prepare_data
python -m rods_gym.integrations.verl_trainer "${ARGS[@]}"
