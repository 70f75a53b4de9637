"""workbench.engine.model: the policy model. `load` (load_policy, resolved_model), `builtin` (the
tiny GPT, its SFT warm-up and cache), `hf_dir` (local HF folders and their tokenizers), `gguf` (a GGUF file
converted once to an HF folder; `workbench model import`: model_command), `forward`
and `policy` (the body over packed rows; `PolicyForward`, the trainer's forward pass),
`sampling` (the decode loop, pass rates), `devices` (devices and dtypes), `logs` (quiet HF logs)."""
