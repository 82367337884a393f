"""Measure the front end's tokenization time per prompt token (``FRONTEND_US_PER_TOKEN``).

The engines' OpenAI servers (vLLM's API server, SGLang's TokenizerManager, trtllm-serve) encode
each prompt's text with Hugging Face ``tokenizers`` before the engine sees it, so a benchmark's
TTFT includes it. This script times that encode on prompts built the way the serving benchmarks
build their random prompts (vLLM's and InferenceX's ``sample_random_requests``: consecutive
vocabulary ids from a random offset, decoded to text and encoded again), one prompt per call.

The vocabulary is a public 131k-entry tiktoken-style BPE one that ships inside a PyPI wheel
(Mistral's Tekken, ``mistral_common/data/tekken_240911.json`` in ``mistral-common``), turned
into a ``tokenizers`` BPE model with ``transformers``' ``TikTokenConverter``. Not a test
dependency; run it by hand where those packages are installed:

    pip install tokenizers transformers mistral-common
    python -m scripts.tokenize_bench [--lengths 1024 2048 4096 8192] [--prompts 20]

It prints, per prompt length, the median encode time and microseconds per token.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from importlib import resources
from pathlib import Path
from typing import Any

TEKKEN = "tekken_240911.json"


def _tokenizer() -> Any:
    from transformers.convert_slow_tokenizer import TikTokenConverter

    data = json.loads(resources.files("mistral_common").joinpath("data", TEKKEN).read_text())
    config = data["config"]
    size = config["default_vocab_size"] - config["default_num_special_tokens"]
    with tempfile.TemporaryDirectory() as folder:
        ranks = Path(folder, "tekken.tiktoken")
        ranks.write_text(
            "".join(f"{entry['token_bytes']} {entry['rank']}\n" for entry in data["vocab"][:size])
        )
        return TikTokenConverter(vocab_file=str(ranks), pattern=config["pattern"]).converted()


def measure(lengths: list[int], prompts: int, seed: int) -> list[tuple[int, float, float]]:
    """``(nominal length, median ms, median us per token)`` per prompt length."""
    tokenizer = _tokenizer()
    vocab = tokenizer.get_vocab_size()
    rng = random.Random(seed)
    rows = []
    for length in lengths:
        times, tokens = [], []
        for _ in range(prompts):
            offset = rng.randrange(vocab)
            text = tokenizer.decode([(offset + j) % vocab for j in range(length)])
            start = time.perf_counter()
            encoded = tokenizer.encode(text, add_special_tokens=False)
            times.append(time.perf_counter() - start)
            tokens.append(len(encoded.ids))
        median_s = statistics.median(times)
        rows.append((length, median_s * 1e3, median_s * 1e6 / statistics.mean(tokens)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print("tokens  median_ms  us_per_token")
    for length, ms, us in measure(args.lengths, args.prompts, args.seed):
        print(f"{length:6d}  {ms:9.2f}  {us:12.2f}")


if __name__ == "__main__":
    main()
