"""Run popular third-party PyTorch programs on eagerc, with `torch` aliased to it, stage by stage.

    python tools/run_third_party.py SRC                 # every program found under SRC
    python tools/run_third_party.py SRC nanoGPT makemore  # some of them
    python tools/run_third_party.py SRC -v               # and show each failing stage's output tail

SRC is a folder you fill with the programs' own sources (no network here: this script never
downloads, and the test suite does not run it); each program is looked for in its folder:

    SRC/input.txt                      any text of ~100 KB+ (the char-level programs' data)
    SRC/nanoGPT/                       model.py train.py sample.py configurator.py
                                       data/shakespeare_char/prepare.py      (karpathy/nanoGPT)
    SRC/ng-video-lecture/              gpt.py bigram.py                      (karpathy/ng-video-lecture)
    SRC/minGPT/                        mingpt/{model,trainer,utils}.py projects/adder/adder.py
    SRC/makemore/                      makemore.py                           (karpathy/makemore)
    SRC/word_language_model/           main.py model.py data.py generate.py  (pytorch/examples)
    SRC/mnist/                         main.py                               (pytorch/examples)
    SRC/time_sequence_prediction/      generate_sine_wave.py train.py        (pytorch/examples)
    SRC/llama2.c/                      model.py export.py                    (karpathy/llama2.c)

Each program is copied to a scratch folder and run with tiny settings (a few iterations, small
sizes, CPU) through `python -m eagerc.alias`; a stage passes when its command exits 0 and its
check holds. docs/pytorch_compat.md keeps the table this prints.

No name of PyTorch's is stubbed: the programs run on eagerc as it is. Packages that are not
PyTorch's get stand-ins (`FAKES`): mnist a minimal
`torchvision` (datasets.MNIST with synthetic digits, transforms.Compose/ToTensor/Normalize),
time_sequence_prediction a do-nothing `matplotlib` where none is installed.
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TORCHVISION = {  # a minimal torchvision for mnist/main.py: synthetic digits, no download
    "torchvision/__init__.py": "from . import datasets, transforms\n",
    "torchvision/transforms.py": textwrap.dedent('''
        import numpy as np, torch
        class Compose:
            def __init__(self, ts): self.ts = ts
            def __call__(self, x):
                for t in self.ts: x = t(x)
                return x
        class ToTensor:
            def __call__(self, img): return torch.from_numpy(np.asarray(img, np.float32)[None] / 255.0)
        class Normalize:
            def __init__(self, mean, std): self.mean, self.std = mean[0], std[0]
            def __call__(self, x): return (x - self.mean) / self.std
    '''),
    "torchvision/datasets.py": textwrap.dedent('''
        import numpy as np
        class MNIST:
            """Synthetic 28x28 'digits': class k is a bright bar at row 2k+4, plus noise."""
            def __init__(self, root, train=True, download=False, transform=None):
                n = 512 if train else 128
                rng = np.random.default_rng(0 if train else 1)
                self.targets = rng.integers(0, 10, n)
                self.data = (rng.random((n, 28, 28)) * 60).astype(np.uint8)
                for i, k in enumerate(self.targets):
                    self.data[i, 2 * k + 4: 2 * k + 6, 4:24] = 255
                self.transform = transform
            def __len__(self): return len(self.targets)
            def __getitem__(self, i):
                x = self.data[i]
                return (self.transform(x) if self.transform else x), int(self.targets[i])
    '''),
}

MATPLOTLIB = {  # a do-nothing matplotlib for time_sequence_prediction when none is installed
    "matplotlib/__init__.py": "def use(backend): pass\n",
    "matplotlib/pyplot.py": textwrap.dedent('''
        def _noop(*a, **k): pass
        figure = title = xlabel = ylabel = xticks = yticks = plot = close = _noop
        def savefig(path, *a, **k): open(path, "wb").close()
    '''),
}

# program -> stand-ins for third-party packages it imports that are not PyTorch's (written only when
# the real package is not installed; torchvision always, as the real one would import the real torch)
FAKES = {"mnist": (None, TORCHVISION), "time_sequence_prediction": ("matplotlib", MATPLOTLIB)}


def _aliased(script, *args):
    """The command running `script` with torch aliased to eagerc."""
    boot = (f"import sys; sys.path.insert(0, {ROOT!r}); import eagerc.alias as a; a.install(); "
            f"a.run(sys.argv[1], sys.argv[2:])")
    return [sys.executable, "-c", boot, script, *args]


def _snippet(code):
    """A stage written as Python run in the program's folder, with torch aliased."""
    return [sys.executable, "-c", f"import sys; sys.path.insert(0, {ROOT!r}); sys.path.insert(0, '.'); import eagerc.alias as a; "
            f"a.install(); exec({textwrap.dedent(code)!r})"]


# `same_as_torch(model, run)` for a comparison stage: the stage's code runs twice, first under the
# real PyTorch (it saves the model's state dict and run(model)'s named outputs), then under eagerc
# (it loads that state dict and compares its outputs to PyTorch's).
COMPARE = textwrap.dedent('''
    import os, numpy as np, torch
    def same_as_torch(model, run, tag="", rtol=2e-4, atol=2e-5):
        side = os.environ["HARNESS_SIDE"]
        if side == "torch":
            np.savez(f"_sd{tag}.npz", **{k: v.detach().numpy() for k, v in model.state_dict().items()})
        else:
            model.load_state_dict({k: torch.tensor(v) for k, v in np.load(f"_sd{tag}.npz").items()})
        out = {k: v.detach().numpy() for k, v in run(model).items()}
        if side == "torch":
            np.savez(f"_out{tag}.npz", **out)
            return
        ref = np.load(f"_out{tag}.npz")
        for k in ref.files:
            np.testing.assert_allclose(out[k], ref[k], rtol=rtol, atol=atol, err_msg=k)
            print(f"{tag} {k}: max |eagerc - torch| = {np.abs(out[k] - ref[k]).max():.2e}")
''')


def _vs_torch(code):
    """A comparison stage (COMPARE): run `code` under PyTorch, then under eagerc; None without torch."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        return None
    code = textwrap.dedent(code)
    ref = f"import sys; sys.path.insert(0, '.'); exec({COMPARE!r}); exec({code!r})"
    return ["sh", "-c", f'HARNESS_SIDE=torch "$0" -c "$1" && HARNESS_SIDE=eagerc "$0" -c "$2"',
            sys.executable, ref, _snippet(COMPARE + code)[2]]


def exists(*paths):
    """Check: the stage exited 0 and wrote these files."""
    return lambda d, out, rc: rc == 0 and all(os.path.exists(os.path.join(d, p)) for p in paths)


def printed(text):
    """Check: the run printed `text` (a stage reached inside one script run, whatever came after)."""
    return lambda d, out, rc: text in out


SAME_RUN = "same run"  # a stage judged on the previous stage's run (with a `printed` check)


def shrink(path, **values):
    """Setup: set top-level hyperparameters `name = value` in a copied script that has no CLI for them."""
    def apply(cwd):
        import re
        file = os.path.join(cwd, path)
        with open(file) as f:
            text = f.read()
        for name, value in values.items():
            text, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", text, count=1, flags=re.M)
            assert n == 1, f"{path} has no top-level `{name} = ...` to shrink"
        with open(file, "w") as f:
            f.write(text)
    return apply


# program -> (files that must be in SRC/<program>, setup commands, [(stage, command, check or None)])
# A stage's command is a list (argv); `check(workdir)` runs after it exits 0.
PROGRAMS = {}

NANO_TINY = ["--dataset=shakespeare_char", "--device=cpu", "--dtype=float32", "--eval_iters=2",
             "--log_interval=1", "--block_size=32", "--batch_size=4", "--n_layer=2", "--n_head=2",
             "--n_embd=32", "--dropout=0.1", "--gradient_accumulation_steps=2", "--warmup_iters=2",
             "--lr_decay_iters=8"]
PROGRAMS["nanoGPT"] = (
    ["model.py", "train.py", "sample.py", "configurator.py", "data/shakespeare_char/prepare.py"],
    [["cp", "../input.txt", "data/shakespeare_char/input.txt"],
     [sys.executable, "data/shakespeare_char/prepare.py"]],
    [("import model.py", _snippet("import model"), None),
     ("build GPT", _snippet("""
        from model import GPT, GPTConfig
        m = GPT(GPTConfig(block_size=16, vocab_size=65, n_layer=2, n_head=2, n_embd=32))
        assert sum(p.numel() for p in m.parameters()) > 0"""), None),
     ("forward + backward", _snippet("""
        import torch
        from model import GPT, GPTConfig
        m = GPT(GPTConfig(block_size=16, vocab_size=65, n_layer=2, n_head=2, n_embd=32, dropout=0.1))
        x, y = torch.randint(65, (2, 16)), torch.randint(65, (2, 16)); logits, loss = m(x, y)
        loss.backward(); assert m.lm_head.weight.grad is not None and abs(loss.item() - 4.17) < 0.3"""), None),
     ("same as PyTorch (loss, logits, grads)", _vs_torch("""
        from model import GPT, GPTConfig
        m = GPT(GPTConfig(block_size=16, vocab_size=65, n_layer=2, n_head=2, n_embd=32, dropout=0.0))
        rng = np.random.default_rng(0)
        x, y = (torch.tensor(rng.integers(0, 65, (2, 16))) for _ in range(2))
        def run(m):
            logits, loss = m(x, y); loss.backward()
            return {"loss": loss, "logits": m(x)[0], "wte.grad": m.transformer.wte.weight.grad,
                    "c_attn.grad": m.transformer.h[0].attn.c_attn.weight.grad}
        same_as_torch(m, run)"""), None),
     ("train.py 6 steps + checkpoint", _aliased("train.py", *NANO_TINY, "--compile=False", "--max_iters=6",
                                                  "--eval_interval=3"), exists("out/ckpt.pt")),
     ("train.py resume", _aliased("train.py", *NANO_TINY, "--compile=False", "--init_from=resume",
                                    "--max_iters=8", "--eval_interval=4"), None),
     ("sample.py", _aliased("sample.py", "--device=cpu", "--dtype=float32", "--num_samples=2",
                            "--max_new_tokens=20", "--top_k=10"), None),
     ("train.py --compile=True", _aliased("train.py", *NANO_TINY, "--compile=True", "--max_iters=3",
                                           "--eval_interval=100", "--out_dir=out_c"), None)])

MM_TINY = ["-i", "names.txt", "-o", "out", "--max-steps", "501", "--n-layer", "1", "--n-head", "2",
           "--n-embd", "16", "--n-embd2", "16", "--batch-size", "8"]
PROGRAMS["makemore"] = (
    ["makemore.py", "names.txt"], [],
    [("import makemore.py", _snippet("import makemore"), None)]
    + [(f"--type {t}: train 501 steps, evaluate, sample, save", _aliased("makemore.py", *MM_TINY, "--type", t),
        exists("out/model.pt")) for t in ("bigram", "mlp", "rnn", "gru", "bow", "transformer")]
    + [("--sample-only (load model.pt)", _aliased("makemore.py", *MM_TINY, "--type", "transformer",
                                                  "--sample-only"), None),
       ("same as PyTorch (6 models: loss, logits, grads)", _vs_torch("""
        import makemore as mm
        cfg = mm.ModelConfig(vocab_size=12, block_size=6, n_layer=1, n_head=2, n_embd=16, n_embd2=16)
        rng = np.random.default_rng(0)
        x = torch.tensor(rng.integers(0, 12, (3, 6))); y = torch.tensor(rng.integers(-1, 12, (3, 6)))
        for kind in ["bigram", "mlp", "rnn", "gru", "bow", "transformer"]:
            torch.manual_seed(0)
            m = {"bigram": lambda: mm.Bigram(cfg), "mlp": lambda: mm.MLP(cfg), "bow": lambda: mm.BoW(cfg),
                 "rnn": lambda: mm.RNN(cfg, "rnn"), "gru": lambda: mm.RNN(cfg, "gru"),
                 "transformer": lambda: mm.Transformer(cfg)}[kind]()
            if os.environ["HARNESS_SIDE"] == "torch":  # makemore's Bigram starts at zeros: perturb all
                with torch.no_grad():
                    for p in m.parameters(): p.add_(torch.randn(p.shape) * 0.1)
            def run(m):
                logits, loss = m(x, y); loss.backward()
                return {"loss": loss, "logits": logits, **{n + ".grad": p.grad for n, p in m.named_parameters()}}
            same_as_torch(m, run, kind)"""), None)])

PROGRAMS["ng-video-lecture"] = (
    ["bigram.py", "gpt.py"],
    [shrink("bigram.py", max_iters=60, eval_interval=30, eval_iters=5),
     shrink("gpt.py", batch_size=8, block_size=32, max_iters=20, eval_interval=10, eval_iters=4, n_embd=32,
            n_head=4, n_layer=2)],
    [("bigram.py: build + train 60 steps", _aliased("bigram.py"), printed("step 30: train loss")),
     ("bigram.py: generate 500 chars", SAME_RUN, None),
     ("gpt.py: build (parameter count)", _aliased("gpt.py"), printed("M parameters")),
     ("gpt.py: train 20 steps + estimate_loss", SAME_RUN, printed("step 19: train loss")),
     ("gpt.py: generate 500 chars", SAME_RUN, None)])

PROGRAMS["minGPT"] = (
    ["mingpt/model.py", "mingpt/trainer.py", "mingpt/utils.py", "projects/adder/adder.py"], [],
    [("import mingpt", _snippet("import mingpt.model, mingpt.trainer, mingpt.utils"), None),
     ("build GPT (gpt-nano), generate", _snippet("""
        import torch
        from mingpt.model import GPT
        c = GPT.get_default_config(); c.model_type = 'gpt-nano'; c.vocab_size = 10; c.block_size = 6
        m = GPT(c); m.eval(); out = m.generate(torch.zeros(2, 1, dtype=torch.long), 5, do_sample=True, top_k=3)
        assert tuple(out.shape) == (2, 6)"""), None),
     ("same as PyTorch (loss, logits, grads)", _vs_torch("""
        from mingpt.model import GPT
        c = GPT.get_default_config(); c.model_type = 'gpt-nano'; c.vocab_size = 10; c.block_size = 6
        c.embd_pdrop = c.resid_pdrop = c.attn_pdrop = 0.0
        m = GPT(c); rng = np.random.default_rng(0)
        x = torch.tensor(rng.integers(0, 10, (4, 6))); y = torch.tensor(rng.integers(-1, 10, (4, 6)))
        def run(m):
            logits, loss = m(x, y); loss.backward()
            return {"loss": loss, "logits": logits, **{n + ".grad": p.grad for n, p in m.named_parameters()}}
        same_as_torch(m, run)"""), None),
     ("adder: Trainer 501 steps, eval, save model.pt",
      _aliased("projects/adder/adder.py", "--data.ndigit=1", "--trainer.max_iters=501", "--trainer.num_workers=0",
               "--trainer.batch_size=16"), exists("out/adder/model.pt")),
     ("adder: Trainer with DataLoader workers (num_workers=2)",
      _aliased("projects/adder/adder.py", "--data.ndigit=1", "--trainer.max_iters=20", "--trainer.num_workers=2",
               "--trainer.batch_size=16"), None)])

WLM_TINY = ["--data", "data/tiny", "--emsize", "16", "--nhid", "16", "--nlayers", "2", "--epochs", "1",
            "--batch_size", "8", "--bptt", "10", "--log-interval", "20"]
WLM_TYPES = ["RNN_TANH", "RNN_RELU", "LSTM", "GRU", "Transformer"]
PROGRAMS["word_language_model"] = (
    ["main.py", "model.py", "data.py", "generate.py", "data/tiny/train.txt"], [],
    [(f"--model {t}: train 1 epoch + validate", _aliased("main.py", *WLM_TINY, "--model", t),
      printed("| end of epoch   1")) for t in WLM_TYPES]
    + [("LSTM: torch.save(model) / torch.load (test loss)", _aliased("main.py", *WLM_TINY, "--model", "LSTM",
                                                                    "--tied", "--onnx-export", "m.onnx"),
        printed("| End of training")),
       ("LSTM: ONNX export", SAME_RUN, exists("m.onnx")),
       ("generate.py (loads model.pt)", _aliased("generate.py", "--data", "data/tiny", "--words", "30"), None),
       ("same as PyTorch (5 models: output, grads)", _vs_torch("""
        import model as wm
        rng = np.random.default_rng(0)
        x = torch.tensor(rng.integers(0, 30, (7, 3)))
        for kind in ["RNN_TANH", "RNN_RELU", "LSTM", "GRU", "Transformer"]:
            torch.manual_seed(0)
            m = (wm.TransformerModel(30, 16, 2, 16, 2, 0.0) if kind == "Transformer"
                 else wm.RNNModel(kind, 30, 16, 16, 2, 0.0))
            m.eval()  # nn.Transformer's own dropout is 0.1
            def run(m):
                out = m(x) if kind == "Transformer" else m(x, m.init_hidden(3))[0]
                out.square().mean().backward()
                return {"out": out, **{n + ".grad": p.grad for n, p in m.named_parameters() if p.grad is not None}}
            same_as_torch(m, run, kind)"""), None)])

PROGRAMS["time_sequence_prediction"] = (
    ["generate_sine_wave.py", "train.py"], [shrink("generate_sine_wave.py", L=100, N=10)],
    [("generate_sine_wave.py: torch.save(ndarray, open(...))", _aliased("generate_sine_wave.py"),
      exists("traindata.pt")),
     ("train.py: torch.load, build, LBFGS step (closure)", _aliased("train.py", "--steps", "2"),
      printed("STEP:  1")),
     ("train.py: predict 1000 steps ahead, plot", SAME_RUN, exists("predict1.pdf")),
     ("same as PyTorch (LSTMCell model, float64: output, grads)", _vs_torch("""
        import sys; sys.argv = ["x"]
        from train import Sequence
        torch.manual_seed(0); m = Sequence().double()
        x = torch.tensor(np.sin(np.arange(24.0).reshape(2, 12) / 3))
        def run(m):
            out = m(x, future=5); out.square().mean().backward()
            return {"out": out, **{n + ".grad": p.grad for n, p in m.named_parameters()}}
        same_as_torch(m, run, rtol=1e-10, atol=1e-12)"""), None)])

PROGRAMS["mnist"] = (
    ["main.py"], [],
    [("import, build Net", _snippet("import main; main.Net()"), None),
     ("train 2 epochs (Adadelta, StepLR), test", _aliased("main.py", "--epochs", "2", "--batch-size", "32",
                                                          "--test-batch-size", "64", "--save-model"),
      printed("Test set: Average loss")),
     ("save state_dict", SAME_RUN, exists("mnist_cnn.pt")),
     ("same as PyTorch (Net: output, grads)", _vs_torch("""
        import main
        torch.manual_seed(0); m = main.Net(); m.eval()
        x = torch.tensor(np.random.default_rng(0).standard_normal((2, 1, 28, 28)).astype(np.float32))
        def run(m):
            out = m(x); out.square().mean().backward()
            return {"out": out, **{n + ".grad": p.grad for n, p in m.named_parameters()}}
        same_as_torch(m, run)"""), None)])

LLAMA_ARGS = ("dict(dim=32, n_layers=2, n_heads=4, n_kv_heads=2, vocab_size=64, multiple_of=16, max_seq_len=16, "
              "dropout=0.0)")
PROGRAMS["llama2.c"] = (
    ["model.py", "export.py"], [],
    [("import model.py, export.py", _snippet("import model, export"), None),
     ("build (GQA), train 3 steps, save ckpt.pt as train.py does", _snippet(f"""
        import torch
        from model import ModelArgs, Transformer
        args = {LLAMA_ARGS}
        torch.manual_seed(0); m = Transformer(ModelArgs(**args))
        opt = m.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
        x, y = torch.randint(64, (4, 16)), torch.randint(64, (4, 16))
        for _ in range(3):
            m(x, y); m.last_loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)
        torch.save(dict(model=m.state_dict(), optimizer=opt.state_dict(), model_args=args, iter_num=3,
                        best_val_loss=1e9, config={{}}), "ckpt.pt")"""), exists("ckpt.pt")),
     ("generate (inference_mode, top_k)", _snippet("""
        import torch, export
        m = export.load_checkpoint("ckpt.pt")
        out = m.generate(torch.zeros(1, 1, dtype=torch.long), 8, temperature=1.0, top_k=5)
        assert tuple(out.shape) == (1, 9)"""), None)]
    + [(f"export.py --version {v} (load_checkpoint, {kind})",
        _aliased("export.py", f"out{v}.bin", "--version", str(v), "--checkpoint", "ckpt.pt"), exists(f"out{v}.bin"))
       for v, kind in ((0, "legacy fp32"), (1, "fp32"), (2, "int8 Q8_0"))]
    + [("same as PyTorch (logits, loss, grads, v1/v2 export bytes)", _vs_torch(f"""
        import export
        from model import ModelArgs, Transformer
        torch.manual_seed(0); m = Transformer(ModelArgs(**{LLAMA_ARGS}))
        rng = np.random.default_rng(0)
        x, y = (torch.tensor(rng.integers(0, 64, (2, 16))) for _ in range(2))
        def run(m):
            logits = m(x, y); m.last_loss.backward()
            export.version1_export(m, "v1.bin"); export.version2_export(m, "v2.bin", group_size=16)
            v1, v2 = np.fromfile("v1.bin", np.uint8), np.fromfile("v2.bin", np.uint8)
            return {{"logits": logits, "loss": m.last_loss, "v1 header": torch.tensor(v1[:256]),
                     "v1 weights": torch.tensor(v1[256:].view(np.float32)), "v2 header": torch.tensor(v2[:256]),
                     "v2 int8 / scales": torch.tensor(v2[256:].astype(np.float32)),
                     **{{n + ".grad": p.grad for n, p in m.named_parameters()}}}}
        same_as_torch(m, run)"""), None)])


def run_program(src, name, verbose, timeout):
    files, setup, stages = PROGRAMS[name]
    home = os.path.join(src, name)
    missing = [f for f in files if not os.path.exists(os.path.join(home, f))]
    if missing:
        return None, f"skipped: {home} lacks {', '.join(missing)}"
    work = tempfile.mkdtemp(prefix=f"eagerc-{name}-")
    shutil.copytree(home, os.path.join(work, name))
    cwd = os.path.join(work, name)
    if os.path.exists(os.path.join(src, "input.txt")):
        shutil.copy(os.path.join(src, "input.txt"), work)
        if not os.path.exists(os.path.join(cwd, "input.txt")):
            shutil.copy(os.path.join(src, "input.txt"), cwd)
    package, fake = FAKES.get(name, (None, {}))
    import importlib.util
    if package is not None and importlib.util.find_spec(package) is not None:
        fake = {}
    for rel, text in fake.items():
        os.makedirs(os.path.dirname(os.path.join(cwd, rel)), exist_ok=True)
        with open(os.path.join(cwd, rel), "w") as f:
            f.write(text)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, cwd, os.environ.get("PYTHONPATH", "")]))
    for cmd in setup:
        if callable(cmd):
            cmd(cwd)
        else:
            subprocess.run(cmd, cwd=cwd, env=env, check=True, capture_output=True, text=True)
    results = []
    rc, out = 1, ""
    for stage, cmd, check in stages:
        if cmd is None:  # a comparison stage without PyTorch installed
            print(f"  [skip] {name}: {stage} (PyTorch is not installed)")
            continue
        if cmd != SAME_RUN:
            try:
                r = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
                rc, out = r.returncode, r.stdout + r.stderr
            except subprocess.TimeoutExpired as e:
                rc, out = 124, f"timed out after {timeout}s\n{e.stdout or ''}{e.stderr or ''}"
        ok = rc == 0 if check is None else check(cwd, out, rc)
        results.append((stage, ok, out))
        diffs = [float(line.rsplit("=", 1)[1]) for line in str(out).splitlines() if "max |eagerc - torch|" in line]
        worst = f" (worst max |eagerc - torch| of {len(diffs)}: {max(diffs):.1e})" if diffs else ""
        print(f"  [{'pass' if ok else 'FAIL'}] {name}: {stage}{worst}", flush=True)
        if verbose and not ok:
            print(textwrap.indent(str(out)[-2500:], "      | "))
    shutil.rmtree(work, ignore_errors=True)
    return results, None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("src", help="folder holding the programs' sources (see this script's docstring)")
    p.add_argument("programs", nargs="*", help=f"which (default all): {', '.join(PROGRAMS)}")
    p.add_argument("-v", "--verbose", action="store_true", help="print each failing stage's output tail")
    p.add_argument("--timeout", type=int, default=600, help="seconds per stage")
    args = p.parse_args(argv)
    total = passed = 0
    rows = []
    for name in args.programs or PROGRAMS:
        results, skipped = run_program(os.path.abspath(args.src), name, args.verbose, args.timeout)
        if skipped:
            print(f"  {name}: {skipped}")
            continue
        n_ok = sum(ok for _, ok, _ in results)
        total, passed = total + len(results), passed + n_ok
        rows.append((name, n_ok, len(results), [s for s, ok, _ in results if not ok]))
    print("\n| program | stages passed | failing |\n|---|---|---|")
    for name, n_ok, n, failing in rows:
        print(f"| {name} | {n_ok} / {n} | {', '.join(failing) or '-'} |")
    print(f"| all | {passed} / {total} | |")
    return 0 if passed == total else 1


if __name__ == "__main__":
    sys.exit(main())
