"""workbench.engine.plan: will a run fit? GPU (or host) memory per device and role, from config.json alone
(or a GGUF file's header: nothing is converted).

- `memory`: the arithmetic (parameter counts, the trainer's and the generator's terms; formulas in
  its docstring) and the plan as text (format_plan), pure Python. `fit`: roles placed on devices,
  budgets, the verdict and its fix. `lora`: a `model.lora` run's adapters and vLLM's LoRA buffers.
- `build`: a RunConfig + cluster shape -> Plan; `guard(cfg)` refuses a launch that does not fit.
- `sources`: what the plan reads, never waiting on the network: config.json (a folder, a file, the
  HF cache; a .gguf file's header) and the longest prompt (given, the task's cached prompts, or the model's bound).
- `plan_command`: `workbench plan`. In a notebook: `Session.plan()`.

    from workbench.engine.plan import plan_for, cluster_shape
    print(plan_for(cfg, cluster_shape(gpus_per_node=8, gpu_memory_gb=80)))
"""

from workbench.engine.plan.build import cluster_shape, guard, plan_for
from workbench.engine.plan.memory import Cluster, ModelShape, Plan, Settings

__all__ = ["Cluster", "ModelShape", "Plan", "Settings", "cluster_shape", "guard", "plan_for"]
