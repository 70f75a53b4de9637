"""workbench.scaling"""
