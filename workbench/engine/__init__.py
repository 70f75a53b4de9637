"""workbench.engine"""
