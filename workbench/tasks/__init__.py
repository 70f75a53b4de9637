"""workbench.tasks"""
