"""The run configuration's schema: pydantic models, every field documented once in its
``Field(description=...)`` (``prover train --help`` prints those strings).

Defaults are sized for the embedded envs with the tiny model on a laptop CPU; the reference values of
verl-agent and the ProVer paper are cited where they differ.

This is a ground-floor room that every other one may read: it imports no registry, no plugin and no env
(tests/test_import_graph.py, ``config-schema-imports-no-registry-plugin-or-env``). Reading a YAML file with
dotted overrides, applying the env's ``train_recipe`` and checking that the named parts fit is the loader's
work: ``prover.config_load`` (``load_config``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from prover.seeding import RUN_SEED_RULE, RunSeed
from prover.settings.strict_numbers import StrictNumbers


class Section(StrictNumbers):  # steps=true is refused, not read as 1
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class EnvConfig(Section):
    name: str = Field("alfworld-sim", description="Registered env name (see `prover list`), or 'module:Class'.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the env's constructor.")
    isolate_global_rng: bool = Field(False, description="Give each env instance its own copy of the process-wide "
                                     "random and numpy RNGs, swapped in around every call into it, as for a class "
                                     "that declares uses_global_rng (prover/envs/global_rng.py): for a foreign "
                                     "env that draws from them, which check-env reports as rule global-rng.")


class TinyModelConfig(Section):
    vocab_size: int = Field(2048, ge=64, description="BPE vocabulary size of the tokenizer trained on the env's text.")
    hidden_size: int = Field(128, ge=16, description="Hidden width of the tiny Qwen3-architecture policy.")
    num_layers: int = Field(4, ge=1, description="Decoder layers of the tiny policy.")
    num_heads: int = Field(4, ge=1, description="Attention heads (key/value heads are half of them).")
    intermediate_size: int = Field(384, ge=16, description="MLP width of the tiny policy.")
    corpus_episodes: int = Field(300, ge=1, description="Env episodes (expert and random moves) whose text trains "
                                 "the tokenizer.")


class LoraConfig(Section):
    enabled: bool = Field(False, description="Train LoRA adapters (peft; pip install 'prover-rl[lora]') on the RL "
                          "phase's starting policy, which stays frozen, instead of every weight; checkpoints then "
                          "hold the adapters alone. The warm start, when on, still trains every weight.")
    rank: int = Field(16, ge=1, description="Rank r of each adapter's factors B (out x r) and A (r x in).")
    alpha: float = Field(32.0, gt=0.0, description="An adapted weight W acts as W + (alpha / rank) B A.")
    dropout: float = Field(0.0, ge=0.0, lt=1.0, description="Dropout on the adapters' input; 0 keeps the log-probs "
                           "the learner trains through equal to those the engine sampled with.")
    target_modules: str | list[str] = Field("all-linear", description="Linear layers that get an adapter, by name "
                                            "(e.g. [q_proj,v_proj]), or 'all-linear': every one but the LM head.")


class ModelConfig(Section):
    path: str = Field("tiny", description="A local Hugging Face checkpoint folder (e.g. Qwen3.5-2B), or 'tiny' to "
                                          "build a tiny Qwen3-architecture model and tokenizer from the env's text.")
    tiny: TinyModelConfig = Field(default_factory=TinyModelConfig, description="Shape of the tiny model (path='tiny').")
    dtype: Literal["float32", "bfloat16", "float16"] = Field("float32", description="Parameter dtype.")
    engine_dtype: Literal["float32", "bfloat16", "float16"] | None = Field(
        None, description="The inference engine's dtype when it differs from the learner's (null: model.dtype). "
        "bfloat16 samples faster on CPUs with AVX512-BF16 and on GPUs, but the engine's sampling log-probs then "
        "differ from the float32 learner's by the rounding, so PPO's ratio starts off 1 (docs/perf.md measures "
        "both).")
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict, description="Extra arguments for the "
                                                 "tokenizer's chat template, e.g. {enable_thinking: false} for Qwen3.")
    lora: LoraConfig = Field(default_factory=LoraConfig, description="LoRA adapters in place of full fine-tuning.")


def engine_dtype(model: ModelConfig) -> str:
    """The dtype the inference engine loads the policy in."""
    return model.engine_dtype or model.dtype


class EngineConfig(Section):
    name: str = Field("hf", description="Registered inference engine: 'hf' (transformers, CPU or GPU) or a plugin.")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for the engine's constructor.")


class SamplingConfig(Section):
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature (verl-agent: 1.0); 0 is greedy.")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="Nucleus sampling mass (verl-agent: 1.0).")
    top_k: int = Field(0, ge=0, description="Top-k sampling; 0 turns it off.")
    max_new_tokens: int = Field(24, ge=1, description="Most tokens per turn (verl-agent: 512; the tiny "
                                                      "model's actions need about 10).")


class RolloutConfig(Section):
    groups_per_step: int = Field(8, ge=1, description="Tasks per training step (verl-agent and the ProVer "
                                 "paper used 16).")
    group_size: int = Field(8, ge=1, description="Episodes per task, G (verl-agent and the ProVer paper "
                            "used 8).")
    max_turns: int = Field(20, ge=1, description="Turn cap per episode (the ProVer paper used 50 on ALFWorld, "
                           "15 on WebShop, 30 on SearchQA).")
    history_window: int | None = Field(None, ge=0, description="(observation, action) pairs shown in each prompt; "
                                                               "None keeps the env's own (verl-agent: 2).")
    sampling: SamplingConfig = Field(default_factory=SamplingConfig, description="How rollouts sample.")
    max_prompt_tokens: int | None = Field(None, ge=32, description="Most tokens of a turn's prompt; null: the "
                                          "model's positions less sampling.max_new_tokens. Past it the oldest "
                                          "history entries go first, then the observation's end (marked); a "
                                          "prompt that still cannot fit ends its episode as an env error.")
    max_env_error_share: float = Field(0.25, ge=0.0, le=1.0, description="An episode whose env raises or breaks "
                                       "its contract ends as failed (rollout/env_errors); past this share of a "
                                       "step's episodes the run stops with one line.")
    context: Literal["window", "chat"] = Field("window", description="'window': each turn's prompt is rendered "
                                               "anew from the task and the last history_window (observation, "
                                               "action) pairs (verl-agent's step-independent prompts). 'chat': the "
                                               "episode is one growing chat, each turn's completion appended as "
                                               "generated and the env's reply as the next user message, so each "
                                               "token is prefilled once (the engine's prefix cache) and the learner "
                                               "forwards the episode once; a chat that outgrows max_prompt_tokens "
                                               "ends the episode as truncated (docs/chat.md).")
    max_branch_envs: int | None = Field(None, ge=1, description="Most env instances that branching "
                                        "continuations (ProVer's verification, SPO, budget-matched GRPO, Tree-GRPO) "
                                        "and a batch of more episodes than this (an evaluation) play on: the rest "
                                        "take turns on them, each restored from its own snapshot before its turn, "
                                        "so results are the same and a heavy env (a JVM per instance) is not made "
                                        "once per continuation or held-out episode (an env that cannot snapshot "
                                        "gets one per episode). null: groups_per_step x group_size, the instances "
                                        "the rollout keeps for its own episodes (metrics env/instances_created, "
                                        "env/instances, env/swaps).")
    max_off_policy_steps: int = Field(0, ge=0, description="k: sample step s+1's batch (up to s+k) in a worker "
                                      "process while the learner updates on step s's, so rows of step s come from "
                                      "the policy of max(start, s-1-k) updates; 0 samples each step after the last "
                                      "update (on-policy). Branching and evaluation keep the learner's current "
                                      "policy (prover/episodes/async_rollout.py). Needs an engine that holds its "
                                      "own weights (hf) and one process.")
    worker_timeout_s: float = Field(1800.0, gt=0.0, description="With max_off_policy_steps > 0: most seconds to "
                                    "wait for the rollout worker's next batch before the run stops with one line "
                                    "(a worker that dies is reported at once).")


class RewardConfig(Section):
    scale: float = Field(10.0, gt=0.0, description="Episode reward = scale * env return (verl-agent: 10 * won).")
    invalid_penalty: float = Field(0.1, ge=0.0, description="Subtracted from a turn's score when its output "
                                                            "format is invalid (verl-agent: 0.1 ALFWorld/WebShop).")


class CreditConfig(BaseModel):
    """The method's own fields (e.g. ``credit.norm``) are checked against its ``Config`` model."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    name: str = Field("prover", description="Registered credit assigner (see `prover list`); ProVer by default.")


class JudgeConfig(BaseModel):
    """The judge's own fields (e.g. ``judge.fallback``) are checked against its ``Config`` model."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)
    name: str | None = Field("contrast", description="Registered judge, for credit methods that use one (ProVer): "
                             "contrast (free; reads the simulator's hidden state_key), text-contrast (free; "
                             "what the agent saw), random, or an LLM judge (litellm, local); null for none.")


class LearnerConfig(Section):
    lr: float = Field(1e-4, gt=0.0, description="AdamW learning rate (verl-agent: 1e-6 for 1.5B models; "
                                                "the tiny model needs far more).")
    weight_decay: float = Field(0.0, ge=0.0, description="AdamW weight decay.")
    autocast: Literal["off", "bfloat16"] = Field("off", description="Run the RL update's forward pass under "
                                                 "torch autocast in this dtype (weights and optimizer stay in "
                                                 "model.dtype): about half the time on CPUs with AVX512-BF16/AMX "
                                                 "and on GPUs, at the rounding of bfloat16 matrix products "
                                                 "(docs/perf.md, 'A real model').")
    clip_low: float = Field(0.2, ge=0.0, description="PPO ratio clip below 1 (verl-agent: 0.2).")
    clip_high: float = Field(0.2, ge=0.0, description="PPO ratio clip above 1 (verl-agent: 0.2; DAPO: 0.28).")
    dual_clip_c: float = Field(3.0, gt=1.0, description="Dual-clip bound for negative advantages (verl: 3.0).")
    kl_coef: float = Field(0.0, ge=0.0, description="Weight of the KL loss to the frozen initial policy "
                                                    "(verl-agent: 0.01); 0 skips the reference model.")
    kl_type: Literal["k1", "k2", "k3", "abs"] = Field("k3", description="KL estimator; k3 is verl's low_var_kl, "
                                                                          "clamped to [-10, 10].")
    entropy_coef: float = Field(0.0, ge=0.0, description="Entropy bonus weight (verl-agent yaml: 0.001).")
    loss_agg: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm",
                      "traj-mean-token-mean"] = Field(
        "traj-mean-token-mean", description="How per-token losses become one number: verl's loss_agg_modes "
        "over turn rows, or traj-mean-token-mean (ours), where every trajectory weighs the same however many "
        "turns it has, so long failed episodes do not push down the tokens every turn shares (verl-agent: "
        "token-mean).")
    grad_clip: float = Field(1.0, gt=0.0, description="Gradient norm clip (verl: 1.0).")
    ppo_epochs: int = Field(1, ge=1, description="Passes over each batch (verl-agent: 1).")
    mini_batch_rows: int = Field(128, ge=1, description="Turn rows per optimizer step; a sequence row counts "
                                 "as the turns it trains, and one of more turns than this is a step of its own.")
    micro_batch_rows: int = Field(32, ge=1, description="Turn rows per forward/backward (memory bound); a "
                                  "sequence row counts as the turns it trains, as in mini_batch_rows.")
    sequence_rows: bool = Field(True, description="Forward each run of append-only turns of a trajectory (each "
                                "turn's prompt + completion the exact start of the next turn's prompt, as chat "
                                "prompts are) once, as one sequence row that trains every turn's completion at "
                                "its own positions, instead of one row per turn; the same loss and gradient, "
                                "up to float rounding. Windowed prompts are never append-only: their rows "
                                "stay turn rows. The warm start's SFT does the same with its expert chats when "
                                "warmstart.prompt_loss_weight is 0. See prover/learning/learner_rows.py.")
    max_row_tokens: int | None = Field(None, ge=1, description="Cut a sequence row at turn boundaries into "
                                       "pieces that each add at most this many tokens to the piece before it; "
                                       "each piece re-forwards the pieces before it as context (more tokens are "
                                       "forwarded) and trains its own turns only. The pieces are rows of their "
                                       "own when the update's rows are shuffled into mini-batches: while they "
                                       "all fit one mini-batch (learner.mini_batch_rows) the gradient is the "
                                       "uncut row's, up to float rounding; past that, a trajectory's pieces can "
                                       "land in different optimizer steps and the mini-batches hold other "
                                       "turns, so the update differs. null: never cut.")
    engine_is_cap: float | None = Field(None, ge=1.0, description="Truncated importance sampling for the "
                                        "engine/learner mismatch (verl's tis_imp_ratio_cap): before the update the "
                                        "learner recomputes its own log-probs of the sampled tokens (no gradient) "
                                        "and uses them as PPO's old log-probs, and weighs each token's policy loss "
                                        "by min(exp(logp_learner - logp_engine), this cap). Costs one forward pass "
                                        "of the rows without a backward, unless the update is one optimizer step "
                                        "(one epoch, one mini-batch): then its own forward pass gives them. "
                                        "null: off, PPO's ratio is taken against "
                                        "the engine's log-probs. Worth 2.0 when the engine samples in another "
                                        "precision (model.engine_dtype=bfloat16) or with a stale policy "
                                        "(rollout.max_off_policy_steps); learner/engine_abs_log_rho shows the "
                                        "mismatch (docs/concepts.md).")
    frozen_bf16: bool = Field(True, description="With learner.autocast=bfloat16: cast each frozen linear weight "
                              "(LoRA's base layers, an LM head that does not train) to bfloat16 once and multiply "
                              "by that copy, instead of autocast casting it again at every forward pass. Bit for "
                              "bit the same products, loss and gradient; the copies hold half the frozen weights' "
                              "float32 size between updates (prover/learning/frozen_weights.py).")
    gradient_checkpointing: bool = Field(False, description="Keep only each decoder layer's input through the "
                                         "forward pass and recompute the layer in the backward: the update's "
                                         "activation memory falls from every layer's to one layer's, for one "
                                         "more forward pass of time; the same gradient up to float rounding. For "
                                         "long chats where memory is the bound (docs/pretrained-policy.md "
                                         "measures both: 13-47% less peak memory for 1.2-1.5x the time).")
    skip_zero_advantage_rows: bool = Field(True, description="Leave out rows whose advantage is zero on every token "
                                                             "(their policy gradient is zero; saves CPU time).")
    max_nonfinite_steps: int = Field(3, ge=1, description="A non-finite advantage drops its row, a non-finite loss "
                                     "or gradient skips its optimizer step (learner/nonfinite_*); after this many "
                                     "steps in a row with one, the run stops with one line.")


TINY_WARMSTART_LR, PRETRAINED_WARMSTART_LR = 1e-3, 1e-5


class WarmStartConfig(Section):
    enabled: bool = Field(True, description="Behaviour-clone expert episodes before RL.")
    episodes: int = Field(1000, ge=1, description="Expert episodes to clone (train split); many distinct "
                          "episodes teach a tiny model to copy from its prompt faster than many epochs.")
    random_action_share: float = Field(0.1, ge=0.0, le=1.0, description="Share of turns whose target is a random "
                                       "admissible action, so the clone starts at middling success.")
    epochs: int = Field(2, ge=1, description="Passes over the cloned turns.")
    prompt_loss_weight: float = Field(1.0, ge=0.0, description="Weight of the prompt tokens in the SFT loss "
                                      "(completion tokens weigh 1); a tiny model learns the env's text, and to "
                                      "copy from it, far faster with it on. Use 0 for a pretrained model.")
    lr: float | None = Field(None, gt=0.0, description="SFT learning rate; null: 1e-3 for the tiny model (it "
                             "learns the env's text from scratch), 1e-5 for a pretrained checkpoint (1e-3 wrecks "
                             "what it knows).")
    batch_rows: int = Field(8, ge=1, description="Turn rows per SFT optimizer step (small batches: more "
                            "updates for the same compute).")


def warmstart_lr(warmstart: WarmStartConfig, model_path: str) -> float:
    """The warm start's learning rate: as set, else the default for a tiny model or a checkpoint."""
    default = TINY_WARMSTART_LR if model_path == "tiny" else PRETRAINED_WARMSTART_LR
    return default if warmstart.lr is None else warmstart.lr


class EvalConfig(Section):
    episodes: int = Field(96, ge=1, description="Held-out episodes per evaluation (one per task).")
    split: str = Field("test", description="Env split to evaluate on (alfworld-sim: 'test' = unseen layouts).")
    temperature: float = Field(1.0, ge=0.0, description="Sampling temperature at evaluation (verl-agent: 0.4).")
    every: int = Field(0, ge=0, description="Also evaluate every N steps; 0 only before and after RL.")
    cache_dir: str | None = Field(None, description="A folder that keeps the starting policy's evaluation by the "
                                  "digest of its weights and the settings that decide it, so a run from the same "
                                  "policy and settings reads it instead of sampling it again (the bench sets it "
                                  "for cells sharing a warm start); null keeps none. See prover/rundir/eval_cache.py.")


class RunConfig(Section):
    dir: str = Field("runs/default", description="Run folder: metrics.jsonl, config.yaml, checkpoints, models.")
    checkpoint_every: int = Field(1, ge=1, description="Save a checkpoint every N steps.")
    keep_checkpoints: int = Field(2, ge=1, description="Checkpoints kept on disk (oldest deleted first).")
    save_groups: int = Field(2, ge=0, description="Rollout groups per step kept as text in groups.jsonl for "
                             "`prover view` (those with a judge's proposal first); 0 keeps none.")
    report_to: list[Literal["tensorboard", "wandb", "mlflow", "trackio"]] = Field(default_factory=list, description=
        "Experiment trackers that also get every metrics.jsonl row and the config, e.g. [tensorboard,wandb] or "
        "tensorboard; each needs its extra (pip install 'prover-rl[tensorboard]'); --resume continues the same "
        "tracker runs (ids kept in <run.dir>/trackers.json); see prover/rundir/trackers.py.")

    @field_validator("dir")
    @classmethod
    def _named_folder(cls, v: str) -> str:
        if not v.strip():  # an empty name would mean the current folder, whose files a fresh run moves aside
            raise ValueError("run.dir is empty; name the run's folder, e.g. run.dir=runs/my-run")
        return v

    @field_validator("report_to", mode="before")
    @classmethod
    def _one_or_many(cls, v: object) -> object:
        return [v] if isinstance(v, str) else v  # run.report_to=tensorboard names one tracker


class TrainConfig(Section):
    seed: RunSeed = Field(0, description="Seeds tasks, sampling, model init and the tiny tokenizer's corpus "
                          f"({RUN_SEED_RULE}).")
    steps: int = Field(12, ge=0, description="RL steps (the ProVer paper used 100).")
    threads: int | None = Field(None, ge=1, description="torch CPU threads for the warm start, training and "
                                "evaluation. null: as OMP_NUM_THREADS or MKL_NUM_THREADS say when set, else 1 "
                                "for a model of hidden size up to 256 (the tiny one: its matrices are too small "
                                "to split, and on a shared CPU the threads wait for each other; docs/perf.md, "
                                "The limit), else torch's default, one per core.")
    env: EnvConfig = Field(default_factory=EnvConfig, description="Which environment.")
    model: ModelConfig = Field(default_factory=ModelConfig, description="Which policy model.")
    engine: EngineConfig = Field(default_factory=EngineConfig, description="Which inference engine.")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig, description="How episodes are collected.")
    reward: RewardConfig = Field(default_factory=RewardConfig, description="How env outcomes become scores.")
    credit: CreditConfig = Field(default_factory=CreditConfig, description="How scores become per-token advantages.")
    judge: JudgeConfig = Field(default_factory=JudgeConfig, description="The judge, for methods that use one.")
    learner: LearnerConfig = Field(default_factory=LearnerConfig, description="The policy-gradient update.")
    warmstart: WarmStartConfig = Field(default_factory=WarmStartConfig, description="SFT before RL.")
    eval: EvalConfig = Field(default_factory=EvalConfig, description="Held-out evaluation.")
    run: RunConfig = Field(default_factory=RunConfig, description="Where results go.")
