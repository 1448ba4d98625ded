#!/usr/bin/env bash
# GRPO with the RODS curriculum in verl 0.9 on several nodes, through a Ray cluster: see README.md.
#   head node:        ray start --head --dashboard-host=0.0.0.0
#   every other node: ray start --address=<head ip>:6379
#   head node:        NNODES=2 bash examples/verl/run_multi_node.sh [extra hydra overrides ...]
# The job is submitted to the cluster's dashboard (RAY_DASHBOARD, default http://127.0.0.1:8265); follow it with
# ray job logs --follow <submission id>. rods-gym[verl] must be installed on every node, and RODS_DATA must be a
# path every node sees (the task runner may be placed on any node).
set -euo pipefail
NNODES=${NNODES:-2}
source "$(dirname "${BASH_SOURCE[0]}")/args.sh"
ARGS+=("$@")
rods_print_args
rods_prepare_data
ray job submit --address="${RAY_DASHBOARD:-http://127.0.0.1:8265}" --no-wait -- \
  python -m rods_gym.integrations.verl_trainer "${ARGS[@]}"
