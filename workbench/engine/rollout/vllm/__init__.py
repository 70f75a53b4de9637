"""workbench.engine.rollout.vllm: the vLLM rollout backend."""
