"""End-to-end benchmark of the worker's LLM runtime on one GPU, and one long summarize job.

A Llama-3.1-8B-shaped model with random bf16 weights is built on the GPU; the worker's Session prefills
8K, 32K and 128K random tokens with each attention implementation (chunked as the worker does, and in one
pass; the runtime's defaults, so the pointwise blocks compiled, their compilation in the untimed warm-up),
reporting tokens/s and peak GPU memory; single-token decode is timed at the longest context with
the fa3 kernel and with SDPA serving the decode step. Last, the model is saved and a summarize job of a
128K-token document runs through the worker's task code (settings, loading, chunked prefill, decode) while
the benchmark's copy stays resident (reported).

    PYTHONPATH=kernels:. python benchmarks/e2e.py --tokenizer DIR --out benchmarks/results
"""
import argparse
import datetime as dt
import gc
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import transformers
from transformers import AutoTokenizer, LlamaForCausalLM

from core.settings import PREFILL_CHUNK_TOKENS
from worker.llm.attention import DECODE_ATTENTION, set_decode_attention
from worker.llm.random_checkpoint import LLAMA_31_8B_SHAPE, llama_config
from worker.llm.runtime import runtime_for
from worker.llm.session import Session

IMPL_NAMES = {"fa3_fp8": "fa3fp8-fp8", "sdpa": "sdpa", "fa3_bf16": "fa3fp8-bf16"}
GB = 1e9
DECODE_REPEATS = 3  # single 32-token timings moved by up to 50% between runs (docs/llm.md, session 8)


def build_model() -> LlamaForCausalLM:
    """The 8B-shaped Llama with random bf16 weights, built directly on the GPU (no end-of-sequence token,
    so decode runs the full requested length)."""
    torch.manual_seed(0)
    config = llama_config(**LLAMA_31_8B_SHAPE, eos_token_id=None, bos_token_id=None)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    return model.eval()


def release() -> None:
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()


def prefill_row(runtime, ids: list[int], mode: str, repeats: int = 1) -> dict:
    """Prefill `ids` in a fresh Session `repeats` times; tokens/s of the median time, every time, and peak memory
    (or the error, so the other rows still run)."""
    row = {"impl": IMPL_NAMES[runtime.attention_impl], "tokens": len(ids), "prefill": mode,
           "chunk_tokens": min(runtime.prefill_chunk_tokens, len(ids))}
    times = []
    for _ in range(repeats):
        release()
        session = Session(runtime)
        try:
            session.prefill(ids)
            times.append(session.usage.prefill_s)
        except Exception as error:  # out of memory, or a shape the kernels refuse: reported in the row
            row["error"] = f"{type(error).__name__}: {error}"[:300]
            break
        finally:
            del session
    if "error" not in row:
        median = statistics.median(times)
        row.update({
            "prefill_s": round(median, 3),
            "tokens_per_s": round(len(ids) / median, 1),
            "prefill_s_all": [round(t, 3) for t in times],
            "peak_gb": round(torch.cuda.max_memory_allocated() / GB, 2),
        })
    release()
    return row


def decode_rows(runtime, ids: list[int], steps: int) -> list[dict]:
    """Milliseconds per generated token after prefilling `ids`, per decode-attention choice: the median of
    DECODE_REPEATS runs of `steps` tokens from the same cache."""
    session = Session(runtime)
    choices = ["sdpa"] if runtime.attention_impl == "sdpa" else list(DECODE_ATTENTION)
    rows = []
    try:
        session.prefill(ids)
        mark = session.checkpoint()
        for choice in choices:
            set_decode_attention(choice)
            row = {"impl": IMPL_NAMES[runtime.attention_impl], "context": len(ids), "decode_attention": choice}
            try:
                session.generate(2)
                session.rollback(mark)
                per_token = []
                for _ in range(DECODE_REPEATS):
                    session.usage.decode_s = 0.0
                    generated = session.generate(steps)
                    per_token.append(1000 * session.usage.decode_s / len(generated))
                    session.rollback(mark)
                row["ms_per_token"] = round(statistics.median(per_token), 3)
                row["ms_per_token_all"] = [round(ms, 3) for ms in per_token]
            except Exception as error:  # a decode path the kernels do not serve is reported, not fatal
                row["error"] = f"{type(error).__name__}: {error}"[:300]
            rows.append(row)
            session.rollback(mark)
    except Exception as error:
        rows.append({"impl": IMPL_NAMES[runtime.attention_impl], "context": len(ids),
                     "error": f"{type(error).__name__}: {error}"[:300]})
    finally:
        set_decode_attention("sdpa")
        del session
        release()
    return rows


def long_document(tokenizer, tokens: int, seed: int = 0) -> str:
    """English-looking text of exactly `tokens` tokens: sentences of single-token words."""
    rng = random.Random(seed)
    words = [word for word in (
        "the report shows that our system reads long documents in parts and keeps memory low while the model "
        "writes short answers about each section of text with care and speed for every user who sends work "
        "to the service during the day or night when load is high or low across many machines in one region"
    ).split() if len(tokenizer.tokenize(word)) == 1]
    pieces, count = [], 0
    while count < tokens:
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 20))) + "."
        pieces.append(sentence)
        count += len(tokenizer.tokenize(sentence))
    ids = tokenizer(" ".join(pieces), add_special_tokens=False, verbose=False)["input_ids"][:tokens]
    return tokenizer.decode(ids)


def summarize_job(folder: Path, tokenizer, tokens: int, impl: str, decode_attention: str) -> dict:
    """Summarize one `tokens`-token document with the checkpoint in `folder`, through the worker's task code
    (which reads the settings and loads the model on first use, as a worker process does)."""
    os.environ.update({
        "DOCFLASH_ENV": "test", "DOCFLASH_LLM_MODEL": str(folder), "DOCFLASH_ATTENTION_IMPL": impl,
        "DOCFLASH_DECODE_ATTENTION": decode_attention,
    })
    from core.settings import get_settings
    from core.task_specs import validate_options
    from worker.tasks import Document, get_task

    get_settings.cache_clear()
    text = long_document(tokenizer, tokens)
    options = validate_options("summarize", {"method": "abstractive", "max_new_tokens": 128})
    release()
    started = time.perf_counter()
    [result] = get_task("summarize").process_batch([Document("doc-128k", text)], options)
    wall_s = time.perf_counter() - started
    if not isinstance(result, dict):
        return {"error": str(result), "wall_s_with_load": round(wall_s, 2)}
    return {
        "document_tokens": tokens,
        "wall_s_with_load": round(wall_s, 2),
        "parts": result["parts"],
        "summary_chars": len(result["summary"]),
        "peak_gb": round(torch.cuda.max_memory_allocated() / GB, 2),
        **result["usage"],
    }


def benchmark(model, tokenizer, impls: list[str], args, report: dict, save) -> None:
    """Prefill rows (chunked and one pass) and decode rows for each implementation, saved as they come."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, tokenizer.vocab_size, (max(args.tokens),), generator=generator).tolist()
    for impl in impls:
        runtime = runtime_for(model, tokenizer, attention_impl=impl, prefill_chunk_tokens=args.chunk_tokens)
        warmup = prefill_row(runtime, ids[: 2 * args.chunk_tokens], "warmup")  # compile / autotune untimed
        if "error" in warmup:
            report["rows"].append(warmup)
            save()
            continue
        for tokens in args.tokens:
            report["rows"].append(prefill_row(runtime, ids[:tokens], "chunked", args.repeats))
            print(json.dumps(report["rows"][-1]), flush=True)
            save()
        if args.one_pass:
            one_pass = runtime_for(model, tokenizer, attention_impl=impl, prefill_chunk_tokens=max(args.tokens))
            report["rows"].append(prefill_row(one_pass, ids[: max(args.tokens)], "one_pass", args.repeats))
            print(json.dumps(report["rows"][-1]), flush=True)
        if args.decode_steps:
            context = max(args.tokens) - args.decode_steps - 2  # room for the warm-up and timed tokens
            report["decode"].extend(decode_rows(runtime, ids[:context], args.decode_steps))
            print(json.dumps(report["decode"]), flush=True)
        save()


def checkpoint_and_summarize(model, tokenizer, args, report: dict) -> dict:
    """Save the model, then run the summarize job (the decode attention measured fastest for fa3_fp8)."""
    timed = [row for row in report["decode"] if row["impl"] == "fa3fp8-fp8" and "ms_per_token" in row]
    decode = min(timed, key=lambda row: row["ms_per_token"])["decode_attention"] if timed else "sdpa"
    started = time.perf_counter()
    model.save_pretrained(args.checkpoint_dir)
    tokenizer.save_pretrained(args.checkpoint_dir)
    save_s = time.perf_counter() - started
    resident_gb = torch.cuda.memory_allocated() / GB
    job = summarize_job(args.checkpoint_dir, tokenizer, args.summarize_tokens, "fa3_fp8", decode)
    return {"checkpoint_save_s": round(save_s, 1), "benchmark_model_resident_gb": round(resident_gb, 2), **job}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokenizer", required=True, help="tokenizer folder (its vocabulary fits the model's)")
    parser.add_argument("--out", type=Path, required=True, help="folder for e2e-<gpu>-<date>.json")
    parser.add_argument("--tokens", type=int, nargs="+", default=[8192, 32768, 131072])
    parser.add_argument("--impls", nargs="+", default=list(IMPL_NAMES), choices=list(IMPL_NAMES))
    parser.add_argument("--chunk-tokens", type=int, default=PREFILL_CHUNK_TOKENS)
    parser.add_argument("--repeats", type=int, default=1, help="prefills per row (the row reports the median)")
    parser.add_argument("--decode-steps", type=int, default=32, help="0 skips the decode rows")
    parser.add_argument("--one-pass", action=argparse.BooleanOptionalAction, default=True,
                        help="also prefill the longest length in one pass")
    parser.add_argument("--summarize-tokens", type=int, default=128000, help="0 skips the summarize job")
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("/tmp/docflash-e2e-8b"))
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("benchmarks/e2e.py needs a CUDA GPU")

    gpu = torch.cuda.get_device_name().split()[-1].lower()
    path = args.out / f"e2e-{gpu}-{dt.date.today().isoformat()}.json"
    args.out.mkdir(parents=True, exist_ok=True)
    model = build_model()
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    weights_gb = sum(p.numel() * p.element_size() for p in model.parameters()) / GB
    report = {
        "gpu": torch.cuda.get_device_name(), "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "model": "Llama-3.1-8B shape, random bf16",
        "weights_gb": round(weights_gb, 2), "rows": [], "decode": [],
    }

    def save() -> None:
        path.write_text(json.dumps(report, indent=1) + "\n")

    benchmark(model, tokenizer, args.impls, args, report, save)
    if args.summarize_tokens:  # last: the job's runtime stays loaded in this process, as in a worker
        report["summarize_job"] = checkpoint_and_summarize(model, tokenizer, args, report)
        print(json.dumps(report["summarize_job"]), flush=True)
        save()
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
