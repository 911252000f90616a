"""What the tests share, in one place: the small models and runs, free ports and a real `mlflow server` with one
readiness loop, waiting on processes, a study small enough for a smoke run, MLflow stores written by hand for the
report tests, the made-up corpus's trees read back, and fake WMT archives. No test imports another test module."""

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import pytest

from harness.overrides import parse_sets
from model import TransformerConfig

# ------------------------------------------------------------------------------------------ a report's header

SLICE_LINE = re.compile(r"^- slice \d+: command `([^`]*)` · commit `([0-9a-f]{7,40}|\?)`", re.M)


def invocation_of(text: str) -> tuple[str, str, list[str] | None, dict]:
    """The study file, profile, --rows and --set of the command a report names in its header; for a report assembled
    from slices, of the union of its slices' commands (their rows together; one set of --set, or the slices would
    not have assembled)."""
    commands = [m[0] for m in SLICE_LINE.findall(text)] or re.findall(r"^- command: `([^`]*)`", text, re.M)[:1]
    profile = re.search(r"profile `([^`]+)`", text)
    if not commands or not profile:
        raise AssertionError("the report names no command or profile in its header")
    paths, rows, sets = set(), [], []
    for command in commands:
        args = shlex.split(command)
        paths.add(next(a for a in args if a.endswith(".yaml")))
        rows.append(args[args.index("--rows") + 1].split(",") if "--rows" in args else None)
        sets.append([args[i + 1] for i, a in enumerate(args) if a == "--set"])
    if len(paths) > 1 or any(s != sets[0] for s in sets):
        raise AssertionError(f"the slices name other study files or --set: {sorted(paths)}, {sets}")
    union = None if any(r is None for r in rows) else list(dict.fromkeys(r for rs in rows for r in rs))
    held = [k.rsplit("-s", 1)[0] for line in re.findall(r"^- slice \d+: .* · trials: (.*)$", text, re.M)
            for k in line.split(", ") if "-s" in k]
    if held:      # an assembly shows the rows its slices finished so far: of the rows their commands run
        kept = list(dict.fromkeys(held))
        if union is not None and not set(kept) <= set(union):
            raise AssertionError(f"the slices hold rows {sorted(set(kept) - set(union))} their commands do not run")
        union = kept
    return paths.pop(), profile.group(1), union, parse_sets(sets[0])


def commits_of(text: str) -> set[str]:
    """The commits the report's trials ran at: its git SHA and latest --resume's, or every slice's."""
    found = {sha for _, sha in SLICE_LINE.findall(text) if sha != "?"}
    found |= set(re.findall(r"^- git SHA: `([0-9a-f]{7,40})`", text, re.M)[:1])
    found |= set(re.findall(r"^- its latest --resume ran at commit `([0-9a-f]{7,40})`", text, re.M)[:1])
    found |= set(re.findall(r"^  - its latest --resume: `[^`]*` at commit `([0-9a-f]{7,40})`", text, re.M))
    return found



# ------------------------------------------------------------------------------------------ MLflow stores

_MIGRATED: list[Path] = []      # one MLflow sqlite store with its schema made, for the whole test run


def new_store(folder: Path, name: str = "mlflow.db") -> str:
    """The URI of a fresh, empty MLflow store at folder/name: a copy of one whose schema was made once in this test
    run (MLflow's migrations take about 5 s a store on 2 cores; a copy takes milliseconds). A `harness` command run
    in a subprocess with this URI finds the schema made."""
    if not _MIGRATED or not _MIGRATED[0].is_file():
        from mlflow import MlflowClient
        template = Path(tempfile.mkdtemp(prefix="harness-test-store-")) / "mlflow.db"
        MlflowClient(f"sqlite:///{template}").search_experiments()      # creates the schema
        _MIGRATED[:] = [template]
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_MIGRATED[0], folder / name)
    return f"sqlite:///{folder / name}"


VARIANTS = {
    "paper": {},
    "learned": dict(positional="learned"),
    "rope": dict(positional="rope"),
    "alibi": dict(positional="alibi"),
    "unscaled": dict(attention_score="unscaled"),
    "additive": dict(attention_score="additive"),
    "pre_rms": dict(norm_position="pre", norm="rms"),
    "pre_layer": dict(norm_position="pre"),
    "gelu": dict(ffn="gelu"),
    "swiglu": dict(ffn="swiglu"),
    "gqa": dict(n_kv_heads=2),
    "mqa": dict(n_kv_heads=1),
    "dk_dv": dict(d_k=8, d_v=24),
    "unshared": dict(share_embeddings=False),
    "depths": dict(n_enc_layers=3, n_dec_layers=1),
    "attn_drop": dict(p_attn_drop=0.1),
    "modern": dict(positional="rope", norm_position="pre", norm="rms", ffn="swiglu", n_kv_heads=2),
    # sliding-window self-attention (r = 2): a ring cache of 3 keys, with each kind of position
    "window": dict(attention_window=2),
    "window_rope": dict(attention_window=2, positional="rope"),
    "window_alibi": dict(attention_window=2, positional="alibi"),
}


def small(**overrides) -> TransformerConfig:
    return TransformerConfig(vocab_size=40, d_model=32, d_ff=64, n_heads=4, n_layers=2, max_len=128,
                             p_drop=0.0).replace(**overrides)


def train_small(main, capsys, tmp_path, family: str, *sets: str, steps: int = 120) -> tuple[dict, dict]:
    """`harness train` of a small model of `family` on a small made-up corpus (dev PPL every steps/3):
    (the final metrics, the resolved model settings of config.json)."""
    import json
    out = tmp_path / "run"
    args = ["train", "--set", f"model.family={family}", *(a for s in sets for a in ("--set", s)),
            "--set", f"train.steps={steps}", "--set", f"eval_every={steps // 3}", "--set", "max_tokens=800",
            "--set", "batch_tokens=800", "--set", "bleu_sentences=8", "--set", "max_extra=5",
            "--set", "checkpoint_every=0", "--set", "data.train_pairs=2000", "--set", "data.dev_pairs=16",
            "--set", "data.test_pairs=8", "--set", "data.lexicon_scale=0.05", "--set", "data.max_words=12",
            "--set", f"data.cache_dir={tmp_path / 'cache'}", "--out", str(out), "--quiet", "--json"]
    assert main(args) == 0
    metrics = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    return metrics, json.loads((out / "config.json").read_text())["model"]


def real_text_run(tmp_path):
    """A run directory whose config.json names real text (Multi30K) as its data and nothing else: what a probe
    of the made-up corpus must refuse before it reads any weights."""
    import dataclasses
    import json

    from harness.data.corpus import DataConfig
    from harness.train.config import TrainConfig
    from model import TransformerConfig
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"model": dataclasses.asdict(TransformerConfig()),
                                                 "train": dataclasses.asdict(TrainConfig()),
                                                 "data": dataclasses.asdict(DataConfig(name="data/multi30k-en-de"))}))
    return run


def rival_batch():
    """A padded (3, 7) source batch (two rows padded) and a (3, 6) target prefix over a 50-token vocabulary."""
    import torch
    g = torch.Generator().manual_seed(1)
    src = torch.randint(4, 50, (3, 7), generator=g)
    src[1, 5:] = 0
    src[2, 3:] = 0
    return src, torch.randint(4, 50, (3, 6), generator=g)


def check_cached_decoding(m) -> None:
    """A family's cached steps are its teacher-forced decoder a token at a time, and beam search gives the same
    outputs with the cache and without it; padding does not reach the real positions of the encoder."""
    import torch

    from model import beam_search
    src, tgt = rival_batch()
    memory, mask = m.encode(src)
    full = m.out_proj(m.decode(tgt, memory, mask))
    cache = m.new_cache(3, 10, memory)
    steps = torch.stack([m.decode_step(tgt[:, t], memory, mask, cache, t) for t in range(tgt.size(1))], 1)
    assert torch.allclose(full, steps, atol=1e-5)
    assert beam_search(m, src, 1, 2, 3, max_extra=5) == beam_search(m, src, 1, 2, 3, max_extra=5, use_cache=False)
    alone, none = m.encode(src[2:3, :3])
    assert none is None and mask is not None and torch.equal(mask[:, 0, 0], src != 0)
    assert torch.allclose(alone[0], memory[2, :3], atol=1e-6)


# --- processes and servers ---

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_server(uri: str, proc: subprocess.Popen | None = None, seconds: float = 60.0) -> None:
    """Until an `mlflow server` at uri answers its health check (a minute at most; at once if proc died)."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(f"{uri}/health", timeout=1)
            return
        except OSError:
            if proc is not None and proc.poll() is not None:
                break
            time.sleep(0.25)
    pytest.fail("mlflow server did not come up")


def start_mlflow_server(cwd: Path, backend_uri: str, port: int | None = None,
                        artifacts: Path | None = None) -> tuple[subprocess.Popen, str]:
    """A real `mlflow server` (one worker, its own process group) on port (default: a free one), ready: (process,
    its URI). stop_server ends it."""
    port = port or free_port()
    cmd = [sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
           "--backend-store-uri", backend_uri, *(["--artifacts-destination", str(artifacts)] if artifacts else []),
           "--workers", "1"]
    proc = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    uri = f"http://127.0.0.1:{port}"
    try:
        wait_for_server(uri, proc)
    except BaseException:
        stop_server(proc)
        raise
    return proc, uri


def stop_server(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=30)


# --- studies and stores ---

# A two-row study small enough for a smoke run through Ray (CACHE: the corpus cache directory)
TWO_ROW_STUDY = """
study: mini
version: 1
table: table3
seeds: [0]
resources: {cpu: 1}
base: {preset: cpu_d128}
rows:
  base: {}
  A1: {n_heads: 1}
profiles:
  tiny:
    model: {d_model: 32, d_ff: 64, n_layers: 1, vocab_size: 300, max_len: 128}
    train: {steps: 3, warmup: 2, max_tokens: 600, batch_tokens: 600, checkpoint_every: 0, checkpoint_minutes: 0,
            log_every: 1, bleu_sentences: 4, max_extra: 3}
    data: {train_pairs: 1000, dev_pairs: 8, test_pairs: 8, cache_dir: CACHE}
"""


# --- waiting on processes ---

def wait_for(predicate, proc, timeout=600, what="the condition"):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():
            return
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"the study ended before {what}: {proc.stdout.read() if proc.stdout else ''}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


# MLflow stores written by hand for the report tests: a parent run, its trials, its end
SHA = "89abcdef0123"


T0 = 1_700_000_000_000


def start(client, study: str, rows: str) -> tuple[str, str]:
    from mlflow.entities import Param

    from harness.probes.cost import training_costs
    exp = client.create_experiment(study)
    parent = client.create_run(exp, start_time=T0, tags={
        "study": study, "version": "1", "profile": "tiny", "git_sha": SHA, "git_dirty": "False", "kind": "study",
        "hardware": "2 CPU cores (test)", "command": f"python -m harness run studies/{study}.yaml --profile tiny",
        "started": "2025-02-03T04:05:06", "table": study,
        # what the runner keeps in a Table 2 parent run (harness.study.runner.paper_tags)
        **({"paper_costs": json.dumps(training_costs())} if study == "table2" else {})}).info.run_id
    client.log_batch(parent, params=[Param("rows", rows), Param("seeds", "0")])
    return exp, parent


def trial(client, exp, parent, i, row, seed, kind, status, params, metrics, tags=None, reason=None):
    from mlflow.entities import Metric, Param
    tags = {"kind": "trial", "mlflow.parentRunId": parent, "row": row, "seed": str(seed), "trial_kind": kind,
            "trial_key": f"{row}-s{seed}", "profile": "tiny", **(tags or {}),
            **({"failure_reason": reason} if reason else {})}
    run = client.create_run(exp, start_time=T0 + 1000 * (i + 1), tags=tags).info.run_id
    client.log_batch(run, params=[Param(k, str(v)) for k, v in params.items()],
                     metrics=[m if isinstance(m, Metric) else Metric(m[0], float(m[1]), 0, m[2]) for m in metrics])
    client.set_terminated(run, status)


def finish(client, parent, n_trials, n_failed):
    from mlflow.entities import Metric, RunTag
    client.log_batch(parent, metrics=[Metric("wall_seconds", 321.0, 0, 0), Metric("overhead_share", 0.125, 0, 0)],
                     tags=[RunTag("n_trials", str(n_trials)), RunTag("n_failed", str(n_failed))])
    client.set_terminated(parent, "FAILED" if n_failed else "FINISHED")


# --- the made-up corpus's trees, read back ---

def parse(tree: str):
    """PTB bracket string -> (label, [children]) with leaves as str; asserts it is well formed."""
    toks = tree.replace("(", " ( ").replace(")", " ) ").split()
    pos = 0

    def node():
        nonlocal pos
        assert toks[pos] == "(", f"expected '(' at {pos} in {tree}"
        label, pos = toks[pos + 1], pos + 2
        assert label not in "()"
        kids = []
        while toks[pos] != ")":
            if toks[pos] == "(":
                kids.append(node())
            else:
                kids.append(toks[pos])
                pos += 1
        pos += 1
        assert kids, f"empty constituent {label}"
        # a preterminal has exactly one word; a phrase has only constituents below it
        assert (len(kids) == 1 and isinstance(kids[0], str)) or all(isinstance(k, tuple) for k in kids)
        return label, kids

    t = node()
    assert pos == len(toks), "text after the root bracket"
    return t


def leaves(t) -> list[str]:
    return [t] if isinstance(t, str) else [w for k in t[1] for w in leaves(k)]


def nodes(t):
    if isinstance(t, tuple):
        yield t
        for k in t[1]:
            yield from nodes(k)


def is_base_np(t) -> bool:  # (NP (DT ..)? (JJ ..)* (NN ..)) made of preterminals only
    return t[0] == "NP" and all(isinstance(k[1][0], str) for k in t[1]) and t[1][-1][0] in ("NN", "NNS")


# --- fake WMT archives ---

def write(path: Path, text: str | bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def sgm(kind: str, segs: list[str]) -> str:
    body = "\n".join(f'<seg id="{i}">{s}</seg>' for i, s in enumerate(segs, 1))
    return f'<{kind} setid="x" srclang="any">\n<doc docid="d" genre="news">\n{body}\n</doc>\n</{kind}>\n'


def fake_wmt(root: Path, dev_plain: bool = True) -> Path:
    """The layout the WMT14 archives extract to, a few made-up lines per file."""
    write(root / "training/europarl-v7.de-en.en", "Resumption of the session\n\nThank you.\n")
    write(root / "training/europarl-v7.de-en.de", "Wiederaufnahme der Sitzung\nLeer\nDanke.\n")
    write(root / "commoncrawl.de-en.en", "A small house\nOne two three four five six\n")
    write(root / "commoncrawl.de-en.de", "Ein kleines Haus\nEins\n")
    write(root / "training/news-commentary-v9.de-en.en", "Gold is up.\r\n")
    write(root / "training/news-commentary-v9.de-en.de", "Gold steigt.\r\n")
    if dev_plain:
        write(root / "dev/newstest2013.en", "Dev one.\nDev two.\n")
        write(root / "dev/newstest2013.de", "Dev eins.\nDev zwei.\n")
    else:
        write(root / "dev/newstest2013-src.en.sgm", sgm("srcset", ["Dev &amp; one."]))
        write(root / "dev/newstest2013-ref.de.sgm", sgm("refset", ["Dev &amp; eins."]))
    write(root / "test-full/newstest2014-deen-src.en.sgm", sgm("srcset", ["Tom &amp; Jerry", "x &lt; y"]))
    write(root / "test-full/newstest2014-deen-ref.de.sgm", sgm("refset", ["Tom &amp; Jerry", "x &lt; y"]))
    return root


def fake_wmt_fr(root: Path, dev_plain: bool = True) -> Path:
    """The layout the WMT14 EN-FR archives extract to (fairseq's prepare-wmt14en2fr.sh paths), made-up lines."""
    write(root / "training/europarl-v7.fr-en.en", "Resumption of the session\n\nThank you.\n")
    write(root / "training/europarl-v7.fr-en.fr", "Reprise de la session\nVide\nMerci.\n")
    write(root / "commoncrawl.fr-en.en", "A small house\nOne two three four five six\n")
    write(root / "commoncrawl.fr-en.fr", "Une petite maison\nUn\n")
    write(root / "un/undoc.2000.fr-en.en", "The General Assembly,\r\n")
    write(root / "un/undoc.2000.fr-en.fr", "L'Assemblée générale,\r\n")
    write(root / "training/news-commentary-v9.fr-en.en", "Gold is up.\n")
    write(root / "training/news-commentary-v9.fr-en.fr", "L'or monte.\n")
    write(root / "giga-fren.release2.fixed.en", "Changing lives\n   \n")
    write(root / "giga-fren.release2.fixed.fr", "Changer des vies\nRien\n")
    if dev_plain:
        write(root / "dev/newstest2013.en", "Dev one.\nDev two.\n")
        write(root / "dev/newstest2013.fr", "Dév un.\nDév deux.\n")
    else:
        write(root / "dev/newstest2013-src.en.sgm", sgm("srcset", ["Dev &amp; one."]))
        write(root / "dev/newstest2013-ref.fr.sgm", sgm("refset", ["Dév &amp; un."]))
    write(root / "test-full/newstest2014-fren-src.en.sgm", sgm("srcset", ["Tom &amp; Jerry", "x &lt; y", "Yes"]))
    write(root / "test-full/newstest2014-fren-ref.fr.sgm", sgm("refset", ["Tom &amp; Jerry", "x &lt; y", "Oui"]))
    return root


def record_figures(monkeypatch) -> list:
    """Every figure a report writer saves from here on, as (file name, figure), saved as usual: save_png
    patched in each harness.report module that imports it."""
    import importlib
    import pkgutil

    import harness.report
    from harness.report.files import save_png
    drawn = []

    def keep(fig, path):
        drawn.append((Path(path).name, fig))
        return save_png(fig, path)
    for mod in pkgutil.iter_modules(harness.report.__path__):
        module = importlib.import_module(f"harness.report.{mod.name}")
        if hasattr(module, "save_png"):
            monkeypatch.setattr(module, "save_png", keep)
    return drawn


def assert_titled_by_study(drawn: list, studies, profile: str = "tiny") -> None:
    """Each figure's title (its suptitle, else its first panel's) names its study and profile as plot_title writes
    them, "STUDY (PROFILE profile)"; a figure belongs to the longest of `studies` its file name starts with."""
    assert drawn
    for name, fig in drawn:
        study = max((s for s in studies if name.startswith(f"{s}_")), key=len)
        title = fig.get_suptitle() or fig.axes[0].get_title()
        assert f"{study} ({profile} profile)" in title, f"{name}: its title {title!r} does not name {study}, {profile}"
