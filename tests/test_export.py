"""The built-in pair written as Hugging Face Llama folders computes the built-in pair's logits: read back by
specsim's own checkpoint reader, and by transformers where it is installed."""

import pytest
import torch

from engine.builtin import load_pair
from engine.export import export_hf, to_hf_state
from engine.model import hf_llama_state, load_hf_checkpoint

PROMPT = torch.tensor([list(b"Speculative decoding verifies a draft's tokens in one pass. " * 2)])


@pytest.fixture(scope="module")
def draft():
    return load_pair(expanded=False, dtype="fp32", max_seq_len=256)[1]


def test_the_hf_names_are_the_inverse_of_the_reader(draft):
    back = hf_llama_state(to_hf_state(draft), draft.cfg)
    own = draft.state_dict()
    assert set(back) <= set(own)
    for k, v in back.items():
        assert torch.equal(v, own[k]), k


def test_an_exported_draft_read_back_gives_the_same_logits(draft, tmp_path):
    folder = export_hf(draft, tmp_path / "draft", "specsim-draft")
    assert {p.name for p in folder.iterdir()} >= {"config.json", "model.safetensors", "tokenizer.json"}
    back = load_hf_checkpoint(folder, dtype="fp32", max_seq_len=256)
    with torch.no_grad():
        assert torch.equal(back.train_logits(PROMPT), draft.train_logits(PROMPT))


def test_transformers_computes_the_built_in_logits(draft, tmp_path):
    transformers = pytest.importorskip("transformers", reason="pip install transformers to check the export with it")
    folder = export_hf(draft, tmp_path / "draft", "specsim-draft")
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
    with torch.no_grad():
        theirs, ours = hf(PROMPT).logits, draft.train_logits(PROMPT)
    assert torch.allclose(theirs, ours, atol=1e-4, rtol=0)
    assert torch.equal(theirs.argmax(-1), ours.argmax(-1))
    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert tok("hi")["input_ids"][-2:] == list(b"hi")
