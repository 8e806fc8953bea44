"""A BERT-base-sized model trained for a few steps on random tokens: no download.

The model is transformers' ``BertForSequenceClassification`` built from ``BertConfig()``'s
defaults (12 layers, hidden 768, 12 heads, FFN 3072, vocabulary 30522: bert-base-uncased's
shape) with random weights; the batch is random token ids. On a GPU the forward runs under
bf16 autocast (``--amp none``: fp32). Runs on CPU or GPU.

    python bench/gpu_record/bert_step.py --steps 8
    nsbridge triage --deep 3 bench/gpu_record/bert_step.py -- --steps 8
    python bench/gpu_record/bert_step.py --tiny --steps 7     (2 layers, hidden 128: a CPU check)
"""

from __future__ import annotations

import argparse
from typing import Any

import torch
from transformers import BertConfig, BertForSequenceClassification

TINY = {"num_hidden_layers": 2, "hidden_size": 128, "num_attention_heads": 2,
        "intermediate_size": 512}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    parser.add_argument("--layers", type=int, default=None, help="encoder layers (default 12)")
    parser.add_argument("--amp", choices=["bf16", "none"], default="bf16")
    parser.add_argument("--tiny", action="store_true", help="2 layers, hidden 128")
    args = parser.parse_args()

    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    size: dict[str, Any] = dict(TINY) if args.tiny else {}
    if args.layers:
        size["num_hidden_layers"] = args.layers
    config = BertConfig(**size)            # num_labels: 2 by default
    model = BertForSequenceClassification(config)
    torch.nn.Module.to(model, device)      # (transformers types its own .to for dtypes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    ids = torch.randint(0, config.vocab_size, (args.steps, args.batch_size, args.seq),
                        device=device)
    labels = torch.randint(0, 2, (args.steps, args.batch_size), device=device)
    amp = args.amp == "bf16" and device == "cuda"
    params = sum(p.numel() for p in model.parameters()) / 1e6
    print(f"bert: {params:.1f}M parameters, {config.num_hidden_layers} layers, hidden "
          f"{config.hidden_size}, attention {getattr(model.config, '_attn_implementation', '?')},"
          f" autocast {'bf16' if amp else 'off'}, on {device}", flush=True)

    loss = torch.zeros((), device=device)
    for step in range(args.steps):
        with torch.autocast(device_type=device, dtype=torch.bfloat16, enabled=amp):
            out = model(input_ids=ids[step], labels=labels[step])
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        optimizer.step()
        loss = out.loss.detach()
    print(f"last loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
