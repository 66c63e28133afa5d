"""Using a trained run: sample, encode, decode, reconstruct and interpolate.

Each function takes a ``seqvae.run.Run`` loaded with ``load_run`` and works in batches through
compiled ``tf.function`` s; texts come back in input order. Texts go in and come out through
``seqvae.data.preparation`` (``encode_texts``, ``ids_to_texts``): SMILES for every molecule run,
SELFIES runs included, as RDKit's canonical SMILES unless ``run.raw_output``.

The functions live in ``compiled`` (the traced decoders and encoder), ``texts`` (decoding z),
``sampling`` (the prior, by rejection under the grammar or under its mask), ``priors``,
``encoding`` and ``latent`` (reconstruction, interpolation); this module gathers them.
"""

from seqvae.inference.compiled import compiled_decoder, compiled_encoder
from seqvae.inference.encoding import (encode, encode_batches, encode_ids, encode_to_file,
                                       encode_writable)
from seqvae.inference.latent import (interpolate, interpolate_pairs, latent_path, reconstruct,
                                     same_texts)
from seqvae.inference.priors import (describe_prior, fit_prior, loaded_prior, prior_draw,
                                     prior_encodings, run_prior)
from seqvae.inference.sampling import (first_violations, rejection_decoders, rejection_rounds,
                                       rejection_sample, sample, trace_rejection_sampler)
from seqvae.inference.texts import COMPILED_MASK_MIN, beam_hypotheses, decode, decode_id_batches

__all__ = ["COMPILED_MASK_MIN", "beam_hypotheses", "compiled_decoder", "compiled_encoder",
           "decode", "decode_id_batches", "describe_prior", "encode", "encode_batches",
           "encode_ids", "encode_to_file", "encode_writable", "first_violations", "fit_prior",
           "interpolate", "interpolate_pairs", "latent_path", "loaded_prior", "prior_draw",
           "prior_encodings", "reconstruct", "rejection_decoders", "rejection_rounds",
           "rejection_sample", "run_prior", "same_texts", "sample", "trace_rejection_sampler"]
