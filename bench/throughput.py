"""Training and sampling throughput of seqvae against the MOSES VAE (PyTorch), in one run.

Long-lived worker processes hold one model each: seqvae (TensorFlow; a second one in bfloat16
with --precision mixed_bfloat16), MOSES as shipped (PyTorch, glibc malloc) and MOSES with
jemalloc preloaded. They train on the same molecules in the same batches, and the orchestrator
lets them run in turns, A B C A B C ..., so a change of the machine's load falls on every
configuration alike. Warm-up steps are not timed. Each worker
answers JSON commands, one line each, on its stdin/stdout; its stderr goes to a log file.

Run ``python bench/throughput.py --quick`` (see bench/README.md). The last line reads
``ratios: train_fp32=<x> train_bf16=<x> sample=<x> peak_fraction=<x>``.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before any TensorFlow import, workers too
# The run as a script puts bench/ first on sys.path; seqvae sits one folder up.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seqvae import parallel, runtime  # noqa: E402
from seqvae.config import Config, ModelConfig, TrainConfig  # noqa: E402

runtime.tune_process()  # TensorFlow set up as the command line sets it up (workers too)
from seqvae.data import batching
from seqvae.data.vocabulary import Vocabulary  # noqa: E402

# MOSES's default VAE (moses.vae.config with freeze_embeddings) in seqvae's terms; like MOSES,
# one z -> state map whose state starts every decoder layer (init_per_layer=False).
MODEL = ModelConfig(encoder="gru", encoder_units=256, encoder_layers=1,
                    encoder_bidirectional=False, latent_dim=128, decoder_units=512,
                    decoder_layers=3, z_conditioning="both", init_per_layer=False,
                    decoder_input="teacher_forcing", embedding_dim=0)
KL_WEIGHT = 0.05  # MOSES's kl_w_end; the weight does not change the cost of a step
SAMPLE_MAX_LEN = 100
JEMALLOC_CONF = "dirty_decay_ms:-1,muzzy_decay_ms:-1"
MATMUL_SIZE = 2048


# -- analytic cost --------------------------------------------------------------------------------

def flops_per_token(model: ModelConfig, vocab_size: int) -> dict[str, int]:
    """Forward FLOPs per real token, by part (a multiply-add counts 2).

    A GRU layer costs ``2*in*3H + 2*H*3H`` per token, the output layer ``2*H*V``. The one-hot
    input projections and z's share of the first decoder layer are counted as dense matmuls,
    as in MOSES, although seqvae gathers kernel rows and projects z once per sequence.
    """
    def gru(inputs: int, units: int) -> int:
        return 2 * inputs * 3 * units + 2 * units * 3 * units

    parts = {"encoder_gru": gru(vocab_size, model.encoder_units)}
    for layer in range(model.decoder_layers):
        inputs = vocab_size + model.latent_dim if layer == 0 else model.decoder_units
        parts[f"decoder_gru_{layer}"] = gru(inputs, model.decoder_units)
    parts["output"] = 2 * model.decoder_units * vocab_size
    return parts


def initial_state_gap(model: ModelConfig) -> int:
    """Parameters seqvae has and MOSES lacks: with ``init_per_layer`` a z -> state map per layer."""
    if not model.init_per_layer:
        return 0
    return (model.decoder_layers - 1) * (model.latent_dim + 1) * model.decoder_units


# -- workers --------------------------------------------------------------------------------------

class SeqvaeWorker:
    """The seqvae model trained by its real step (``build_training`` + ``make_train_step``)."""

    def __init__(self, spec: dict, precision: str):
        import tensorflow as tf

        from seqvae.training.steps import build_training, make_train_step, planned_steps

        self.tf = tf
        self.spec = spec
        arrays = np.load(spec["seqvae_data"])
        ids, lengths = arrays["ids"], arrays["lengths"]
        plan = [np.asarray(b) for b in spec["plan"]]
        width = spec["bucket_width"]
        self.padding = batching.padding_fraction(lengths, plan, width, ids.shape[1])
        self.batches = list(batching.make_dataset(ids, lengths, plan, width))
        self.tokens = [int(lengths[b].sum()) for b in plan]
        train = TrainConfig(batch_size=spec["batch_size"], epochs=1, jit_compile=spec["jit"],
                            precision=precision, seed=spec["seed"])
        config = Config(model=MODEL, train=train)
        total = planned_steps(train, len(plan))
        self.model, optimizer, counters = build_training(config, ids.shape[1], spec["vocab_size"], total)
        self.bf16 = _computes_in_bfloat16(self.model)
        self.train_step = make_train_step(self.model, optimizer, train, total, counters)
        if not spec["run_dir"]:
            # A fresh model, not the one being trained: its samples, and so the number of
            # decoding steps before all have ended, must not depend on --warmup/--rounds/--steps.
            import keras

            from seqvae.model.vae import SequenceVAE

            keras.utils.set_random_seed(spec["seed"] + 1)
            self.sample_model = SequenceVAE(MODEL, spec["vocab_size"], ids.shape[1]).build_weights()
            self.sample_note = "untrained model (fresh initial weights)"
        else:
            from seqvae.run import load_run

            run = load_run(spec["run_dir"])
            self.sample_model = run.model
            self.sample_note = f"trained run {spec['run_dir']}"
            if run.config.model != MODEL:
                self.sample_note += " (its architecture differs from the benchmark's)"
        self.sampler = tf.function(self._sample)  # not XLA: compaction changes the batch shape

    def info(self) -> dict:
        params = sum(int(np.prod(v.shape)) for v in self.model.trainable_variables)
        return {"params": params, "padding_fraction": self.padding, "bf16": self.bf16,
                "sample_note": self.sample_note}

    def train(self, first: int, count: int) -> dict:
        start = time.perf_counter()
        for i in range(first, first + count):
            loss = float(self.train_step(self.batches[i])["loss"])  # waits for the step
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "loss": loss, "tokens": sum(self.tokens[first:first + count]),
                "molecules": sum(int(b.shape[0]) for b in self.batches[first:first + count])}

    def precompile(self, first: int, count: int) -> dict:
        """Under XLA every new batch shape compiles: one untimed step per shape of the timed batches."""
        seen, start = set(), time.perf_counter()
        for batch in self.batches[first:first + count]:
            if tuple(batch.shape) not in seen:
                seen.add(tuple(batch.shape))
                float(self.train_step(batch)["loss"])
        return {"shapes": len(seen), "seconds": time.perf_counter() - start}

    def _sample(self, num, seed):
        """One batch of ``num`` prior samples: ``sample_prior``'s first batch (its Python loop
        over batches cannot take a tensor count)."""
        from seqvae.model import randomness
        from seqvae.model.decoding import prior_z, sample_from_z

        z = prior_z(num, self.sample_model.config.latent_dim, seed)
        return sample_from_z(self.sample_model, z, seed=randomness.fold_in(
            randomness.as_seed(seed), 0), max_len=SAMPLE_MAX_LEN)

    def sample(self, num: int, seed: int) -> dict:
        tf = self.tf
        start = time.perf_counter()
        # num as a tensor: one trace for every count.
        ids = self.sampler(tf.constant(num), tf.constant([seed, 0], tf.int32)).numpy()
        seconds = time.perf_counter() - start
        is_eos = ids == Vocabulary.eos_id
        length = np.where(is_eos.any(axis=1), is_eos.argmax(axis=1), ids.shape[1])
        return {"seconds": seconds, "num": num, "mean_length": float(length.mean()),
                "longest": int(length.max())}


class PeakWorker:
    """Measures the machine's matmul peak with TensorFlow's thread pool on every core (its worker
    is started with ``TF_NUM_INTRAOP_THREADS`` = the cores: importing seqvae sets one thread per
    op on two cores, which would halve a single matmul's rate)."""

    def __init__(self):
        import tensorflow as tf

        self.tf = tf

    def matmul_peak(self, repeats: int) -> dict:
        """Best GFLOP/s of a square matmul in float32 and bfloat16 (the machine's matmul peak)."""
        tf = self.tf
        matmul = tf.function(tf.matmul)
        out = {}
        for dtype in (tf.float32, tf.bfloat16):
            a = tf.cast(tf.random.normal([MATMUL_SIZE, MATMUL_SIZE]), dtype)
            b = tf.cast(tf.random.normal([MATMUL_SIZE, MATMUL_SIZE]), dtype)
            matmul(a, b).numpy()
            best = float("inf")
            for _ in range(repeats):
                start = time.perf_counter()
                matmul(a, b).numpy()
                best = min(best, time.perf_counter() - start)
            out[dtype.name] = 2 * MATMUL_SIZE**3 / best / 1e9
        return out


def _computes_in_bfloat16(model) -> bool:
    import keras

    layers = [model, *model._flatten_layers()]
    return keras.config.dtype_policy().name == "mixed_bfloat16" or any(
        getattr(layer, "compute_dtype", None) == "bfloat16" for layer in layers)


def load_moses():
    """MOSES's VAE, its config parser and its vocabulary classes, unmodified.

    ``import moses`` runs the package ``__init__``, which imports pandas, matplotlib, scipy and
    the metrics (``molsets`` is installed with ``--no-deps``); the three files needed here only
    need torch, so they are loaded by path, and from ``utils.py`` only the vocabulary classes.
    """
    import torch

    root = importlib.util.find_spec("moses").submodule_search_locations[0]

    def module(name: str, relative: str):
        spec = importlib.util.spec_from_file_location(name, os.path.join(root, relative))
        loaded = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(loaded)
        return loaded

    model_module = module("moses_vae_model", "vae/model.py")
    config_module = module("moses_vae_config", "vae/config.py")
    utils_path = os.path.join(root, "utils.py")
    with open(utils_path) as handle:
        tree = ast.parse(handle.read())
    wanted = {"SpecialTokens", "CharVocab", "OneHotVocab"}
    classes = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name in wanted]
    namespace = {"torch": torch}
    exec(compile(ast.Module(body=classes, type_ignores=[]), utils_path, "exec"), namespace)
    return model_module.VAE, config_module.get_parser, namespace["OneHotVocab"]


def moses_sample(self, n_batch, max_len=100, z=None, temp=1.0):
    """``moses.vae.model.VAE.sample`` with a bool ``eos_mask``.

    The shipped loop makes the mask uint8 and indexes with ``x[~eos_mask, i]``, which current
    torch rejects; otherwise this is the same loop, line for line.
    """
    import torch
    import torch.nn.functional as F

    with torch.no_grad():
        if z is None:
            z = self.sample_z_prior(n_batch)
        z = z.to(self.device)
        z_0 = z.unsqueeze(1)
        h = self.decoder_lat(z)
        h = h.unsqueeze(0).repeat(self.decoder_rnn.num_layers, 1, 1)
        w = torch.tensor(self.bos, device=self.device).repeat(n_batch)
        x = torch.tensor([self.pad], device=self.device).repeat(n_batch, max_len)
        x[:, 0] = self.bos
        end_pads = torch.tensor([max_len], device=self.device).repeat(n_batch)
        eos_mask = torch.zeros(n_batch, dtype=torch.bool, device=self.device)
        for i in range(1, max_len):
            x_emb = self.x_emb(w).unsqueeze(1)
            x_input = torch.cat([x_emb, z_0], dim=-1)
            o, h = self.decoder_rnn(x_input, h)
            y = self.decoder_fc(o.squeeze(1))
            y = F.softmax(y / temp, dim=-1)
            w = torch.multinomial(y, 1)[:, 0]
            x[~eos_mask, i] = w[~eos_mask]
            i_eos_mask = ~eos_mask & (w == self.eos)
            end_pads[i_eos_mask] = i + 1
            eos_mask = eos_mask | i_eos_mask
        new_x = [x[i, :end_pads[i]] for i in range(x.size(0))]
        return [self.tensor2string(i_x) for i_x in new_x]


class MosesWorker:
    """MOSES's VAE with its own training step (forward, backward, clip at 50, Adam)."""

    def __init__(self, spec: dict):
        import torch
        from torch.nn.utils import clip_grad_norm_

        torch.set_num_threads(2)
        torch.manual_seed(spec["seed"])
        self.torch, self.clip = torch, clip_grad_norm_
        vae_class, get_parser, vocab_class = load_moses()
        vae_class.sample = moses_sample
        with open(spec["moses_data"]) as handle:
            data = json.load(handle)
        config = get_parser().parse_args([])
        config.freeze_embeddings = True  # one-hot inputs, as seqvae's embedding_dim=0
        vocab = vocab_class(set(data["chars"]))
        self.model = vae_class(vocab, config)
        self.params = [p for p in self.model.vae.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=config.lr_start)
        self.clip_grad = config.clip_grad
        texts = data["texts"]
        # MOSES's collate: sort each batch by length (longest first) for pack_sequence.
        self.batches = []
        for batch in data["plan"]:
            strings = sorted((texts[i] for i in batch), key=len, reverse=True)
            self.batches.append([self.model.string2tensor(s, device="cpu") for s in strings])
        self.tokens = [sum(len(t) for t in batch) for batch in self.batches]
        self.model.train()

    def info(self) -> dict:
        with open("/proc/self/maps") as handle:
            jemalloc = "libjemalloc" in handle.read()
        return {"params": sum(p.numel() for p in self.params),
                "frozen_params": sum(p.numel() for p in self.model.parameters() if not p.requires_grad),
                "vocab_size": len(self.model.vocabulary), "jemalloc_loaded": jemalloc,
                "torch_threads": self.torch.get_num_threads()}

    def train(self, first: int, count: int) -> dict:
        start = time.perf_counter()
        for batch in self.batches[first:first + count]:
            kl_loss, recon_loss = self.model(batch)
            loss = KL_WEIGHT * kl_loss + recon_loss
            self.optimizer.zero_grad()
            loss.backward()
            self.clip(self.params, self.clip_grad)
            self.optimizer.step()
            value = loss.item()
        seconds = time.perf_counter() - start
        return {"seconds": seconds, "loss": value, "tokens": sum(self.tokens[first:first + count]),
                "molecules": sum(len(b) for b in self.batches[first:first + count])}

    def sample(self, num: int, seed: int) -> dict:
        self.torch.manual_seed(seed)
        self.model.eval()
        start = time.perf_counter()
        texts = self.model.sample(num, max_len=SAMPLE_MAX_LEN)
        seconds = time.perf_counter() - start
        self.model.train()
        lengths = [len(t) for t in texts]
        return {"seconds": seconds, "num": num, "mean_length": float(np.mean(lengths)),
                "longest": max(lengths)}


def worker_main(kind: str, spec_path: str) -> None:
    """Serves commands ``{"cmd": name, ...args}`` read from stdin, one JSON reply line each."""
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what libraries print goes to the log, never into the replies
    with open(spec_path) as handle:
        spec = json.load(handle)
    spawned = float(os.environ["BENCH_SPAWNED_AT"])
    worker = None
    for line in sys.stdin:
        command = json.loads(line)
        name = command.pop("cmd")
        try:
            if name == "setup" and kind == "peak":
                worker, reply = PeakWorker(), {}
            elif name == "setup":
                worker = (MosesWorker(spec) if kind == "moses" else
                          SeqvaeWorker(spec, "mixed_bfloat16" if kind == "seqvae_bf16" else "float32"))
                reply = worker.info()
                if reply.get("bf16") is False and kind == "seqvae_bf16":
                    reply["first_step_s"] = float("nan")
                else:
                    reply.update(worker.train(0, 1), first_step_s=time.time() - spawned)
            elif name == "exit":
                usage = resource.getrusage(resource.RUSAGE_SELF)
                replies.write(json.dumps({"max_rss_mib": usage.ru_maxrss / 1024}) + "\n")
                return
            else:
                cpu, faults = os.times(), resource.getrusage(resource.RUSAGE_SELF).ru_minflt
                reply = getattr(worker, name)(**command)
                ended = os.times()  # the whole process: every thread of TF, torch and OpenMP
                reply.update(user_s=ended.user - cpu.user, sys_s=ended.system - cpu.system,
                             minor_faults=resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults)
        except Exception as error:  # reported by the orchestrator with the log's path
            import traceback

            traceback.print_exc()
            reply = {"error": f"{type(error).__name__}: {error}"}
        replies.write(json.dumps(reply) + "\n")


# -- orchestration --------------------------------------------------------------------------------

class Worker:
    """One worker process and its command channel."""

    def __init__(self, label: str, kind: str, spec_path: str, log_dir: str, env: dict | None = None):
        self.label = label
        slug = label.lower().replace(" + ", "-").replace(" ", "-")
        self.log_path = os.path.join(log_dir, f"{slug}.log")
        full_env = {**os.environ, **(env or {}), "BENCH_SPAWNED_AT": repr(time.time())}
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--worker", kind, "--spec", spec_path],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(self.log_path, "w"),
            text=True, env=full_env)

    def call(self, cmd: str, **args) -> dict:
        self.process.stdin.write(json.dumps({"cmd": cmd, **args}) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"bench: the {self.label} worker died during '{cmd}'; "
                             f"see {self.log_path}:\n{_tail(self.log_path)}")
        reply = json.loads(line)
        if "error" in reply:
            raise SystemExit(f"bench: the {self.label} worker failed in '{cmd}': {reply['error']}; "
                             f"see {self.log_path}")
        return reply

    def close(self) -> dict:
        reply = self.call("exit")
        self.process.wait(timeout=60)
        return reply


def _tail(path: str, lines: int = 15) -> str:
    with open(path) as handle:
        return "".join(handle.readlines()[-lines:])


def jemalloc_path() -> str | None:
    try:
        listing = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        listing = ""
    for line in listing.splitlines():
        if "libjemalloc.so.2" in line and "=>" in line:
            return line.split("=>")[1].strip()
    fallback = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
    return fallback if os.path.exists(fallback) else None


def _token_chunks(texts: list[str], regex, size: int = 20000):
    """Token lists of chunks of molecules (for counting only): one regex pass per chunk.

    Tokenizing molecule by molecule takes half a minute for the 1.6 M of MOSES train. In the
    joined chunk a newline token per boundary proves that no token spans two molecules.
    """
    for start in range(0, len(texts), size):
        part = texts[start:start + size]
        tokens = regex.findall("\n".join(part))
        if tokens.count("\n") != len(part) - 1:
            raise SystemExit("bench: a SMILES token spans two molecules; cannot count tokens this way")
        yield [t for t in tokens if t != "\n"]


def prepare(args, folder: str) -> tuple[str, dict]:
    """Molecules, both vocabularies, the batch plan; written for the workers. Returns the spec path."""
    import re

    from seqvae.data.batching import batch_plan
    from seqvae.data.sources import read_sequences
    from seqvae.data.tokenizers import SMILES_PATTERN, SmilesTokenizer

    texts = read_sequences("moses:train").texts
    seqvae_vocab = Vocabulary.fit(_token_chunks(texts, re.compile(SMILES_PATTERN + "|.", re.DOTALL)))
    chars = sorted(set("".join(texts)))
    moses_vocab_size = len(chars) + 4  # CharVocab adds <bos> <eos> <pad> <unk>
    vocab_size = max(len(seqvae_vocab), moses_vocab_size)
    while len(chars) + 4 < vocab_size:  # unused characters, so both models have V outputs
        chars.append(chr(0xE000 + len(chars)))

    steps = args.warmup + args.rounds * args.steps
    count = steps * args.batch_size
    order = np.random.default_rng(args.seed).permutation(len(texts))[:count]
    chosen = [texts[i] for i in order]
    tokenizer = SmilesTokenizer()
    encoded = [seqvae_vocab.encode(tokenizer.tokenize(t)) for t in chosen]
    longest = max(len(e) for e in encoded)
    ids = np.zeros((count, longest), np.int32)
    for row, e in enumerate(encoded):
        ids[row, :len(e)] = e
    lengths = np.array([len(e) for e in encoded], np.int32)
    plan = batch_plan(lengths, args.batch_size, args.seed, epoch=0)[:steps]
    np.savez(os.path.join(folder, "seqvae.npz"), ids=ids, lengths=lengths)
    with open(os.path.join(folder, "moses.json"), "w") as handle:
        json.dump({"texts": chosen, "chars": chars, "plan": [b.tolist() for b in plan]}, handle)
    spec = {"seqvae_data": os.path.join(folder, "seqvae.npz"),
            "moses_data": os.path.join(folder, "moses.json"),
            "plan": [b.tolist() for b in plan], "batch_size": args.batch_size,
            "bucket_width": Config(train=TrainConfig(jit_compile=args.jit)).bucket_width(),
            "vocab_size": vocab_size, "seed": args.seed, "jit": args.jit,
            "run_dir": args.run_dir}
    path = os.path.join(folder, "spec.json")
    with open(path, "w") as handle:
        json.dump(spec, handle)
    facts = {"seqvae_vocab": len(seqvae_vocab), "moses_vocab": moses_vocab_size,
             "vocab_size": vocab_size, "molecules": count, "train_size": len(texts),
             "seqvae_tokens": float(lengths.mean()),
             "moses_tokens": float(np.mean([len(t) + 2 for t in chosen]))}
    return path, facts


def run(args) -> None:
    """Sets the workers up one at a time, then alternates their timed rounds; prints the table."""
    folder = tempfile.mkdtemp(prefix="seqvae-bench-")
    load_at_start = os.getloadavg()[0]
    spec_path, facts = prepare(args, folder)
    preload = jemalloc_path()
    configs = [("seqvae fp32", "seqvae", None), ("MOSES as shipped", "moses", None)]
    if preload:
        configs.append(("MOSES + jemalloc", "moses",
                        {"LD_PRELOAD": preload, "MALLOC_CONF": JEMALLOC_CONF}))
    if args.precision == "mixed_bfloat16":
        configs.insert(1, ("seqvae bf16", "seqvae_bf16", None))
    workers, setup = {}, {}
    for label, kind, env in configs:  # one at a time: the time to the first step is not shared
        worker = Worker(label, kind, spec_path, folder, env)
        setup[label] = worker.call("setup")
        if label == "seqvae bf16" and not setup[label]["bf16"]:
            worker.close()
            continue
        workers[label] = worker
        print(f"bench: {label} ready, first step after {setup[label]['first_step_s']:.1f} s",
              file=sys.stderr)
    peak_worker = Worker("matmul peak", "peak", spec_path, folder,
                         {"TF_NUM_INTRAOP_THREADS": str(parallel.worker_count())})
    peak_worker.call("setup")
    timed_first = args.warmup
    for label, worker in workers.items():  # remaining warm-up steps, untimed
        if args.warmup > 1:
            worker.call("train", first=1, count=args.warmup - 1)
        if args.jit and label.startswith("seqvae"):
            done = worker.call("precompile", first=timed_first, count=args.rounds * args.steps)
            print(f"bench: {label}: XLA compiled {done['shapes']} batch shapes in "
                  f"{done['seconds']:.1f} s (untimed)", file=sys.stderr)
        if label != "seqvae bf16":  # samples in float32 like seqvae fp32: not timed twice
            worker.call("sample", num=64, seed=0)  # traces / warms the sampler, untimed

    train = {label: [] for label in workers}
    sample = {label: [] for label in workers}
    peaks = []
    for r in range(args.rounds):
        for label, worker in workers.items():
            out = worker.call("train", first=timed_first + r * args.steps, count=args.steps)
            train[label].append(out)
            print(f"bench: round {r + 1}/{args.rounds} {label}: "
                  f"{out['molecules'] / out['seconds']:.1f} mol/s", file=sys.stderr)
            if label == "seqvae fp32":
                peaks.append(peak_worker.call("matmul_peak", repeats=3))
        if r < args.sample_rounds:
            for label, worker in workers.items():
                if label != "seqvae bf16":
                    sample[label].append(worker.call("sample", num=args.samples, seed=r + 1))
    memory = {label: worker.close()["max_rss_mib"] for label, worker in workers.items()}
    peak_worker.close()
    facts["load"] = (load_at_start, os.getloadavg()[0])
    shutil.rmtree(folder)  # kept when a worker fails: its log is named in the message
    report(args, facts, setup, train, sample, peaks, memory)


def _rates(rounds: list[dict], key: str = "molecules") -> list[float]:
    return [r[key] / r["seconds"] for r in rounds]


def cpu_description() -> str:
    """The CPU the figures come from: model name, family/model/stepping and the matrix features
    that decide what bfloat16 can gain (AVX512-BF16, AMX), from /proc/cpuinfo."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        import platform

        return f"{platform.processor() or platform.machine()} (no /proc/cpuinfo)"
    flags = set(fields.get("flags", "").split())
    features = [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16", "amx_tile") if f in flags]
    return (f"{fields.get('model name', 'unknown')}, family {fields.get('cpu family', '?')} model "
            f"{fields.get('model', '?')} stepping {fields.get('stepping', '?')}, "
            f"{os.cpu_count()} logical cores, {' '.join(features) or 'no AVX2'}")


def report(args, facts, setup, train, sample, peaks, memory) -> None:
    per_token = flops_per_token(MODEL, facts["vocab_size"])
    forward = sum(per_token.values())
    print(f"\nCPU: {cpu_description()}")
    print(f"\nMOSES train: {facts['molecules']} of {facts['train_size']} molecules (seeded shuffle), "
          f"batch {args.batch_size}, {args.warmup} warm-up step(s), {args.rounds} rounds x "
          f"{args.steps} timed step(s), alternating; {args.samples} prior samples x "
          f"{min(args.sample_rounds, args.rounds)} round(s), max_len {SAMPLE_MAX_LEN}"
          f"{'; seqvae training step under XLA (--jit)' if args.jit else ''}")
    cores = os.cpu_count() or 1
    print(f"load average (1 min) at start {facts['load'][0]:.2f}, at the end {facts['load'][1]:.2f}, "
          f"{cores} cores")
    if facts["load"][0] > 0.75 * cores:
        print("WARNING: the machine was busy before the benchmark started; other jobs share the "
              "cores, and MOSES's OpenMP threads suffer more from that than TensorFlow's")
    print(f"vocabulary: seqvae (atom tokens) {facts['seqvae_vocab']}, MOSES CharVocab "
          f"{facts['moses_vocab']}; both models built with V={facts['vocab_size']}")
    print(f"tokens per molecule: seqvae {facts['seqvae_tokens']:.1f} (incl. <eos>), "
          f"MOSES {facts['moses_tokens']:.1f} (characters incl. <bos>, <eos>)")
    seqvae_setup = setup["seqvae fp32"]
    print(f"seqvae padding fraction (length-bucketed batches): {seqvae_setup['padding_fraction']:.3f}")
    print("\n{:<18} {:>26} {:>13} {:>10} {:>10} {:>12}".format(
        "configuration", "train mol/s med (min-max)", "sample mol/s", "peak MiB",
        "1st step s", "parameters"))
    medians, sampling = {}, {}
    for label in train:
        rates = _rates(train[label])
        medians[label] = statistics.median(rates)
        sampling[label] = statistics.median(_rates(sample[label], "num")) if sample[label] else float("nan")
        shown = "-" if sampling[label] != sampling[label] else f"{sampling[label]:.1f}"  # NaN: none
        print("{:<18} {:>26} {:>13} {:>10.0f} {:>10.1f} {:>12,}".format(
            label, f"{medians[label]:.1f} ({min(rates):.1f}-{max(rates):.1f})", shown,
            memory[label], setup[label]["first_step_s"], setup[label]["params"]))

    print("\nCPU time in the timed training rounds (user / system, whole worker process):")
    for label, rounds in train.items():
        user, system = sum(r["user_s"] for r in rounds), sum(r["sys_s"] for r in rounds)
        steps = args.rounds * args.steps
        print(f"  {label:<18} user {user:7.1f} s  sys {system:6.1f} s  "
              f"({system / max(user + system, 1e-9):.1%} sys), "
              f"{sum(r['minor_faults'] for r in rounds) / steps:,.0f} page faults per step")

    moses = [label for label in train if label.startswith("MOSES")]
    fast_train = max(moses, key=medians.get)
    fast_sample = max(moses, key=sampling.get)
    moses_setup = setup["MOSES as shipped"]
    gap, expected = seqvae_setup["params"] - moses_setup["params"], initial_state_gap(MODEL)
    why = ("equal" if gap == 0 else
           f"difference {gap:,}: seqvae maps z to a state per decoder layer, MOSES to one state "
           f"for all {MODEL.decoder_layers}" if gap == expected else
           f"difference {gap:,}, UNEXPLAINED (expected {expected:,})")
    print(f"\nparameters: seqvae {seqvae_setup['params']:,}, MOSES {moses_setup['params']:,} trainable "
          f"(+{moses_setup['frozen_params']:,} frozen one-hot embedding): {why}")
    for label in moses:
        info = setup[label]
        print(f"{label}: torch threads {info['torch_threads']}, jemalloc loaded: {info['jemalloc_loaded']}")
    if not any(label.startswith("MOSES + jemalloc") for label in train):
        print("MOSES + jemalloc: skipped (libjemalloc.so.2 not found; apt-get install -y libjemalloc2)")
    lengths = {label: statistics.mean(r["mean_length"] for r in rounds)
               for label, rounds in sample.items() if rounds}
    longest = max((r["longest"] for r in sample.get("seqvae fp32", [])), default=0)
    print(f"sampling: seqvae from the {seqvae_setup['sample_note']}, mean length "
          f"{lengths.get('seqvae fp32', float('nan')):.1f} tokens, loop stopped after the longest, "
          f"{longest} steps; MOSES untrained (its loop always runs {SAMPLE_MAX_LEN - 1} steps), "
          f"mean length {lengths.get(fast_sample, float('nan')):.1f} characters")

    print(f"\nFLOPs per real token (forward; backward counted as 2x): {forward:,} = "
          + " + ".join(f"{name} {value:,}" for name, value in per_token.items()))
    flops = [3 * forward * r["tokens"] / r["seconds"] / 1e9 for r in train["seqvae fp32"]]
    achieved = statistics.median(flops)
    peak32 = max(p["float32"] for p in peaks)
    peak16 = max(p["bfloat16"] for p in peaks)
    print(f"seqvae training: {achieved:.1f} GFLOP/s achieved (median); matmul {MATMUL_SIZE}^2 peak "
          f"{peak32:.1f} GFLOP/s float32, {peak16:.1f} GFLOP/s bfloat16")
    moses_flops = [3 * forward * r["tokens"] / r["seconds"] / 1e9 for r in train[fast_train]]
    print(f"{fast_train} training: {statistics.median(moses_flops):.1f} GFLOP/s on the same count")

    bf16 = medians.get("seqvae bf16", float("nan")) / medians[fast_train]
    if args.precision != "mixed_bfloat16":
        print("train_bf16: not requested (--precision mixed_bfloat16)")
    elif "seqvae bf16" not in train:
        print("train_bf16: with train.precision=mixed_bfloat16 no seqvae layer computes in "
              "bfloat16 (this seqvae does not apply it), so there is no bf16 number")
    shipped = "MOSES as shipped"
    print(f"against {shipped}: train_fp32={medians['seqvae fp32'] / medians[shipped]:.3f} "
          f"sample={sampling['seqvae fp32'] / sampling[shipped]:.3f}")
    print(f"faster MOSES configuration: training {fast_train}, sampling {fast_sample}")
    print(f"measured peaks on this CPU: {peak32:.1f} GFLOP/s float32, {peak16:.1f} GFLOP/s "
          f"bfloat16 ({cpu_description()})")
    print(f"ratios: train_fp32={medians['seqvae fp32'] / medians[fast_train]:.3f} "
          f"train_bf16={bf16:.3f} sample={sampling['seqvae fp32'] / sampling[fast_sample]:.3f} "
          f"peak_fraction={achieved / peak32:.3f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="2 warm-up steps, 2 rounds of 1 step, 1 sampling round")
    parser.add_argument("--rounds", type=int, default=4, help="timed rounds per configuration")
    parser.add_argument("--steps", type=int, default=2, help="timed training steps per round")
    parser.add_argument("--warmup", type=int, default=3,
                        help="untimed training steps first (both need about 3 to settle)")
    parser.add_argument("--sample-rounds", type=int, default=2, help="rounds that also sample")
    parser.add_argument("--samples", type=int, default=2000, help="prior samples per sampling round")
    parser.add_argument("--batch-size", type=int, default=512)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--jit", action="store_true",
                        help="seqvae's training step with jit_compile (XLA); sampling stays a tf.function")
    parser.add_argument("--precision", choices=("float32", "mixed_bfloat16"), default="float32",
                        help="mixed_bfloat16 adds a seqvae bf16 configuration")
    parser.add_argument("--run-dir", help="sample from this trained seqvae run (seqvae.run.load_run)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--spec", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker_main(args.worker, args.spec)
    if args.quick:
        args.rounds, args.steps, args.warmup, args.sample_rounds = 2, 1, 2, 1
    if min(args.rounds, args.steps, args.warmup, args.sample_rounds, args.samples, args.batch_size) < 1:
        parser.error("--rounds, --steps, --warmup, --sample-rounds, --samples and --batch-size "
                     "must be at least 1")
    run(args)


if __name__ == "__main__":
    main()
