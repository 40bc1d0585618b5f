"""Kernel code generation shared by eager mode and the compiler: the kernel IR (ir.py), the
renderer table + C renderer (render.py), Philox RNG source (philox.py), and the eager
builder (eager.py). Pure codegen: numpy and the standard library only."""
