"""workbench.widgets"""
