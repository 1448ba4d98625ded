"""verl 0.9 trainer side: the curriculum-sampler hook verl 0.8 removed, put back for the RODS sampler.

verl 0.4-0.7 built the sampler named by ``data.sampler.class_path`` / ``data.sampler.class_name`` and called
``sampler.update(batch=batch)`` after every training step. verl 0.9 has neither (its ``RayPPOTrainer`` still
takes a ``train_sampler``, and its ``run_ppo(config, task_runner_class)`` lets a recipe bring its own task
runner). Here:

- :class:`RODSRayPPOTrainer`: verl's ``RayPPOTrainer`` (the "v0" trainer, ``trainer.use_v1=false``) that, after
  each actor update and before the step's checkpoint, calls ``update(batch)`` on a curriculum sampler
  (so the checkpoint's ``data.pt`` holds the observed state) and logs its telemetry under ``curriculum/``;
- :class:`RODSTaskRunner`: verl's task runner steps (workers, resource pools, datasets), with the sampler
  built from ``data.sampler.class_path/class_name`` as verl 0.7 did, and the trainer above;
- ``python -m rods_gym.integrations.verl_trainer <hydra overrides>``: verl's ``ppo_trainer`` config and
  ``run_ppo`` with that task runner (one node or several: Ray does the placement, see ``examples/verl/``).

Written against verl 0.9.1; the trainer subclass imports and its hook is tested on CPU without workers
(``tests/test_integration_verl.py``); a full verl job was not run here (it needs GPUs and an inference server).
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import ray
from verl.trainer.main_ppo import run_ppo
from verl.trainer.main_ppo_v0 import BaseTaskRunner
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.trainer.ppo.utils import create_rl_dataset, create_rl_sampler, need_critic, need_reference_policy

from .verl import AbstractCurriculumSampler, plain


def curriculum_sampler(data_config: Any, dataset: Any) -> Any:
    """The sampler ``data.sampler.class_path/class_name`` name (verl 0.7's keys), else verl's default sampler."""
    from verl.utils.import_utils import load_extern_object

    spec = plain(data_config.get("sampler")) or {}
    if not spec.get("class_path"):
        return create_rl_sampler(data_config, dataset)
    cls = load_extern_object(spec["class_path"], spec["class_name"])
    sampler = cls(data_source=dataset, data_config=data_config)
    if not callable(getattr(sampler, "update", None)):
        raise TypeError(f"data.sampler: {spec['class_name']} has no update(batch); a curriculum sampler needs one")
    return sampler


def updates_with_batches(sampler: Any) -> bool:
    if isinstance(sampler, AbstractCurriculumSampler):
        return True
    try:  # verl 0.4-0.7's own base class, when the sampler subclasses it
        from verl.experimental.dataset.sampler import AbstractCurriculumSampler as VerlBase
    except ImportError:
        return False
    return isinstance(sampler, VerlBase)


class RODSRayPPOTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` that feeds each step's batch to its curriculum sampler (``update``) after the actor update."""

    def _update_actor(self, batch: Any) -> Any:
        output = super()._update_actor(batch)
        sampler = getattr(self.train_dataloader, "sampler", None)
        if updates_with_batches(sampler):
            sampler.update(batch)  # before this step's checkpoint: data.pt holds the observed state
            telemetry = getattr(sampler, "telemetry", None)
            metrics = getattr(output, "meta_info", {}).get("metrics") if callable(telemetry) else None
            if isinstance(metrics, dict):  # reduced into the step's logged metrics by verl
                metrics.update({f"curriculum/{k}": [float(v)] for k, v in telemetry().items()})
        return output


class _TaskRunner(BaseTaskRunner):
    def run(self, config: Any) -> None:
        from omegaconf import OmegaConf
        from verl.utils.config import omega_conf_to_dataclass, validate_config
        from verl.utils.dataset.rl_dataset import collate_fn
        from verl.workers.config import HFModelConfig

        print(f"RODSTaskRunner on {socket.gethostname()}, pid {os.getpid()}")
        OmegaConf.resolve(config)
        actor_rollout_cls, worker_group_cls = self.add_actor_rollout_worker(config)
        self.add_critic_worker(config)
        self.add_reward_model_resource_pool(config)
        self.add_teacher_model_resource_pool(config)
        self.add_ref_policy_worker(config, actor_rollout_cls)
        validate_config(config=config, use_reference_policy=need_reference_policy(config), use_critic=need_critic(config))
        model_config: HFModelConfig = omega_conf_to_dataclass(config.actor_rollout_ref.model)
        tokenizer, processor = model_config.tokenizer, model_config.processor
        pools = self.init_resource_pool_mgr(config)
        train = create_rl_dataset(config.data.train_files, config.data, tokenizer, processor, is_train=True,
                                  max_samples=config.data.get("train_max_samples", -1))
        val = create_rl_dataset(config.data.val_files, config.data, tokenizer, processor, is_train=False,
                                max_samples=config.data.get("val_max_samples", -1))
        trainer = RODSRayPPOTrainer(config=config, tokenizer=tokenizer, processor=processor,
                                    role_worker_mapping=self.role_worker_mapping, resource_pool_manager=pools,
                                    ray_worker_group_cls=worker_group_cls, train_dataset=train, val_dataset=val,
                                    collate_fn=collate_fn, train_sampler=curriculum_sampler(config.data, train))
        trainer.init_workers()
        trainer.fit()


RODSTaskRunner = ray.remote(num_cpus=1)(_TaskRunner)


def main() -> None:
    """``python -m rods_gym.integrations.verl_trainer key=value ...``: verl's PPO entry point with the curriculum hook."""
    import hydra
    import verl.trainer
    from verl.utils.device import auto_set_device

    config_dir = str(Path(verl.trainer.__file__).resolve().parent / "config")

    @hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)
    def entry(config: Any) -> None:
        auto_set_device(config)
        if config.trainer.get("use_v1", False):
            raise ValueError("trainer.use_v1=true runs verl's TransferQueue trainer, which has no sampler hook; "
                             "the curriculum runs in the RayPPOTrainer: set trainer.use_v1=false")
        run_ppo(config, task_runner_class=RODSTaskRunner)

    entry()


if __name__ == "__main__":
    main()
