"""TRL's side of benchmarks/bench_vs_trl.py, and the reward function both sides share.

- `sum_correct`: the reward, written the way TRL users write one. TRL calls it as
  `reward_funcs=[sum_correct]`; the workbench run as `reward.functions: [{fn: vs_trl:sum_correct}]`
  (the only function: it decides pass / fail, no flag; its Ray workers import it through
  PYTHONPATH, which the bench sets to benchmarks/).
- `train_trl(spec)`: TRL's GRPOTrainer on the spec's model and prompts (loss_type "cispo"), a
  checkpoint at each evaluation step, and the training wall time at each step with the checkpoint
  saves taken out. The bench runs it in a child process, `python benchmarks/vs_trl.py SPEC.json
  RESULT.json`, so that a crash (vLLM colocated on a CPU) costs that side only; the result holds
  `{"seconds": {step: s}, "checkpoints": {step: folder}, "saves_s": s, "error": null | "one line"}`:
  `seconds` is TRL's training clock (from `on_train_begin`, the saves taken out: the bench takes the
  workbench's out too), `saves_s` the seconds taken out.

Imports of trl stay inside `train_trl`: the Ray workers that import `sum_correct` never load it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from workbench.errors import one_line
from workbench.rl.answers import canonical_number, find_answer
from workbench.rl.reward_functions import completion_text


def sum_correct(prompts: list, completions: list, answer: list, **kwargs: Any) -> list[float]:
    """+1.0 when the completion's last number is the answer, else -1.0 (a value > 0 passes)."""
    return [1.0 if find_answer(completion_text(c), "last_number") == (canonical_number(str(a)) or str(a)) else -1.0
            for c, a in zip(completions, answer)]  # fmt: skip


def trl_config(spec: dict) -> Any:
    """The GRPOConfig of the spec: one optimizer step takes `prompts` x `generations` completions in
    one generation batch and one micro-batch, as a workbench step does; AdamW and the rate as the
    workbench run has them (no warm-up, constant); CISPO capped at `eps_max` with batch-normalised
    advantages (the workbench recipe's), and a checkpoint every `save_steps` (and at the end)."""
    from trl import GRPOConfig

    batch = spec["prompts"] * spec["generations"]
    vllm = {"use_vllm": True, "vllm_mode": "colocate", "vllm_max_model_length": spec["max_model_len"]} if spec["vllm"] else {}
    return GRPOConfig(
        output_dir=spec["out"], seed=spec["seed"], max_steps=spec["steps"], use_cpu=True, bf16=False,
        loss_type="cispo", epsilon_high=spec["eps_max"], scale_rewards="batch", beta=0.0, num_iterations=1,
        num_generations=spec["generations"], per_device_train_batch_size=batch, gradient_accumulation_steps=1,
        max_completion_length=spec["tokens"], temperature=1.0, top_p=1.0, top_k=0,
        learning_rate=spec["lr"], lr_scheduler_type="constant", warmup_steps=0, weight_decay=spec["weight_decay"],
        adam_epsilon=spec["adam_eps"], adam_beta1=spec["adam_betas"][0], adam_beta2=spec["adam_betas"][1],
        max_grad_norm=spec["grad_clip"], save_strategy="steps", save_steps=spec["save_steps"], save_only_model=True,
        logging_steps=1, report_to="none", disable_tqdm=True, dataloader_num_workers=0, **vllm,
    )  # fmt: skip


def step_clock() -> Any:
    """A TrainerCallback that keeps the training wall time at each optimizer step, less the
    checkpoint saves: they stop TRL's training only because the bench scores TRL from them (the
    bench takes the workbench's saves out of its clock too, and scores both after their runs)."""
    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = self.ended = 0.0
            self.saving = 0.0  # seconds spent saving checkpoints so far
            self.seconds: dict[int, float] = {}

        def on_train_begin(self, args, state, control, **kw):  # noqa: ANN001 - transformers' callback signature
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):  # noqa: ANN001
            self.ended = time.perf_counter()
            self.seconds[int(state.global_step)] = self.ended - self.t0 - self.saving

        def on_save(self, args, state, control, **kw):  # noqa: ANN001 - called right after the checkpoint is written
            self.saving += time.perf_counter() - self.ended

    return StepClock()


def train_trl(spec: dict) -> dict:
    """Train with TRL as `spec` says (see bench_vs_trl.trl_spec); its step times and checkpoints."""
    import torch
    from datasets import Dataset
    from trl import GRPOTrainer

    torch.set_num_threads(spec["threads"])
    clock = step_clock()
    trainer = GRPOTrainer(model=spec["model"], reward_funcs=[sum_correct], args=trl_config(spec),
                          train_dataset=Dataset.from_list(spec["train"]), callbacks=[clock])  # fmt: skip
    trainer.train()
    out = Path(spec["out"])
    checkpoints = {int(p.name.split("-")[1]): str(p) for p in out.glob("checkpoint-*") if (p / "config.json").is_file()}
    return {"seconds": clock.seconds, "checkpoints": checkpoints, "saves_s": clock.saving, "error": None}


def where_in_trl(e: BaseException) -> str:
    """' (in trl's FUNCTION, FILE:LINE)': the deepest frame of TRL's own code the error passed, or ''."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f"{os.sep}trl{os.sep}" in f.filename]
    if not frames:
        return ""
    f = frames[-1]
    return f" (in trl's {f.name}, {f.filename.split(f'{os.sep}trl{os.sep}')[-1]}:{f.lineno})"


def main(argv: list[str]) -> int:
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    try:
        result = train_trl(spec)
    except Exception as e:  # noqa: BLE001 - any failure (vLLM on a CPU) is that side's one line, not the bench's end
        traceback.print_exc()
        result = {"seconds": {}, "checkpoints": {}, "saves_s": 0.0, "error": f"{type(e).__name__}: {one_line(e)[:300]}{where_in_trl(e)}"}
    Path(result_path).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
