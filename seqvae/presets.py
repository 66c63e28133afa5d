"""The presets: the demo, the user's own data, the MOSES VAE's setting and the long run, each a
``Config`` built from the latent recipe (``with_latent_recipe``) that ``bench/latent_ablation.py``
chose; ``--preset NAME`` on the command line, ``preset_config(NAME)`` in Python."""

from __future__ import annotations

import dataclasses

from seqvae.config import Config, DataConfig, ModelConfig, TrainConfig
from seqvae.errors import SeqvaeError

PRESETS = ("demo", "moses", "moses_original", "user")


def demo_config() -> Config:
    """The README's main job: a small SMILES VAE with the latent recipe, 2,000 steps of 128 on
    320k MOSES molecules (a fixed length, so every machine trains the same model; 10 to 30
    minutes on 2 CPU cores). These settings differ from ``_cpu_config``, all chosen on the
    demo's budget (``bench/latent_ablation.md``): Adam peaks at 5e-3 (at 1e-3 the decoder barely
    learned to read z in 2,000 steps); beta is 0.07 per molecule, not 0.3 (greedy
    reconstruction of 1,000 random test molecules 63.4%; 57.1% at 0.1, about 23% at 0.3); its
    prior is the aggregate posterior kept after training (``model.prior=aggregate``), without
    which a beta this low leaves holes in N(0, I) (FCD/Test 1.29 at a widening of 1.4 and 2.01
    at 1.8 against 6.34 from N(0, I), the same decoder); and its decoder reads the
    grammar's state (``model.grammar_features``), which halves the samples the
    grammar rejects (11% of first draws against 26%), so that rejection under the grammar keeps
    0.85-0.96x the rate of sampling without it from run to run (0.72x without the features;
    docs/results.md); its samples sit a little farther from MOSES, so each posterior is
    widened 1.45x, not 1.6x (FCD/Test 1.72, novelty 0.835 by evaluate; at 1.6 2.03 and 0.876 by
    ``bench/rejection.py``). Like every preset it samples by rejection
    under the grammar (``with_latent_recipe``)."""
    base = _cpu_config()
    return dataclasses.replace(
        base, model=dataclasses.replace(base.model, prior="aggregate", prior_widen=1.45,
                                        grammar_features=True),
        train=dataclasses.replace(base.train, learning_rate=5e-3, kl_weight_end=0.07))


def _cpu_config() -> Config:
    """The demo-size model and schedule with the latent recipe, Adam peaking at 3e-3 after 100
    warm-up steps (cosine to 1e-4): 2,000 steps of 128 on 320k MOSES molecules. What the demo
    and user presets share; measured as such on the demo's budget (22.9% greedy
    reconstruction, FCD 3.7 sampled by rejection; ``bench/latent_ablation.md``).
    In ``train.precision=auto``: mixed bfloat16 on CPUs with AVX512-BF16 or AMX, where the demo
    trained that way measured as in float32 (``bench/latent_ablation.md``),
    float32 elsewhere."""
    return with_latent_recipe(Config(
        model=ModelConfig(encoder="gru", encoder_units=256, latent_dim=64, decoder_units=384,
                          decoder_layers=2, z_conditioning="both"),
        data=DataConfig(tokenizer="smiles", limit=320_000, subset="random"),
        train=TrainConfig(batch_size=128, epochs=1, max_steps=2000, learning_rate=3e-3,
                          warmup_steps=100,
                          lr_schedule="cosine", lr_min=1e-4, kl_schedule="linear",
                          kl_anneal_steps=1000, log_every=25, checkpoint_every=200,
                          precision="auto"),
    ))


def user_config() -> Config:
    """Training on the user's own data (``seqvae train mine.smi``): the demo's CPU-sized model
    with the recipe as measured on the demo's budget (``_cpu_config``: Adam 3e-3, beta 0.3),
    none of the demo's limits (all lines, no fixed length), up to 100 epochs with early
    stopping after 3 epochs without a better validation loss. Not the demo's 5e-3, beta 0.07 and
    aggregate prior: those were chosen for its 2,000 steps, and a user run stays near its peak
    for far longer (``--set model.prior=aggregate`` is measured on the demo only)."""
    base = _cpu_config()
    return dataclasses.replace(
        base, data=dataclasses.replace(base.data, limit=0),
        train=dataclasses.replace(base.train, epochs=100, max_steps=0, time_budget=0.0,
                                  patience=3))


def with_latent_recipe(config: Config) -> Config:
    """The training recipe that keeps information in z, chosen by ``bench/latent_ablation.py``
    (table in ``bench/latent_ablation.md``): a bidirectional GRU encoder, the KL weight as beta
    per molecule (0.3), and for SMILES runs Kekule SMILES, whose decoding under the grammar
    then leaves only valence to chance (aromatic SMILES that do not kekulize were the most
    common invalid sample), and sampling by rejection under the grammar
    (``model.rejection_rounds`` 8: the model conditioned on the grammar, every sample valid)
    with a decoder trained on the plain softmax. The constrained softmax (``train.grammar_softmax``,
    the recipe earlier) samples the mask's renormalised distribution, further from the
    data: on the demo's budget at this recipe's beta 0.3 and 3e-3, FCD 3.70 by rejection
    against 5.17 with the constrained softmax, the same reconstruction (22.9% and 22.6%;
    ``bench/latent_ablation.md``)."""
    return dataclasses.replace(
        config, model=dataclasses.replace(config.model, encoder_bidirectional=True,
                                          rejection_rounds=8),
        data=dataclasses.replace(config.data, kekulize=True),
        train=dataclasses.replace(config.train, kl_reduction="per_molecule", kl_weight_end=0.3,
                                  grammar_softmax=False))


def moses_config() -> Config:
    """The long run: the MOSES VAE's architecture and optimizer (``moses_original``) with the
    latent recipe (``with_latent_recipe``), for hours on CPUs or a GPU (10 epochs of MOSES), in
    ``train.precision=auto`` (mixed bfloat16 on CPUs with AVX512-BF16 or AMX)."""
    config = with_latent_recipe(moses_original_config())
    return dataclasses.replace(config, train=dataclasses.replace(config.train, precision="auto"))


def moses_original_config() -> Config:
    """The MOSES VAE's own setting (Polykovskiy et al. 2020, ``moses/vae/config.py``): GRU-256
    encoder, latent 128, 3 x GRU-512 decoder with one shared z -> state map, batch 512, Adam 3e-4,
    clip 50, KL weight 0 -> 0.05 per token; parameter count equal to MOSES's (4,552,478 on its
    vocabulary). The reference for speed comparisons (``bench/throughput.py``)."""
    return Config(model=ModelConfig(init_per_layer=False))


def preset_config(name: str) -> Config:
    """``demo``, ``moses``, ``moses_original`` or ``user`` (``--preset``)."""
    presets = {"demo": demo_config, "moses": moses_config, "moses_original": moses_original_config,
               "user": user_config}
    if name not in presets:
        raise SeqvaeError(f"unknown preset {name!r}; choose one of: {', '.join(presets)}")
    return presets[name]()
