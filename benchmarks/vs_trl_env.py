"""TRL's side of benchmarks/bench_env_vs_trl.py: GRPOTrainer with `environment_factory`, on a clock.

    python benchmarks/vs_trl_env.py SPEC.json RESULT.json      # the bench runs it in a child process

`train_trl_env(spec)` trains TRL 1.16's GRPOTrainer on the spec's environment class (the same
`package.module:Class` the workbench run loads), rows (the workbench task's training split, TRL's
conversational rows: every column reaches `reset(**row)`), model folder and chat template (a .jinja
file set on the tokenizer: TRL refuses SmolLM2's own, it has no tool role), with the GRPOConfig of
`trl_env_args(spec)`. It stops after the step whose training clock first reaches `budget_s` (that
step saved), or at `max_steps`. RESULT.json holds

    {"seconds": {step: s}, "checkpoints": {step: folder}, "saves_s": s, "startup_s": s, "steps": n,
     "log": [{step, reward, tools/call_frequency, ...}], "prompt_check": {...}, "error": null | "one line"}

`seconds` is the training clock at each step (vs_trl.step_clock: from `on_train_begin`, the checkpoint
saves taken out), `startup_s` this process's seconds before that clock began. `prompt_check` holds the
token ids TRL renders for the spec's `check_rows` (as its environment loop does: reset's text appended
to the last message, then `_tokenize_prompts` with the tools) and the ids it appends after a tool
call (`_get_tool_suffix_ids`), for the bench to compare with the workbench's. With `"check_only":
true` in the spec the trainer is built, the check made and nothing trained.

Imports of trl stay inside the functions: `trl_env_args` is plain data (tests/test_bench_env_vs_trl.py).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Optional

T_START = time.perf_counter()  # this process's start: its start-up ends at on_train_begin

from vs_trl import step_clock, where_in_trl  # noqa: E402  (benchmarks/ is the script's folder)

from workbench.errors import one_line  # noqa: E402

LOG_KEYS = ("reward", "reward_std", "tools/call_frequency", "tools/failure_frequency", "completions/mean_length",
            "completions/clipped_ratio", "step_time", "loss", "grad_norm")  # fmt: skip
SUFFIX_PROBE = {"role": "tool", "name": "add", "content": "68"}  # a tool result, as TRL's loop appends one


def trl_env_args(spec: dict) -> dict[str, Any]:
    """GRPOConfig's keyword arguments for `spec`. One optimizer step takes `prompts` x `generations`
    episodes from one generation batch, trained in micro-batches of `micro_batch` sequences
    (gradient accumulation; CISPO's loss is normalised by the whole generation batch's tokens, so
    that is one batch). Each generation call samples at most `turn_tokens` (generation_kwargs'
    max_new_tokens: the workbench's generation.max_new_tokens per turn), the whole completion after
    the prompt (sampled and tool tokens) at most `completion_tokens`, and `max_turns` - 1 tool rounds
    (max_tool_calling_iterations = k allows k + 1 generations, the workbench's env.max_turns).
    The rest is vs_trl.trl_config's: CISPO capped at `eps_max`, batch-normalised advantages, no KL,
    AdamW and a constant rate as the workbench run has them, temperature 1, fp32 on the CPU, a
    checkpoint every `save_steps` (the model only)."""
    batch = spec["prompts"] * spec["generations"]
    micro = spec["micro_batch"]
    if batch % micro:
        raise ValueError(f"micro_batch {micro} does not divide the batch of {batch} sequences")
    return dict(
        output_dir=spec["out"], seed=spec["seed"], max_steps=spec["max_steps"], use_cpu=True, bf16=False,
        loss_type="cispo", epsilon_high=spec["eps_max"], scale_rewards="batch", beta=0.0, num_iterations=1,
        num_generations=spec["generations"], per_device_train_batch_size=micro, gradient_accumulation_steps=batch // micro,
        max_completion_length=spec["completion_tokens"], max_tool_calling_iterations=spec["max_turns"] - 1,
        generation_kwargs={"max_new_tokens": spec["turn_tokens"]}, temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=spec["weight_decay"],
        adam_epsilon=spec["adam_eps"], adam_beta1=spec["adam_betas"][0], adam_beta2=spec["adam_betas"][1],
        max_grad_norm=spec["grad_clip"], save_strategy="steps", save_steps=spec["save_steps"], save_only_model=True,
        logging_steps=1, report_to="none", disable_tqdm=True, dataloader_num_workers=0,
    )  # fmt: skip


def budget_stop(clock: Any, budget_s: Optional[float]) -> Any:
    """A TrainerCallback (after `clock`, a vs_trl.step_clock) that ends training after the first step
    whose training clock reaches `budget_s`, and saves that step (its checkpoint is the last point)."""
    from transformers import TrainerCallback

    class BudgetStop(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001 - transformers' callback signature
            if budget_s is not None and clock.seconds.get(int(state.global_step), 0.0) >= budget_s:
                control.should_training_stop = True
                control.should_save = True
            return control

    return BudgetStop()


def tokenizer_with_template(model: str, template: str) -> Any:
    """The model folder's tokenizer with the chat template of the file `template` (its text exactly:
    TRL recognises a template by identity, to pick its response parser)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model, local_files_only=True)
    tok.chat_template = Path(template).read_text(encoding="utf-8")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def prompt_check(trainer: Any, factory: Any, rows: list[dict]) -> dict[str, Any]:
    """The ids TRL renders for `rows` as its environment loop renders them (an instance's reset(**row)
    text appended to the last message's content, then `_tokenize_prompts` with the tools) and the ids
    it appends after a tool result (`_get_tool_suffix_ids`). Private methods of GRPOTrainer 1.16: a
    failure is said in `error`, not raised."""
    try:
        prompts = []
        for row in rows:
            prompt = copy.deepcopy(row["prompt"])
            observation = factory().reset(**row)
            if isinstance(observation, str):
                prompt[-1]["content"] += observation
            prompts.append(prompt)
        trainer._batch_environments = [None] * len(prompts)  # the single factory's name
        ids, _, _ = trainer._tokenize_prompts(prompts)
        suffix = trainer._get_tool_suffix_ids([dict(SUFFIX_PROBE)])
        return {"prompt_ids": [[int(t) for t in p] for p in ids], "suffix_ids": [int(t) for t in suffix], "error": None}
    except Exception as e:  # noqa: BLE001 - a check beside the run: its failure is reported, the run goes on
        return {"prompt_ids": [], "suffix_ids": [], "error": f"{type(e).__name__}: {one_line(e)[:300]}"}


def step_log(history: list[dict]) -> list[dict]:
    """TRL's per-step log rows (those with a step's reward), trimmed to LOG_KEYS."""
    return [{"step": int(r["step"]), **{k: float(r[k]) for k in LOG_KEYS if k in r}} for r in history if "reward" in r and "step" in r]


def train_trl_env(spec: dict) -> dict:
    """Train with TRL as `spec` says (see env_trl_sides.trl_spec); its clock, checkpoints and log."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory's "experimental" banner
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from workbench.configtools import import_spec

    torch.set_num_threads(spec["threads"])
    factory = import_spec(spec["env"], "task.env")
    clock = step_clock()
    trainer = GRPOTrainer(model=spec["model"], processing_class=tokenizer_with_template(spec["model"], spec["chat_template"]),
                          args=GRPOConfig(**trl_env_args(spec)), train_dataset=Dataset.from_list(spec["train"]),
                          environment_factory=factory, callbacks=[clock, budget_stop(clock, spec.get("budget_s"))])  # fmt: skip
    check = prompt_check(trainer, factory, spec.get("check_rows") or [])
    if spec.get("check_only"):
        return {"seconds": {}, "checkpoints": {}, "saves_s": 0.0, "startup_s": None, "steps": 0, "log": [],
                "prompt_check": check, "error": None}  # fmt: skip
    trainer.train()
    out = Path(spec["out"])
    checkpoints = {int(p.name.split("-")[1]): str(p) for p in out.glob("checkpoint-*") if (p / "config.json").is_file()}
    return {"seconds": clock.seconds, "checkpoints": checkpoints, "saves_s": clock.saving,
            "startup_s": clock.t0 - T_START if clock.t0 else None, "steps": int(trainer.state.global_step),
            "log": step_log(trainer.state.log_history), "prompt_check": check, "error": None}  # fmt: skip


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    try:
        result = train_trl_env(spec)
    except Exception as e:  # noqa: BLE001 - any failure is that side's one line, not the bench's end
        traceback.print_exc()
        result = {"seconds": {}, "checkpoints": {}, "saves_s": 0.0, "startup_s": None, "steps": 0, "log": [],
                  "prompt_check": None, "error": f"{type(e).__name__}: {one_line(e)[:300]}{where_in_trl(e)}"}  # fmt: skip
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
