"""A tiny random Qwen2.5-VL (and a tiny fine-tuning loop) for tests and benchmarks.

:func:`make_tiny_qwen2_5_vl` writes a folder that loads exactly like a released
Qwen2.5-VL checkpoint (``config.json`` with ``model_type: qwen2_5_vl``, ``model.safetensors``,
tokenizer files, ``preprocessor_config`` / ``processor_config`` with the chat template):
the same classes (``Qwen2_5_VLForConditionalGeneration``, ``Qwen2_5_VLProcessor`` with a
``Qwen2VLImageProcessor``), a few layers, hidden size 64, a vision tower of 2 blocks. Its
tokenizer is a small byte-level BPE trained here with ``tokenizers`` on the prompt text
(a few hundred tokens) with Qwen2.5-VL's special tokens; the chat template follows
Qwen2.5-VL's (``<|im_start|>role ... <|im_end|>``, images as
``<|vision_start|><|image_pad|><|vision_end|>``). Images are resized to at most 56 x 56
pixels (4 visual tokens each).

:func:`fit_tiny` fine-tunes such a model on (prompt, answer) pairs with the usual causal-LM
loss on the answer tokens: a few dozen steps make it answer valid action lists, which is how
the tests fly closed loops with real (not canned) model outputs. It is no substitute for
training AirVLN-R1 (use LLaMA-Factory on :mod:`airplay.vln.sft_export` data, then TRL's
GRPO with :mod:`airplay.vln.rewards`).
"""

from __future__ import annotations

from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|vision_start|>", "<|vision_end|>",
                  "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
"""Qwen2.5-VL's chat layout, written for airplay (text and image parts)."""


def _corpus() -> list[str]:
    from airplay.vln.actions import ALL_ACTIONS, ActionSpace
    from airplay.vln.instructions import PERSONAS
    from airplay.vln.prompt import PromptBuilder

    builder = PromptBuilder(ActionSpace(names=tuple(a for a in ALL_ACTIONS if a != "STOP") + ("STOP",)))
    text = [builder.system_text(), "Instruction: Current state: x = 1.0 m, y = -2.5 m, z = 1.5 m, heading = 90 degrees",
            "Past actions (3): Earlier views, oldest first (7, 4, 2, 1 steps ago): Current view: What are the next",
            " ".join(f'["{a}", "{b}"]' for a in ALL_ACTIONS for b in ALL_ACTIONS), "0123456789 .,:;()[]{}\"'-"]
    text += [p.name + " " + p.description for p in PERSONAS]
    return text * 4


def make_tiny_qwen2_5_vl(folder: str | Path, seed: int = 0, hidden_size: int = 64, layers: int = 2,
                         vocab_size: int = 512) -> Path:
    """Write a tiny random Qwen2.5-VL checkpoint into ``folder`` (created); returns it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import (PreTrainedTokenizerFast, Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration,
                              Qwen2_5_VLProcessor, Qwen2VLImageProcessor)
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(_corpus(), trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = CHAT_TEMPLATE
    pixels = 56 * 56
    processor = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(min_pixels=pixels, max_pixels=pixels),
        tokenizer=fast, video_processor=Qwen2VLVideoProcessor(), chat_template=CHAT_TEMPLATE)
    ids = {t: fast.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS}
    heads = 4
    head_dim = hidden_size // heads
    half = head_dim // 2  # mrope sections (temporal, height, width) sum to head_dim / 2
    section = [half - 2 * (half // 3), half // 3, half // 3]
    config = Qwen2_5_VLConfig(
        text_config=dict(vocab_size=tok.get_vocab_size(), hidden_size=hidden_size, intermediate_size=2 * hidden_size,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=2,
                         max_position_embeddings=8192,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": section},
                         bos_token_id=ids["<|endoftext|>"], eos_token_id=ids["<|im_end|>"],
                         pad_token_id=ids["<|endoftext|>"]),
        vision_config=dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, out_hidden_size=hidden_size,
                           fullatt_block_indexes=[1], window_size=112),
        image_token_id=ids["<|image_pad|>"], video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"], vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True)
    torch.manual_seed(seed)
    model = Qwen2_5_VLForConditionalGeneration(config)
    model.generation_config.eos_token_id = ids["<|im_end|>"]
    model.generation_config.pad_token_id = ids["<|endoftext|>"]
    model.generation_config.do_sample = False
    model.save_pretrained(folder)
    processor.save_pretrained(folder)
    return folder


def fit_tiny(folder: str | Path, examples: list, steps: int = 40, lr: float = 3e-3, seed: int = 0) -> dict:
    """Fine-tune the checkpoint in ``folder`` in place on ``examples`` and save it.

    examples: (messages, PIL images, answer text) triples, ``messages`` in the chat format
    of :meth:`airplay.vln.prompt.Prompt.chat_messages`. Loss: cross-entropy on the answer
    tokens (and the closing ``<|im_end|>``) only. Returns ``{"loss_first", "loss_last"}``.
    """
    import torch
    from transformers import AutoProcessor, Qwen2_5_VLForConditionalGeneration

    folder = Path(folder)
    processor = AutoProcessor.from_pretrained(folder)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(folder)
    model.train()
    torch.manual_seed(seed)
    batches = []
    for messages, images, answer in examples:
        prompt = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        full = prompt + answer + "<|im_end|>\n"
        inputs = processor(text=[full], images=images or None, return_tensors="pt")
        n_prompt = processor(text=[prompt], images=images or None, return_tensors="pt")["input_ids"].shape[1]
        labels = inputs["input_ids"].clone()
        labels[:, :n_prompt] = -100
        labels[:, -1] = -100  # the trailing newline
        inputs.pop("mm_token_type_ids", None)
        batches.append((inputs, labels))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    losses = []
    for step in range(steps):
        inputs, labels = batches[step % len(batches)]
        loss = model(**inputs, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    model.eval()
    model.save_pretrained(folder)
    return {"loss_first": losses[0], "loss_last": losses[-1]}
