"""workbench.engine.run: the run loop (coordinator), its actors, accounting, launch and `workbench run`."""
