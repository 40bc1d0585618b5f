"""Fused kernels: the kernel IR (ir.py), lowering of fusion groups (lower.py) and the
renderer table + C renderer (render.py). See docs/fused_kernels.md."""
