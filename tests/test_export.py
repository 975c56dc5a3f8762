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


def read_gguf(path):
    """A minimal GGUF v3 reader (ggml's docs/gguf.md), independent of the writer: metadata and tensors."""
    import struct

    import numpy as np

    b = path.read_bytes()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, b, pos)
        pos += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string():
        nonlocal pos
        n = take("<Q")
        s = b[pos:pos + n].decode()
        pos += n
        return s

    def value(kind):
        if kind == 8:
            return string()
        if kind == 9:
            inner, n = take("<IQ")
            return [value(inner) for _ in range(n)]
        return take({4: "<I", 5: "<i", 6: "<f", 7: "<?"}[kind])

    assert b[:4] == b"GGUF"
    pos = 4
    version, n_tensors, n_kv = take("<IQQ")
    meta = {}
    for _ in range(n_kv):
        key = string()
        meta[key] = value(take("<I"))
    infos = []
    for _ in range(n_tensors):
        name = string()
        dims = [take("<Q") for _ in range(take("<I"))]
        kind, offset = take("<IQ")
        infos.append((name, dims, kind, offset))
    start = pos + (-pos % meta.get("general.alignment", 32))
    tensors = {name: np.frombuffer(b, np.float32, int(np.prod(dims)), start + offset).reshape(list(reversed(dims)))
               for name, dims, kind, offset in infos}
    return version, meta, tensors


def test_the_gguf_file_holds_the_draft_as_llama_cpp_names_it(draft, tmp_path):
    from engine.export import export_gguf, gpt2_byte_chars

    version, meta, tensors = read_gguf(export_gguf(draft, tmp_path / "draft.gguf", "specsim-draft"))
    c = draft.cfg
    assert version == 3 and meta["general.architecture"] == "llama"
    assert (meta["llama.block_count"], meta["llama.embedding_length"], meta["llama.attention.head_count"]) == (
        c.n_layers, c.d_model, c.n_heads)
    assert len(set(meta["tokenizer.ggml.tokens"])) == 256 and meta["tokenizer.ggml.tokens"] == gpt2_byte_chars()
    assert len(tensors) == 3 + 9 * c.n_layers
    own = draft.state_dict()
    assert (tensors["token_embd.weight"] == own["tok_embeddings.weight"].numpy()).all()
    assert (tensors["blk.0.ffn_down.weight"] == own["layers.0.feed_forward.w2.weight"].numpy()).all()
    # q rows reordered from rotate-half to adjacent pairs: the same rows, per head, interleaved
    q = own["layers.0.attention.wqkv.weight"][: c.n_heads * c.head_dim].numpy()
    half = c.head_dim // 2
    assert (tensors["blk.0.attn_q.weight"][1] == q[half]).all() and (tensors["blk.0.attn_q.weight"][0] == q[0]).all()


def test_llama_cpp_decodes_the_exported_pair_as_specsim_does(tmp_path):
    """Where llama.cpp is built (benchmarks/build_llama_cpp.sh): its greedy continuation of a held-out prompt is
    the built-in engine's, token for token (fp32 both; a near-tie could flip a token, so 30 of 32 must agree)."""
    from calibrate.llama_cpp import Server, llama_cpp_bin
    from engine.builtin import encode, prompts
    from engine.export import export_gguf
    from engine.speculative import Decoding, RealEngine
    from simulator import SpecsimError

    try:
        llama_cpp_bin("llama-server")
    except SpecsimError as e:
        pytest.skip(str(e))
    target, _ = load_pair(expanded=False, dtype="fp32", max_seq_len=512)
    path = export_gguf(target, tmp_path / "target.gguf", "specsim-target")
    prompt = encode(prompts("heldout")[0])
    ours = RealEngine(target).generate([prompt], 32, Decoding(k=0, temperature=0.0),
                                       torch.Generator().manual_seed(0)).tokens[0]
    with Server(path) as server:
        theirs = server.complete(prompt, 32)["tokens"]
    assert sum(a == b for a, b in zip(ours, theirs)) >= 30, (bytes(ours), bytes(theirs))


def test_llama_server_that_fails_to_start_says_why_in_one_line(tmp_path):
    """Where llama.cpp is built: a server that exits at start (a model file it cannot read) raises SpecsimError
    with the end of its log, read from the file its log goes to (a pipe nobody reads would stall a long run)."""
    from calibrate.llama_cpp import Server, llama_cpp_bin
    from simulator import SpecsimError

    try:
        llama_cpp_bin("llama-server")
    except SpecsimError as e:
        pytest.skip(str(e))
    bad = tmp_path / "not-a-model.gguf"
    bad.write_bytes(b"GGUF but not really")
    server = Server(bad)
    with pytest.raises(SpecsimError, match="llama-server exited"):
        server.__enter__()
    assert server.log is None  # closed on the way out
