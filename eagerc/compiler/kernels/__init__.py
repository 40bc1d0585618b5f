"""Fused kernels (compiler part): lowering of fusion groups (lower.py) and the CUDA renderer
(cuda_render.py); the kernel IR and the C renderer they build on live in the runtime layer
(eagerc/runtime/kernels/), shared with eager mode. See docs/fused_kernels.md."""
