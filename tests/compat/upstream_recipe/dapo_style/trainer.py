"""The recipe's trainer: ``fit()`` written end to end against the attributes verl's ``RayPPOTrainer`` hands its
subclasses, the way DAPO's trainer is written (generation batches, group filtering, ``checkpoint_manager``,
profiling hooks, ``extract_reward``/``compute_reward``, the trainer's metrics and logger)."""

from __future__ import annotations

import uuid
from collections import defaultdict

import numpy as np
import torch
from tqdm import tqdm

from verl import DataProto
from verl.trainer.ppo.core_algos import agg_loss
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, apply_kl_penalty, compute_advantage, compute_response_mask
from verl.trainer.ppo.reward import compute_reward, extract_reward
from verl.utils.metric import reduce_metrics
from verl.utils.profiler import marked_timer
from verl.utils.tracking import Tracking


class DapoStyleTrainer(RayPPOTrainer):
    """Keeps drawing generation batches until ``data.train_batch_size`` prompt groups with reward spread are
    collected, then trains once on exactly that many groups."""

    def old_log_prob_and_ref(self, batch: DataProto, metrics: dict, timing_raw: dict) -> DataProto:
        batch.batch["response_mask"] = compute_response_mask(batch)
        with marked_timer("old_log_prob", timing_raw, "blue"):
            old_log_prob, mfu = self._compute_old_log_prob(batch)
            entropy = agg_loss(
                loss_mat=old_log_prob.batch.pop("entropys"),
                loss_mask=batch.batch["response_mask"],
                loss_agg_mode=self.config.actor_rollout_ref.actor.loss_agg_mode,
            )
            metrics["actor/entropy"] = entropy.item()
            batch = batch.union(old_log_prob)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw, "olive"):
                batch = batch.union(self._compute_ref_log_prob(batch))
        return batch

    def score(self, new_batch: DataProto, metrics: dict) -> DataProto:
        """Rewards of a generation batch: the scores the rollout brought (``rm_scores``), else the reward
        manager's; in-reward KL when configured."""
        if self.use_rm and "rm_scores" not in new_batch.batch.keys():
            new_batch = new_batch.union(self._compute_reward_colocate(new_batch))
        if "rm_scores" in new_batch.batch.keys():
            reward_tensor, extra_infos = extract_reward(new_batch)
        else:
            reward_tensor, extra_infos = compute_reward(new_batch, self.reward_fn)
        new_batch.batch["token_level_scores"] = reward_tensor
        new_batch.non_tensor_batch.update({key: np.array(values) for key, values in extra_infos.items()})
        if self.config.algorithm.use_kl_in_reward:
            new_batch, kl_metrics = apply_kl_penalty(
                new_batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=self.config.algorithm.kl_penalty
            )
            metrics.update(kl_metrics)
        else:
            new_batch.batch["token_level_rewards"] = new_batch.batch["token_level_scores"]
        return new_batch

    @staticmethod
    def groups_with_signal(batch: DataProto, metric: str) -> list[str]:
        values = defaultdict(list)
        if metric == "seq_reward":
            per_row = batch.batch["token_level_scores"].sum(-1).tolist()
        else:
            per_row = batch.non_tensor_batch[metric].tolist()
        for uid, value in zip(batch.non_tensor_batch["uid"], per_row):
            values[uid].append(value)
        return [uid for uid, vals in values.items() if len(vals) == 1 or np.std(vals) > 0]

    def fit(self):
        self.logger = Tracking(
            project_name=self.config.trainer.project_name,
            experiment_name=self.config.trainer.experiment_name,
            default_backend=self.config.trainer.logger,
            local_dir=self.config.trainer.default_local_dir,
        )
        self.global_steps = 0
        self.gen_steps = 0
        self._load_checkpoint()
        self.checkpoint_manager.update_weights(self.global_steps)
        profiled = self.config.global_profiler.steps or []

        progress = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="DAPO-style training")
        self.global_steps += 1
        self.gen_steps += 1
        timing_raw = defaultdict(float)
        metrics: dict = {}
        batch, kept_prompts, num_gen_batches = None, 0, 0
        filter_cfg = self.config.algorithm.filter_groups
        rollout_n = self.config.actor_rollout_ref.rollout.n
        for _epoch in range(self.config.trainer.total_epochs):
            for batch_dict in self.train_dataloader:
                self._start_profiling(self.global_steps in profiled)
                new_batch = DataProto.from_single_dict(batch_dict)
                num_gen_batches += 1
                gen_batch = self._get_gen_batch(new_batch)  # before uid exists, as DAPO calls it
                gen_batch = gen_batch.repeat(repeat_times=rollout_n, interleave=True)
                is_last_step = self.global_steps >= self.total_training_steps
                with marked_timer("step", timing_raw):
                    with marked_timer("gen", timing_raw, "red"):
                        gen_output = self.async_rollout_manager.generate_sequences(gen_batch)
                        timing_raw.update(gen_output.meta_info["timing"])
                        gen_output.meta_info.pop("timing", None)
                    new_batch.non_tensor_batch["uid"] = np.array(
                        [str(uuid.uuid4()) for _ in range(len(new_batch))], dtype=object
                    )
                    new_batch = new_batch.repeat(repeat_times=rollout_n, interleave=True)
                    new_batch = new_batch.union(gen_output)
                    with marked_timer("reward", timing_raw, "yellow"):
                        new_batch = self.score(new_batch, metrics)

                    if filter_cfg.enable:
                        kept = set(self.groups_with_signal(new_batch, filter_cfg.metric))
                        kept_prompts += len(kept)
                        rows = [i for i, uid in enumerate(new_batch.non_tensor_batch["uid"]) if uid in kept]
                        new_batch = new_batch[rows]
                        batch = new_batch if batch is None else DataProto.concat([batch, new_batch])
                        if kept_prompts < self.config.data.train_batch_size:
                            limit = filter_cfg.max_num_gen_batches
                            if limit > 0 and num_gen_batches >= limit:
                                raise ValueError(f"{num_gen_batches=} reached max_num_gen_batches={limit}")
                            self.gen_steps += 1
                            continue
                        batch = batch[: self.config.data.train_batch_size * rollout_n]
                    else:
                        batch = new_batch
                    self.checkpoint_manager.sleep_replicas()

                    if self.config.trainer.balance_batch:
                        self._balance_batch(batch, metrics=metrics)
                    batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()
                    batch = self.old_log_prob_and_ref(batch, metrics, timing_raw)
                    if self.use_critic:
                        with marked_timer("values", timing_raw, "cyan"):
                            batch = batch.union(self._compute_values(batch))
                    with marked_timer("adv", timing_raw, "brown"):
                        batch = compute_advantage(
                            batch,
                            adv_estimator=self.config.algorithm.adv_estimator,
                            gamma=self.config.algorithm.gamma,
                            lam=self.config.algorithm.lam,
                            num_repeat=rollout_n,
                            norm_adv_by_std_in_grpo=self.config.algorithm.norm_adv_by_std_in_grpo,
                            config=self.config.algorithm,
                        )
                    if self.use_critic:
                        with marked_timer("update_critic", timing_raw, "pink"):
                            metrics.update(reduce_metrics(self._update_critic(batch).meta_info["metrics"]))
                    if self.config.trainer.critic_warmup <= self.global_steps:
                        with marked_timer("update_actor", timing_raw, "red"):
                            actor_output = self._update_actor(batch)
                        if self.config.trainer.save_freq > 0 and (
                            is_last_step or self.global_steps % self.config.trainer.save_freq == 0
                        ):
                            with marked_timer("save_checkpoint", timing_raw, "green"):
                                self._save_checkpoint()
                        with marked_timer("update_weights", timing_raw, "red"):
                            self.checkpoint_manager.update_weights(self.global_steps)
                        metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
                    rollout_data_dir = self.config.trainer.get("rollout_data_dir", None)
                    if rollout_data_dir:
                        self._log_rollout_data(batch, self.reward_extra_infos_of(batch), timing_raw, rollout_data_dir)

                self._stop_profiling(self.global_steps in profiled)
                self.max_steps_duration = max(self.max_steps_duration, timing_raw.get("step", 0.0))
                metrics.update(compute_data_metrics(batch=batch, use_critic=self.use_critic))
                metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
                n_gpus = self.resource_pool_manager.get_n_gpus()
                metrics.update(compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=n_gpus))
                metrics["train/num_gen_batches"] = num_gen_batches
                metrics["recipe/dp_size"] = self._get_dp_size(self.actor_rollout_wg, "actor")
                self.logger.log(data=metrics, step=self.global_steps)
                timing_raw, metrics = defaultdict(float), {}
                batch, kept_prompts, num_gen_batches = None, 0, 0
                progress.update(1)
                if is_last_step:
                    progress.close()
                    self._shutdown_dump_executor()
                    self.logger.finish()
                    return
                self.global_steps += 1
                self.gen_steps += 1

    @staticmethod
    def reward_extra_infos_of(batch: DataProto) -> dict:
        """The reward's extra columns, and each sample's group id, for the generation dump."""
        keys = [*batch.meta_info.get("reward_extra_keys", []), "uid"]
        return {key: batch.non_tensor_batch[key] for key in keys}
