"""Causal language models: checked local model directories (:mod:`.files`), in-process text, tokenizer and tiny
models (:mod:`.text`), the one batched log-probability pass (:mod:`.logprobs`), DP fine-tuning with full weights or
LoRA (:mod:`.finetune`) and canaries (:mod:`.canaries`). Importing the package loads none of them (no torch)."""

__all__ = ["files", "text", "logprobs", "finetune", "canaries"]
