"""`workbench export`: a run's trained policy as a Hugging Face folder (runs/export.py does the work).

    workbench export runs/my-run --out policies/my-run            # the last checkpoint
    workbench export runs/my-run --step 400 --out policies/step400

Every step a checkpoint was saved at exports: the last `checkpoint.keep` from their full state, the
older ones from the policy snapshot their pruning left. The folder holds safetensors in the model's own dtype, config.json, generation_config.json and the
tokenizer: transformers, vLLM and `huggingface-cli upload` take it as it is. FSDP-sharded
checkpoints export like one-worker ones. A finished run has already exported its final policy to
<run>/policy/ (unless checkpoint.export_policy is false). A `model.lora` run exports its merged policy
the same way, or with `--adapter` the adapter alone in PEFT's layout (peft.PeftModel.from_pretrained).
"""

from __future__ import annotations

import argparse
from typing import Any

EXAMPLES = """examples:
  workbench export runs/quickstart --out policies/quickstart
  workbench export runs/quickstart --step 400 --out policies/quickstart-400"""


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="write a run's policy as a Hugging Face folder (safetensors, config, tokenizer)",
                       description="Write the policy of one of a run's checkpoints (default: the last) as a Hugging "
                                   "Face folder that transformers and vLLM load, in the model's own dtype.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("run", metavar="RUN", help="the run folder (or a run name under <project>/runs/)")
    p.add_argument("--step", type=int, default=None, help="the checkpoint's step, any step one was saved at (default: the latest)")
    p.add_argument("--out", default=None, help="the folder to write (default: RUN/policy, RUN/adapter with --adapter); an earlier export there is replaced")
    p.add_argument("--adapter", action="store_true",
                   help="a model.lora run: write the LoRA adapter alone in PEFT's layout (adapter_config.json, "
                        "adapter_model.safetensors) instead of the merged policy")  # fmt: skip
    return p


def run(args: argparse.Namespace) -> int:
    from workbench.runs.export import export_policy

    print(export_policy(args.run, args.out, step=args.step, adapter=args.adapter))
    return 0
