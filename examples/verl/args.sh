# shellcheck shell=bash
# The verl command line both launchers share (sourced by run_single_node.sh and run_multi_node.sh).
# Environment knobs: MODEL, ROLLOUT (vllm | sglang), NGPUS (per node), NNODES, TP (rollout tensor parallel), STEPS,
# RODS_DATA (where the parquet files go; every node must see it, e.g. a shared filesystem).
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
MODEL=${MODEL:-Qwen/Qwen2.5-1.5B-Instruct}
RODS_DATA=${RODS_DATA:-$PWD/data/rods}
ARGS=(
  --config-path="$HERE" --config-name=rods_grpo
  data.train_files="$RODS_DATA/train.parquet"
  data.val_files="$RODS_DATA/test.parquet"
  actor_rollout_ref.rollout.agent.agent_loop_config_path="$HERE/agent_loop.yaml"
  actor_rollout_ref.model.path="$MODEL"
  actor_rollout_ref.model.enable_gradient_checkpointing=true
  actor_rollout_ref.rollout.name="${ROLLOUT:-vllm}"
  actor_rollout_ref.rollout.tensor_model_parallel_size="${TP:-1}"
  actor_rollout_ref.rollout.gpu_memory_utilization=0.6
  actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=8
  actor_rollout_ref.actor.optim.lr=1e-6
  actor_rollout_ref.actor.ppo_mini_batch_size=32
  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4
  actor_rollout_ref.actor.use_kl_loss=false
  trainer.n_gpus_per_node="${NGPUS:-8}"
  trainer.nnodes="${NNODES:-1}"
  trainer.total_training_steps="${STEPS:-200}"
)

# The train split (400 seed tasks) and 200 test tasks as verl rows, unless they are there already.
rods_prepare_data() {
  [ -f "$RODS_DATA/train.parquet" ] || rods tasks --split train --to-parquet "$RODS_DATA/train.parquet"
  [ -f "$RODS_DATA/test.parquet" ] || rods tasks --split test -n 200 --to-parquet "$RODS_DATA/test.parquet"
}

# RODS_PRINT_ARGS=1: print the arguments, one a line, and launch nothing (tests/test_integration_verl.py checks them
# with verl's own config validation).
rods_print_args() {
  if [ -n "${RODS_PRINT_ARGS:-}" ]; then
    printf '%s\n' "${ARGS[@]}"
    exit 0
  fi
}
