"""workbench.rl"""
