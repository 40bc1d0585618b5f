"""Optimizer updates written with Tensor ops, used while a compiled training step is traced.

Eager steps update raw arrays in place (fast, invisible to a tracer). Under tracing the
same rules run as recorded in-place Tensor ops, so the compiled graph updates
parameters and optimizer state through explicit mutation outputs. The first step
creates the optimizer's state, so it runs eagerly and the next call is traced
(`tracer.retry`): the compiled graph then always reads the state it updates.
"""
from .. import dispatch
from ..autograd.grad_mode import no_grad


def needs_state(opt, key):
    """True (after asking the tracer to retry later) if some parameter has no state yet."""
    for group in opt.param_groups:
        for p in group["params"]:
            if p.grad is not None and key not in opt.state[p]:
                dispatch.active_tracer().retry(f"{type(opt).__name__}.step creates its state on the first step")
                return True
    return False


def _grad(p, wd, maximize):
    g = p.grad
    if maximize:
        g = -g
    if wd:
        g = g + p * wd
    return g


@no_grad()
def sgd_step(opt):
    for group in opt.param_groups:
        lr, momentum, dampening = group["lr"], group["momentum"], group["dampening"]
        wd, nesterov, maximize = group["weight_decay"], group["nesterov"], group["maximize"]
        for p in group["params"]:
            if p.grad is None:
                continue
            g = _grad(p, wd, maximize)
            if momentum:
                b = opt.state[p]["momentum_buffer"]
                b.mul_(momentum).add_(g * (1 - dampening) if dampening else g)
                g = g + b * momentum if nesterov else b
            p.sub_(g * lr)


@no_grad()
def adam_step(opt, decoupled):
    for group in opt.param_groups:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        wd, amsgrad, maximize = group["weight_decay"], group["amsgrad"], group["maximize"]
        for p in group["params"]:
            if p.grad is None:
                continue
            state = opt.state[p]
            step = state["step"]
            step.add_(1)
            if decoupled:
                if wd:
                    p.mul_(1 - lr * wd)
                g = _grad(p, 0, maximize)
            else:
                g = _grad(p, wd, maximize)
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m.mul_(beta1).add_(g * (1 - beta1))
            v.mul_(beta2).add_(g * g * (1 - beta2))
            if amsgrad:
                vmax = state["max_exp_avg_sq"]
                vmax.copy_(vmax.maximum(v))
                v = vmax
            # the eager rule's arithmetic, in the same order (bias terms in float64, like its
            # Python floats), so compiled and eager steps agree to the last bits
            t = step.double()
            bias1 = 1 - beta1 ** t
            bias2_sqrt = (1 - beta2 ** t).sqrt()
            denom = v.sqrt() + bias2_sqrt * eps
            p.sub_(m / denom * (bias2_sqrt * lr / bias1))
