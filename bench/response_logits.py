"""What scoring responses costs when the output head runs on the response slots only, against every position.

``DataParallelPPOActor`` passes ``logits_to_keep`` to models that take it, so the LM head and the [B, S, vocab]
logits exist for the response slots alone; a model without that argument (here: the same model behind a forward
that does not take it) makes logits for every prompt and response position, as a plain forward does. Both score the
same batch with the same actor, alternating call by call: ``compute_log_prob`` (the old / reference log-prob pass)
and one ``update_policy`` (forward and backward).

Model: a Llama with Qwen2.5's vocabulary size (151,936) and a small body (random weights, float32, CPU), where the
head is most of the compute, as it is for the small models RL recipes often start from. Reported: median seconds
of each call, the ratio, and the size of the float32 logits each variant materialises per micro-batch.

    python bench/response_logits.py      # writes bench/results/response_logits.{json,md}
    python bench/response_logits.py --vocab 32000 --prompt 512 --response 64
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import markdown_table, median, write_results  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402

NAME = "response_logits"
SEED = 0
KEPT = "response slots only (logits_to_keep)"
EVERY = "every position (forward without logits_to_keep)"


class EveryPositionForward(torch.nn.Module):
    """The same model behind a forward without ``logits_to_keep``: logits for every position, as before."""

    def __init__(self, inner: torch.nn.Module):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False):
        return self.inner(
            input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=use_cache
        )


def build_model(vocab: int, hidden: int, layers: int) -> torch.nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        intermediate_size=hidden * 4,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    return LlamaForCausalLM(config).float()


def build_batch(rows: int, prompt: int, response: int, vocab: int) -> DataProto:
    gen = torch.Generator().manual_seed(SEED)
    prompt_ids = torch.randint(1, vocab, (rows, prompt), generator=gen)
    responses = torch.randint(1, vocab, (rows, response), generator=gen)
    mask = torch.ones(rows, prompt + response, dtype=torch.long)
    tensors = {
        "input_ids": torch.cat([prompt_ids, responses], dim=1),
        "responses": responses,
        "attention_mask": mask,
        "position_ids": torch.arange(prompt + response).repeat(rows, 1),
        "response_mask": torch.ones(rows, response, dtype=torch.long),
        "advantages": torch.randn(rows, response, generator=gen),
    }
    return DataProto.from_dict(tensors=tensors, meta_info={"temperature": 1.0, "micro_batch_size": rows})


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=151936)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--rows", type=int, default=4)
    parser.add_argument("--prompt", type=int, default=256)
    parser.add_argument("--response", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    model = build_model(args.vocab, args.hidden, args.layers)
    config = SimpleNamespace(
        ppo_mini_batch_size=args.rows,
        ppo_micro_batch_size_per_gpu=args.rows,
        ppo_epochs=1,
        grad_clip=1.0,
        loss_agg_mode="token-mean",
        clip_ratio=0.2,
        shuffle=False,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # lr 0: both variants keep scoring the same weights
    actors = {
        KEPT: DataParallelPPOActor(config, model, optimizer),
        EVERY: DataParallelPPOActor(config, EveryPositionForward(model), optimizer),
    }
    data = build_batch(args.rows, args.prompt, args.response, args.vocab)
    calls = {
        "compute_log_prob": lambda actor: actor.compute_log_prob(data),
        "update_policy": lambda actor: actor.update_policy(data),
    }
    seconds = {(call, name): [] for call in calls for name in actors}
    for round_index in range(args.repeats + 1):  # round 0 warms up
        for call, fn in calls.items():
            for name, actor in actors.items():
                start = time.perf_counter()
                fn(actor)
                if round_index:
                    seconds[(call, name)].append(time.perf_counter() - start)

    positions = {KEPT: args.response, EVERY: args.prompt + args.response}
    results, table = [], []
    for call in calls:
        baseline = median(seconds[(call, EVERY)])
        for name in actors:
            value = median(seconds[(call, name)])
            logits_mib = args.rows * positions[name] * args.vocab * 4 / 2**20
            results.append(
                {
                    "call": call,
                    "variant": name,
                    "median_s": value,
                    "vs_every_position": value / baseline,
                    "logits_mib": logits_mib,
                    "seconds": seconds[(call, name)],
                }
            )
            table.append([call, name, value, value / baseline, logits_mib])
    title = (
        f"Scoring {args.rows} responses of {args.response} tokens after {args.prompt}-token prompts; Llama, "
        f"hidden {args.hidden}, {args.layers} layers, vocabulary {args.vocab:,}, float32, CPU, {args.threads} "
        f"torch thread(s); median of {args.repeats} alternating calls."
    )
    markdown = (
        title
        + "\n\n"
        + markdown_table(["call", "output head on", "median s", "x every position", "float32 logits (MiB)"], table)
    )
    print(markdown)
    payload = {"args": vars(args), "results": results}
    write_results(NAME, payload, markdown, SEED)
    return payload


if __name__ == "__main__":
    main()
