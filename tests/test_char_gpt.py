"""End-to-end: the character-level GPT example learns from stdlib source (validation loss
falls well below its starting value and below the uniform ln(vocab)) and generates text."""
import math

import numpy as np

import eagerc


def test_char_gpt_val_loss_falls_and_generates():
    from examples.char_gpt import main
    initial, final = main(["--steps", "30", "--eval-every", "30", "--eval-iters", "4",
                           "--n-layer", "1", "--n-embd", "32", "--n-head", "4", "--block-size", "32",
                           "--batch-size", "16", "--lr", "1e-2", "--max-chars", "200000",
                           "--sample-len", "40", "--quiet"])
    assert math.isfinite(initial) and math.isfinite(final)
    assert final < initial - 0.3, (initial, final)
    assert final < math.log(60), final  # the vocabulary has well over 60 characters
    assert isinstance(main.last_sample, str) and len(main.last_sample) == 40


def test_generate_length_and_causality():
    from examples.char_gpt import GPT
    eagerc.manual_seed(0)
    model = GPT(vocab_size=11, block_size=8, n_layer=1, n_embd=16, n_head=2)
    ids = model.generate(eagerc.tensor([[1, 2, 3]], dtype=eagerc.int64), 12, temperature=1.0, top_k=3,
                         generator=eagerc.Generator().manual_seed(0))
    assert len(ids) == 15 and ids[:3] == [1, 2, 3] and all(0 <= i < 11 for i in ids)
    # causal: changing a later token leaves the logits at earlier positions unchanged
    with eagerc.no_grad():
        model.eval()
        a = model(eagerc.tensor([[1, 2, 3, 4, 5]], dtype=eagerc.int64)).numpy()
        b = model(eagerc.tensor([[1, 2, 3, 9, 0]], dtype=eagerc.int64)).numpy()
    np.testing.assert_allclose(a[0, :3], b[0, :3], rtol=1e-5, atol=1e-6)
    assert not np.allclose(a[0, 3:], b[0, 3:])
