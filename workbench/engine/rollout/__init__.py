"""workbench.engine.rollout: rollout workers (generators, evaluator) and their torch and vLLM backends."""
