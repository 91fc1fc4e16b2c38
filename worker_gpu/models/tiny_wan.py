"""A tiny Wan 2.1 pipeline with random weights, built in code: for tests and benchmarks.

The configs are those of diffusers' own tests for the Wan pipeline (a 2-layer transformer,
a tiny VAE, a 2-layer UMT5 text encoder and a tokenizer built without any download). It is
saved in the pipeline's on-disk layout, so the worker loads it through the same catalogue
path as real weights. Its videos are noise; its shapes, steps and checkpoints are real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# Words the tokenizer knows whole; anything else is spelled out from characters.
_WORDS = ("a", "the", "red", "blue", "green", "kite", "sea", "over", "cat", "lighthouse", "at", "dusk", "waves")
_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789,.'!?-"


# The tiny T5-family text encoder both families' tiny components use (random weights).
TEXT_ENCODER_CONFIG: dict[str, Any] = {
    "vocab_size": 128,
    "d_model": 32,
    "d_kv": 8,
    "d_ff": 64,
    "num_layers": 2,
    "num_heads": 4,
    "relative_attention_num_buckets": 8,
    "relative_attention_max_distance": 32,
    "feed_forward_proj": "gated-gelu",
    "dropout_rate": 0.0,
    "pad_token_id": 0,
    "eos_token_id": 1,
}


def tiny_vocab_tokenizer() -> Any:
    """A T5 tokenizer over a few words and characters (the prompts tests use)."""
    from transformers import T5Tokenizer

    vocab = [("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0), ("\u2581", -2.0)]
    vocab += [(f"\u2581{word}", -1.0) for word in _WORDS]
    vocab += [(char, -3.0) for char in _CHARS]
    return T5Tokenizer(vocab=vocab, extra_ids=0)


def build_tiny_wan(folder: Path, scheduler: str = "unipc") -> Path:
    """Write a tiny random-weight Wan pipeline to ``folder`` (about 300 KiB); returns it."""
    from diffusers import WanPipeline

    pipe: Any = WanPipeline(**_components(scheduler, in_channels=16))
    folder.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(folder))
    return folder


def build_tiny_wan_i2v(folder: Path, scheduler: str = "unipc") -> Path:
    """Write a tiny random-weight Wan 2.1 image-to-video pipeline to ``folder``; returns it.

    As diffusers' own image-to-video tests build it: the transformer also takes the image's
    latents (16 noise + 4 mask + 16 image channels in) and the CLIP image embedding
    (``image_dim``), from a 2-layer CLIP vision tower over 32x32 crops.
    """
    from diffusers import WanImageToVideoPipeline
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    components = _components(scheduler, in_channels=36, image_dim=4)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        image_encoder = CLIPVisionModel(
            CLIPVisionConfig(
                hidden_size=4,
                projection_dim=4,
                num_hidden_layers=2,
                num_attention_heads=2,
                image_size=32,
                intermediate_size=16,
                patch_size=1,
            )
        )
    pipe: Any = WanImageToVideoPipeline(
        **components, image_encoder=image_encoder, image_processor=CLIPImageProcessor(crop_size=32, size=32)
    )
    folder.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(folder))
    return folder


def _components(scheduler: str, in_channels: int, image_dim: int | None = None) -> dict[str, Any]:
    """The tokenizer, text encoder, VAE, scheduler and transformer both tiny pipelines share."""
    from diffusers import (
        AutoencoderKLWan,
        FlowMatchEulerDiscreteScheduler,
        UniPCMultistepScheduler,
        WanTransformer3DModel,
    )
    from transformers import UMT5Config, UMT5EncoderModel

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        transformer = WanTransformer3DModel(
            patch_size=(1, 2, 2),
            num_attention_heads=2,
            attention_head_dim=12,
            in_channels=in_channels,
            out_channels=16,
            text_dim=32,
            freq_dim=256,
            ffn_dim=32,
            num_layers=2,
            cross_attn_norm=True,
            qk_norm="rms_norm_across_heads",
            rope_max_seq_len=32,
            image_dim=image_dim,
        )
        vae = AutoencoderKLWan(
            base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1, temperal_downsample=[False, True, True]
        )
        text_encoder = UMT5EncoderModel(UMT5Config(**TEXT_ENCODER_CONFIG, decoder_start_token_id=0))
    tokenizer = tiny_vocab_tokenizer()
    sampler: Any
    if scheduler == "unipc":
        sampler = UniPCMultistepScheduler(
            prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000, flow_shift=3.0
        )
    else:
        sampler = FlowMatchEulerDiscreteScheduler(shift=3.0)
    return {
        "tokenizer": tokenizer,
        "text_encoder": text_encoder,
        "vae": vae,
        "scheduler": sampler,
        "transformer": transformer,
    }


def tiny_catalogue_entry(name: str, folder: Path, **overrides: object) -> str:
    """A catalogue TOML entry for the tiny pipeline in ``folder`` (tests and benchmarks)."""
    fields: dict[str, object] = {
        "family": "wan",
        "weights": str(folder),
        "dtype": "float32",
        "sizes": ["32x32", "48x32", "64x64"],
        "default_size": "32x32",
        "min_seconds": 1,
        "max_seconds": 2,
        "default_seconds": 1,
        "fps": 8,
        "default_steps": 6,
        "max_steps": 200,
        "min_gpu_memory_gib": 0,
        "memory_bytes_per_frame_pixel": 64,
    }
    fields.update(overrides)
    lines = [f'[models."{name}"]']
    for key, value in fields.items():
        if isinstance(value, str):
            lines.append(f"{key} = {_toml_string(value)}")
        elif isinstance(value, list):
            lines.append(f"{key} = [{', '.join(_toml_string(str(v)) for v in value)}]")
        elif isinstance(value, bool):
            lines.append(f"{key} = {'true' if value else 'false'}")
        else:
            lines.append(f"{key} = {value}")
    return "\n".join(lines) + "\n"


def _toml_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
