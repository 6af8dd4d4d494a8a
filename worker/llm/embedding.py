"""Document embeddings from the LLM: mean-pooled, L2-normalized final hidden states of token chunks."""
import torch
import torch.nn.functional as F

from core.documents import DocumentError
from worker.llm.packing import packed_outputs
from worker.llm.prompts import encode_text
from worker.llm.runtime import LLMRuntime
from worker.llm.session import Usage


def embed_texts(runtime: LLMRuntime, texts: list[str], chunk_tokens: int) -> list[dict | DocumentError]:
    """One unit vector per text: each chunk of `chunk_tokens` tokens is mean-pooled and normalized, and the
    chunks' token-weighted mean normalized again. All chunks of all texts go through packed passes."""
    chunk_tokens = min(chunk_tokens, runtime.max_context)
    chunked = []
    for text in texts:
        ids = encode_text(runtime.tokenizer, text)
        chunked.append([ids[start : start + chunk_tokens] for start in range(0, len(ids), chunk_tokens)])
    outputs = iter(packed_outputs(runtime, [chunk for chunks in chunked for chunk in chunks], "hidden"))
    results: list[dict | DocumentError] = []
    for chunks in chunked:
        if not chunks:
            results.append(DocumentError("the document has no text to embed"))
            continue
        pieces = [next(outputs) for _ in chunks]
        weights = torch.tensor([len(chunk) for chunk in chunks], dtype=torch.float32)
        vectors = F.normalize(torch.stack([piece.values.mean(dim=0) for piece in pieces]), dim=1)
        embedding = F.normalize((vectors * weights[:, None]).sum(dim=0), dim=0)
        usage = Usage(input_tokens=int(weights.sum()), prefill_s=sum(piece.seconds for piece in pieces))
        results.append({
            "dim": embedding.numel(),
            "chunks": len(chunks),
            "tokens": usage.input_tokens,
            "embedding": [round(value, 7) for value in embedding.tolist()],
            "usage": usage.as_dict(runtime.attention_impl),
        })
    return results
