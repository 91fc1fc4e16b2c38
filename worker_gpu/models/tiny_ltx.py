"""LTX-Video pipelines built in code with random weights: tiny ones for tests, the published
sizes on the meta device (no memory) for counting parameters, and the published VAE for
measuring a decode's memory (``python -m worker_gpu.models.tiny_ltx 2x8 2x16``; docs/models.md).

The tiny configs follow diffusers' own LTX pipeline tests (a 1-layer transformer, a tiny VAE,
a 2-layer T5 encoder), with the parts of LTX-Video 0.9.1 that matter to a resumable loop
switched on: the VAE decode is conditioned on a timestep and mixes in noise from the job's
generator, its decoder injects noise from torch's global generator, and the scheduler shifts
its sigmas by the video's token count (``use_dynamic_shifting``) as the published one does.
The tokenizer is built from a small vocabulary, with no download. Saved in the pipelines'
on-disk layout, the worker loads them through the same catalogue path as real weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

# Words the tokenizer knows whole; anything else is spelled out from characters.

# The scheduler of the published LTX-Video pipelines (diffusers' conversion script).
SCHEDULER_CONFIG: dict[str, Any] = {
    "use_dynamic_shifting": True,
    "base_shift": 0.95,
    "max_shift": 2.05,
    "base_image_seq_len": 1024,
    "max_image_seq_len": 4096,
    "shift_terminal": 0.1,
}

# LTX-Video 2B 0.9.1 as diffusers converts it: the transformer is the class's defaults, the VAE
# the conversion script's 0.9.1 config, the text encoder google/t5-v1_1-xxl's encoder.
FULL_VAE_CONFIG: dict[str, Any] = {
    "latent_channels": 128,
    "block_out_channels": (128, 256, 512, 512),
    "decoder_block_out_channels": (256, 512, 1024),
    "layers_per_block": (4, 3, 3, 3, 4),
    "decoder_layers_per_block": (5, 6, 7, 8),
    "spatio_temporal_scaling": (True, True, True, False),
    "decoder_spatio_temporal_scaling": (True, True, True),
    "decoder_inject_noise": (False, True, True, True),
    "upsample_residual": (True, True, True),
    "upsample_factor": (2, 2, 2),
    "timestep_conditioning": True,
    "patch_size": 4,
    "patch_size_t": 1,
}
FULL_T5_CONFIG: dict[str, Any] = {
    "vocab_size": 32128,
    "d_model": 4096,
    "d_kv": 64,
    "d_ff": 10240,
    "num_layers": 24,
    "num_heads": 64,
    "feed_forward_proj": "gated-gelu",
}


def build_tiny_ltx(folder: Path) -> Path:
    """Write a tiny random-weight LTX-Video pipeline to ``folder`` (about 800 KiB); returns it.

    Saved as an ``LTXPipeline``; ``LTXImageToVideoPipeline`` loads the same folder (the same
    components), as both load the published ``Lightricks/LTX-Video`` folder.
    """
    from diffusers import LTXPipeline

    pipe: Any = LTXPipeline(**tiny_components())
    folder.mkdir(parents=True, exist_ok=True)
    pipe.save_pretrained(str(folder))
    return folder


def tiny_components() -> dict[str, Any]:
    """The tokenizer, text encoder, VAE, scheduler and transformer of the tiny pipelines."""
    from diffusers import AutoencoderKLLTXVideo, FlowMatchEulerDiscreteScheduler, LTXVideoTransformer3DModel
    from transformers import T5Config, T5EncoderModel

    from worker_gpu.models.tiny_wan import TEXT_ENCODER_CONFIG, tiny_vocab_tokenizer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        transformer = LTXVideoTransformer3DModel(
            in_channels=8,
            out_channels=8,
            patch_size=1,
            patch_size_t=1,
            num_attention_heads=4,
            attention_head_dim=8,
            cross_attention_dim=32,
            num_layers=1,
            caption_channels=32,
        )
        vae: Any = AutoencoderKLLTXVideo(
            latent_channels=8,
            block_out_channels=(8, 8, 8, 8),
            decoder_block_out_channels=(8, 8, 8, 8),
            layers_per_block=(1, 1, 1, 1, 1),
            decoder_layers_per_block=(1, 1, 1, 1, 1),
            spatio_temporal_scaling=(True, True, False, False),
            decoder_spatio_temporal_scaling=(True, True, False, False),
            decoder_inject_noise=(True, True, True, True, True),
            timestep_conditioning=True,
            patch_size=1,
            patch_size_t=1,
            encoder_causal=True,
            decoder_causal=False,
        )
        # The injected noise's scales start at zero (trained weights make them non-zero): give
        # them values, so the decoder's noise reaches the video as it does with real weights.
        for name, parameter in vae.named_parameters():
            if "per_channel_scale" in name:
                parameter.data.normal_(0.0, 0.1)
        text_encoder = T5EncoderModel(T5Config(**TEXT_ENCODER_CONFIG))
    return {
        "tokenizer": tiny_vocab_tokenizer(),
        "text_encoder": text_encoder,
        "vae": vae,
        "scheduler": FlowMatchEulerDiscreteScheduler(**SCHEDULER_CONFIG),
        "transformer": transformer,
    }


def full_size_parameters() -> dict[str, int]:
    """Parameter counts of the published LTX-Video 2B 0.9.1 components, built on the meta
    device (no memory, no weights): what ``docs/models.md``'s memory figures start from."""
    from diffusers import AutoencoderKLLTXVideo, LTXVideoTransformer3DModel
    from transformers import T5Config, T5EncoderModel

    with torch.device("meta"):
        modules: dict[str, Any] = {
            "transformer": LTXVideoTransformer3DModel(),
            "vae": AutoencoderKLLTXVideo(**FULL_VAE_CONFIG),
            "text_encoder": T5EncoderModel(T5Config(**FULL_T5_CONFIG)),
        }
    return {name: sum(p.numel() for p in module.parameters()) for name, module in modules.items()}


def tiny_ltx_entry(name: str, folder: Path, **overrides: object) -> str:
    """A catalogue TOML entry for a tiny LTX pipeline in ``folder`` (tests and benchmarks)."""
    from worker_gpu.models.tiny_wan import tiny_catalogue_entry

    fields: dict[str, object] = {
        "family": "ltx",
        "sizes": ["32x32", "64x32", "64x64"],
        "guidance_scale": 3.0,
    }
    fields.update(overrides)
    return tiny_catalogue_entry(name, folder, **fields)


def vae_decode_peak_bytes(latent_frames: int, latent_side: int) -> tuple[int, int]:
    """The peak of live tensor bytes during one decode by the published-size VAE (random
    weights, float32, on the CPU) of ``latent_frames`` x ``latent_side``^2 latents, and the
    frame-pixels it decodes to.

    Live bytes are torch's own allocations and frees as its profiler records them (each op's
    self memory in time order): no allocator cache or heap reuse blurs them, as a process's
    resident set does. A GPU adds kernel workspaces and fragmentation on top.
    """
    from diffusers import AutoencoderKLLTXVideo

    from worker_gpu.models.ltx_video import DECODE_TIMESTEP

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        vae: Any = AutoencoderKLLTXVideo(**FULL_VAE_CONFIG)
        vae.eval()
        latents = torch.randn(1, FULL_VAE_CONFIG["latent_channels"], latent_frames, latent_side, latent_side)
        activities = [torch.profiler.ProfilerActivity.CPU]
        with torch.no_grad(), torch.profiler.profile(activities=activities, profile_memory=True) as profile:
            video = vae.decode(latents, torch.tensor([DECODE_TIMESTEP]), return_dict=False)[0]
    live = peak = 0
    for event in sorted(profile.events(), key=lambda e: e.time_range.start):
        live += event.self_cpu_memory_usage
        peak = max(peak, live)
    return peak, video.shape[2] * video.shape[3] * video.shape[4]


if __name__ == "__main__":
    # python -m worker_gpu.models.tiny_ltx 2x8 2x16: parameter counts, then decode peaks.
    import sys

    print(full_size_parameters())
    for frames, side in [tuple(int(v) for v in arg.split("x")) for arg in sys.argv[1:]]:
        peak, frame_pixels = vae_decode_peak_bytes(frames, side)
        print(
            f"latents {frames}x{side}x{side}: {frame_pixels} frame-pixels, "
            f"peak {peak} B, {peak / frame_pixels:.0f} B each"
        )
