"""workbench.tracking"""
