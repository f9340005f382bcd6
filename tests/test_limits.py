"""The limits table of docs/perf.md: benchmarks/perf/flops.py's FLOPs of forward calls by hand, the meter's split
into prefill, decode (less rows that had stopped) and training passes, and the page as its saved results
render it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from benchmarks.perf import flops

CONFIG = SimpleNamespace(hidden_size=4, num_hidden_layers=1, intermediate_size=8, num_attention_heads=2,
                         num_key_value_heads=1, head_dim=2, vocab_size=10)


def test_model_shape_by_hand():
    shape = flops.ModelShape.of(CONFIG)
    # q and o: 4 x (2 heads x 2) each; k and v: 4 x (1 x 2) each; MLP: 3 x 4 x 8 -> 32 + 16 + 96 = 144 weights
    assert (shape.body, shape.head, shape.pair) == (2 * 144, 2 * 4 * 10, 4 * 2 * 2)


def test_a_left_padded_prompt_pass_by_hand():
    shape = flops.ModelShape.of(CONFIG)
    cost = flops.call_cost(shape, {"input_ids": torch.zeros(2, 3, dtype=torch.long),
                                   "attention_mask": torch.tensor([[0, 1, 1], [1, 1, 1]]), "logits_to_keep": 1}, False)
    # real queries 2 and 3; causal pairs 2 x 2 - 1 = 3 and 3 x 3 - 3 = 6; one LM-head position per row
    assert (cost.tokens, cost.padded_tokens) == (5, 6)
    assert cost.flops == 5 * 288 + 2 * 80 + 9 * 16
    assert cost.padded_flops == cost.forward_flops == 6 * 288 + 2 * 80 + 2 * 3 * 3 * 16
    train = flops.call_cost(shape, {"input_ids": torch.zeros(2, 3, dtype=torch.long)}, True)
    # no mask: every token real and kept; needed attention is causal (1 + 2 + 3 pairs a row), computed is dense
    assert train.flops == 3 * (6 * 288 + 6 * 80 + 2 * 6 * 16)
    assert train.padded_flops == 3 * train.forward_flops == 3 * (6 * 288 + 6 * 80 + 2 * 3 * 3 * 16)


def test_a_decode_step_attends_to_the_cache():
    shape = flops.ModelShape.of(CONFIG)
    cost = flops.call_cost(shape, {"input_ids": torch.zeros(2, 1, dtype=torch.long), "logits_to_keep": 1,
                                   "attention_mask": torch.tensor([[0, 1, 1, 1], [1, 1, 1, 1]])}, False)
    assert cost.flops == 2 * 288 + 2 * 80 + (3 + 4) * 16
    assert cost.padded_flops == 2 * 288 + 2 * 80 + 2 * 4 * 16


class Model(torch.nn.Module):
    config = CONFIG

    def forward(self, input_ids, attention_mask=None, logits_to_keep=0):
        return input_ids

    def generate(self, input_ids, steps):
        self(input_ids=input_ids)  # the prompt
        for _ in range(steps - 1):
            self(input_ids=input_ids[:, -1:])


def test_the_meter_splits_prefill_decode_and_training_and_leaves_out_stopped_rows():
    model, meter = Model(), flops.Meter()
    lengths = [1, 3]  # row 0 stopped after its first token, row 1 ran 2 decode steps
    engine = SimpleNamespace(model=model, _generate_chunk=lambda prompts: (
        model.generate(torch.zeros(len(prompts), 4, dtype=torch.long), max(lengths)),
        [SimpleNamespace(token_ids=[0] * n) for n in lengths])[1])
    meter.watch_engine(engine)
    with meter.phase("rollout"), torch.no_grad():  # as the engine generates
        engine._generate_chunk([[1], [2]])
    with meter.phase("learner"), torch.enable_grad():
        model(input_ids=torch.zeros(1, 2, dtype=torch.long))
    pre, dec, train = (meter.tallies[k] for k in ("rollout/prefill", "rollout/decode", "learner/train"))
    assert (pre.calls, pre.tokens) == (1, 8)
    assert (dec.calls, dec.padded_tokens, dec.tokens) == (2, 4, 2)  # 2 of its 4 row-steps ran a live row
    assert (train.calls, train.tokens) == (1, 2) and train.padded_flops == 3 * train.forward_flops
    assert {"rollout", "rollout/decode", "learner"} <= set(meter.walls)


def test_the_perf_page_is_what_its_saved_results_render_to():
    from benchmarks.perf.page import PAGE, render
    from benchmarks.perf.results import saved_results

    saved = saved_results()
    assert {"limits", "recipes", "async"} <= set(saved)
    assert render(saved) == PAGE.read_text(), "rerun `python -m benchmarks.perf.page --render`"


def test_only_the_page_module_writes_docs_perf_md():
    """One writer of docs/perf.md (benchmarks.perf.page): a module that measured a section and redrew the page
    from only some of the saved results dropped the others' sections (limits.py did, before the package)."""
    from benchmarks.perf import page

    root = Path(page.__file__).resolve().parents[1]
    others = [p for p in sorted(root.rglob("*.py")) if p != Path(page.__file__).resolve()]
    assert len(others) > 20, "benchmarks/ was not read"
    writers = [str(p.relative_to(root)) for p in others
               if '"perf.md"' in p.read_text() or "PAGE.write" in p.read_text()]
    assert not writers, f"only benchmarks/perf/page.py may write docs/perf.md: {writers}"
