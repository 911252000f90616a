"""python -m harness data | train | run | report | evaluate | probe | bench: the command line. Bad input ends in one
sentence and exit 2."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from harness.errors import UserError, one_line_warning, suggest


def invocation_name(text: str) -> str:
    """`run --name` / `report --name`: a folder name of letters, digits, '-' and '_' (it names reports/NAME/)."""
    if not text or len(text) > 64 or not all(c.isascii() and (c.isalnum() or c in "-_") for c in text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a name: use up to 64 letters, digits, '-' or '_', "
                                         "e.g. corpus2")
    return text


def _cmd_data_synth(args) -> int:
    from harness.data.synth import SynthConfig, write_corpus
    def progress(split: str, done: int, total: int) -> None:
        print(f"{split}: {done:,}/{total:,} pairs", file=sys.stderr, flush=True)
    manifest = write_corpus(args.out, args.pairs, args.dev_pairs, args.test_pairs, args.seed,
                            SynthConfig(target=args.target), progress=None if args.json else progress)
    print(json.dumps(manifest) if args.json else f"wrote the made-up corpus to {args.out}: "
          f"{args.pairs} train, {args.dev_pairs} dev, {args.test_pairs} test pairs (seed {args.seed})")
    return 0


def _cmd_data_prepare(args) -> int:
    from harness.data.sources import SOURCES, preparable
    from harness.errors import suggest
    known = preparable()
    if args.corpus not in known:
        raise UserError(f"unknown corpus {args.corpus!r}{suggest(args.corpus, known)}; `data prepare` knows: "
                        f"{', '.join(known)}.")
    source = SOURCES[args.corpus]
    if args.pair is not None and not source.pairs:
        raise UserError(f"--pair chooses a language pair of a corpus that has several (multi30k); {args.corpus} "
                        "has one, leave --pair out.")
    if args.form is not None and args.form not in source.forms:
        raise UserError(f"--form {args.form!r}: {args.corpus} is prepared " +
                        (f"in one of the forms {', '.join(source.forms)}." if source.forms else
                         "as released only; leave --form out."))
    form = {}
    if args.form is not None:
        from harness.eval.bleu import lc_norm_tok
        form = {"form": args.form, "tokenize": lc_norm_tok}
    manifest = source.prepare(args.from_dir, args.out, args.pair, **form)
    summary = source.describe(manifest)
    print(json.dumps(manifest) if args.json else f"prepared {args.corpus} in {args.out}" +
          (f": {summary}" if summary else ""))
    for warning in manifest.get("warnings", []) if not args.json else []:
        print(f"warning: {warning}", file=sys.stderr)
    return 0


def _cmd_train(args) -> int:
    from harness import overrides
    from harness.data.corpus import DataConfig
    from harness.train import preset, train
    from model import ConfigError
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.study:     # one row of a study as its trial would run it (the calibration runs of docs/calibration.md)
        from harness.study.kinds import load_study
        if not args.row:
            raise UserError("--study needs --row: the study row to train (e.g. --row base).")
        trial = load_study(args.study, args.profile, [args.row], [args.seed]).trials[0]
        model_cfg, train_cfg, data_cfg = trial.model, trial.train, trial.data
    else:
        if args.row or args.profile:
            raise UserError("--row and --profile select a row of a study; give the study with --study FILE.")
        try:
            model_cfg, train_cfg = preset(args.preset)
        except ConfigError as err:
            raise UserError(str(err)) from None
        data_cfg = DataConfig(name=args.data)
    model_cfg, train_cfg, data_cfg = overrides.apply(model_cfg, train_cfg, data_cfg, overrides.parse_sets(args.set))
    ranks = _torchrun_ranks(train_cfg.device)
    if ranks.world > 1:      # one process per machine builds the corpus and BPE caches; the others then read them
        if ranks.local_rank == 0:
            from harness.data.corpus import prepare_data
            prepare_data(data_cfg, model_cfg.vocab_size)
        ranks.barrier()
    metrics = train(model_cfg, train_cfg, data_cfg, args.out, quiet=args.quiet, ranks=ranks)
    if not ranks.is_main:
        return 0
    from harness.io import atomic_write
    from harness.probes.manifest import manifest
    settings = json.loads((Path(args.out) / "config.json").read_text())["model"]
    atomic_write(Path(args.out) / "architecture.json", json.dumps(manifest(settings), indent=2) + "\n")
    rows = [json.loads(ln) for ln in (Path(args.out) / "metrics.jsonl").read_text().splitlines() if ln.strip()]
    curve = [(r["step"], round(r["dev_ppl"], 3)) for r in rows if "dev_ppl" in r] + \
        [(metrics["steps"], round(metrics["dev_ppl"], 3))]
    if args.json:
        print(json.dumps({**metrics, "dev_ppl_curve": curve}))
    else:
        keys = ("dev_ppl", "dev_bleu", "dev_bleu_tok", "dev_bleu_tok_lc", "dev_bleu_copy_source", "params", "steps",
                "train_seconds", "tokens_per_s")
        print(" | ".join(f"{k} {metrics[k]:.4g}" if isinstance(metrics[k], float) else f"{k} {metrics[k]}"
                         for k in keys if k in metrics))
        if len(curve) > 1:
            print("dev PPL by step: " + ", ".join(f"{s} {v:.2f}" for s, v in curve))
    return 0


def _torchrun_ranks(device: str):
    """Under torchrun (WORLD_SIZE > 1 in the environment) this process is one rank of a data-parallel run:
    join the process group (nccl on CUDA, gloo on CPU) and train on this rank's GPU. Otherwise one process."""
    import os

    from harness.train.dist import SINGLE, Ranks
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return SINGLE
    import torch
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device != "cpu" and torch.cuda.is_available()
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return Ranks.from_process_group(local_rank=local, device=f"cuda:{local}" if cuda else "cpu")


def _cmd_evaluate(args) -> int:
    from harness.train.rescore import rescore
    if args.checkpoint is not None and args.checkpoint < 0:
        raise UserError(f"--checkpoint {args.checkpoint}: give the step of a checkpoint the run kept "
                        "(checkpoints/step_N.pt).")
    metrics = rescore(args.run_dir, args.data, args.split, args.device, args.checkpoint, args.constrained)
    where = f"{Path(args.data).resolve().name}/{args.split}"
    run_id = None
    if not args.no_log:
        from harness.tracking import log_evaluation
        run_id = log_evaluation(args.run_dir, where, metrics, args.checkpoint)
    if args.json:
        print(json.dumps({**metrics, "mlflow_run_id": run_id}))
        return 0
    s = args.split
    rows = [("sentences", f"{metrics[f'{s}_sentences']}"),
            ("checkpoint", f"step {args.checkpoint}") if args.checkpoint is not None else
            ("checkpoints averaged", f"{metrics[f'{s}_checkpoints_averaged']}"),
            ("PPL", f"{metrics[f'{s}_ppl']:.3f}")]
    names = {"bleu": "BLEU (sacreBLEU)", "bleu_tok": "BLEU (tokenized, the paper's)", "bleu_tok_lc": "BLEU tok lc",
             "f1": "F1 (EVALB)", "f1_constrained": "F1 under the tree constraint", "well_formed": "outputs that are "
                                                                                                  "trees (%)"}
    rows += [(label, f"{metrics[f'{s}_{key}']:.2f}") for key, label in names.items() if f"{s}_{key}" in metrics]
    width = max(len(k) for k, _ in rows)
    print(f"{args.run_dir} on {where}:")
    for k, v in rows:
        print(f"  {k:<{width}}  {v}")
    if f"{s}_bleu" in metrics:
        print(f"  {'signature':<{width}}  {metrics['sacrebleu_signature']}")
    print(f"logged to MLflow run {run_id} under eval/{where.rsplit('/', 1)[0]}/"
          f"{'checkpoint/ at step ' + str(args.checkpoint) if args.checkpoint is not None else ''}" if run_id else
          "not logged: the run directory is not a study trial's (no mlflow_run.json)" if not args.no_log else
          "not logged (--no-log)")
    return 0


def _cmd_bench(args) -> int:
    if args.study or args.row or args.set:
        return _bench_study_row(args)
    from harness.bench.speed import run_bench
    return run_bench(args)


def _bench_study_row(args) -> int:
    """`bench --study S --row R`: the row's training step as its trial would run it (harness/bench/row.py)."""
    from harness.bench.row import bench_row, print_row
    from harness.study.kinds import load_study
    if args.set and not args.study:
        raise UserError("bench --set overrides a study row's settings; give --study and --row with it.")
    if not (args.study and args.row):
        raise UserError("--study and --row go together: the study file and the row whose training step to time "
                        "(e.g. --study studies/table3.yaml --row base).")
    if args.steps < 1 or args.threads < 0:
        raise UserError("--steps must be at least 1 and --threads at least 0 (0: the study's cpu per trial).")
    from harness import overrides
    study = load_study(args.study, args.profile, [args.row], [0], overrides.parse_sets(args.set))
    trial = study.trials[0]
    if trial.kind != "train":
        raise UserError(f"{args.study} is a {trial.kind} study; bench --study times a training row.")
    threads = args.threads or max(1, round(float(study.resources.get("cpu", 1))))
    result = bench_row(trial.model, trial.train, trial.data, threads, steps=args.steps,
                       compare=not args.no_compare, compile_core=args.compile)
    result.update({"study": str(args.study), "row": args.row, "profile": study.profile})
    if args.json:
        print(json.dumps(result))
    else:
        print_row(result, f"{args.study} row {args.row} (profile {study.profile})")
    return 0


def _cmd_run(args) -> int:
    from harness.study.runner import StudyRequest, run_study
    return run_study(StudyRequest.from_args(args))    # args.study resolved from a name or a file (_resolve_study)


def _cmd_status(args) -> int:
    """`status STUDY`: where the study's latest invocation of a profile stands, read from MLflow."""
    from harness import overrides
    from harness.logged import invocations, require_store, study_snapshot, tracking_uri
    from harness.study.kinds import load_study
    from harness.study.status import as_ran, overview, render, study_status, to_json
    if args.study is None:
        uri = tracking_uri()
        require_store(uri)
        entries = invocations(uri)
        print(json.dumps(entries, indent=1) if args.json else
              overview(entries) if entries else f"the MLflow store {uri} holds no study run yet")
        return 0
    path, sets = _study_path(str(args.study)), overrides.parse_sets(args.set, overrides.RUN_SECTIONS)
    study = load_study(path, args.profile, sets=sets)
    uri = tracking_uri()
    require_store(uri)
    name = args.name or ""
    snapshot = study_snapshot(uri, study.name, study.profile, name)
    if snapshot is None:
        raise UserError(f"the MLflow store {uri} holds no invocation of {study.path}, profile {study.profile}"
                        f"{f', named {name}' if name else ''}; start one with `python -m harness run {study.path} "
                        f"--profile {study.profile}{f' --name {name}' if name else ''}`.")
    # the trials it ran: its --rows and --seeds are in its parent run
    study = as_ran(path, study.profile, snapshot["parent"]["rows"], snapshot["parent"]["seeds"], sets)
    status = study_status(study, snapshot)
    print(to_json(status) if args.json else render(status))
    return 0


def _cmd_report(args) -> int:
    from harness import logged
    from harness.report.writers import compare_reports, report_all
    studies = [args.study] if args.study else None
    # --record: each record file is read as a store of its one invocation, in place of MLflow
    # (the slices of one study, profile and name, `run --slices`, assemble into one report)
    uris = logged.record_uris(args.record) if args.record else None
    source = "the records" if args.record else "the store"
    if args.check:                  # regenerate apart, compare, write nothing (neither args.out nor MLflow)
        import tempfile
        with tempfile.TemporaryDirectory() as tmp:
            paths = report_all(Path(tmp), uris, studies=studies, profile=args.profile, variant=args.name,
                               force=True, publish=False)
            stale = compare_reports(Path(tmp), args.out, paths)
        for line in stale:
            print(line)
        print(f"{len(stale)} file(s) under {args.out} differ from what {source} and this code give now"
              if stale else f"every report regenerated agrees with {args.out}, byte for byte")
        return 1 if stale else 0
    paths = report_all(args.out, uris, studies=studies, profile=args.profile, variant=args.name,
                       replace=args.replace, force=args.force, say=print)
    for p in paths:
        print(p)
    return 0


def _cmd_probe_flops(args) -> int:
    from harness.probes.flops import main as flops_main
    return flops_main(args.preset, args.batch_tokens, args.sentence_len, args.json)


def _cmd_probe_evalb(args) -> int:
    from harness.eval.evalb import main as evalb_main
    return evalb_main(args.gold, args.test, args.json)


def _cmd_probe_scaling(args) -> int:
    from harness.probes.scaling import main as scaling_main
    from harness.train import resolve_device
    device = resolve_device(args.device)        # refuses unknown names and CUDA without a GPU
    return scaling_main(args.json, args.quick, str(device))


def _cmd_probe_agreement(args) -> int:
    from harness.eval.agreement import BUCKETS, LONG_FROM, bucket_label, bucket_name, wilson
    from harness.train.rescore import measure_run
    if args.sentences < 1:
        raise UserError(f"--sentences {args.sentences}: give a whole number of sentences, at least 1.")
    metrics, averaged = measure_run(args.run_dir, "agreement", {"sentences": args.sentences}, args.device)
    if args.json:
        print(json.dumps(metrics))
        return 0
    print(f"{args.run_dir}: {metrics['agree_pairs']} contrastive pairs from {args.sentences} sentences "
          f"({averaged} checkpoint{'s' * (averaged > 1)} averaged)")
    print(f"{'distance':>9} {'pairs':>6} {'accuracy %':>11} {'95 % interval':>16}")
    rows = [(bucket_label(lo, hi), f"_{bucket_name(lo, hi)}") for lo, hi in BUCKETS] + \
        [(f"{LONG_FROM}+ (long)", "_long"), ("all", "")]
    for label, name in rows:
        acc, n = metrics[f"agree_acc{name}"], metrics[f"agree_n{name}" if name else "agree_pairs"]
        lo, hi = wilson(acc, n)
        print(f"{label:>9} {n:>6} {acc:>11.1f} {f'{lo:.1f} to {hi:.1f}':>16}")
    return 0


def _cmd_probe_measure(args) -> int:
    """Any measurement taken on final weights (harness/measure), on a finished run, its settings from --set."""
    import dataclasses
    import typing

    from harness.measure.registry import measurements
    from harness.train.rescore import measure_run
    names = [m.name for m in measurements() if m.at_end is not None]
    m = next((x for x in measurements() if x.name == args.name), None)
    if m is None or m.at_end is None:
        raise UserError(f"measurement {args.name!r} is not one taken on final weights{suggest(args.name, names)}; "
                        f"those are: {', '.join(names)}.")
    types = typing.get_type_hints(m.settings)
    settings = {}
    for item in args.sets:
        key, sep, value = item.partition("=")
        if not sep or key not in types:
            raise UserError(f"--set {item}: give FIELD=VALUE with FIELD one of "
                            f"{', '.join(f.name for f in dataclasses.fields(m.settings))} (measurement {m.name}).")
        try:
            settings[key] = (value.lower() in ("1", "true", "yes")) if types[key] is bool else types[key](value)
        except ValueError:
            raise UserError(f"--set {item}: {key} must be a {types[key].__name__}.") from None
    metrics, averaged = measure_run(args.run_dir, m.name, settings, args.device)
    if args.json:
        print(json.dumps(metrics))
        return 0
    print(f"{args.run_dir}: measurement {m.name} ({averaged} checkpoint{'s' * (averaged > 1)} averaged)")
    for key, value in metrics.items():
        print(f"  {key}: {value:.4g}" if isinstance(value, float) else f"  {key}: {value}")
    return 0


def _cmd_probe_heads(args) -> int:
    """The heads probe on a finished run: heads.json and the paper's Figures 3-5 as PNGs in --out, a summary."""
    from harness.io import check_writable
    from harness.report.heads import RELATION_NAMES, draw_figures
    from harness.train.rescore import measure_run, run_config
    if args.beam < 1 or args.contrasts < 0:
        raise UserError(f"--beam {args.beam} / --agreement-sentences {args.contrasts}: the beam is at least "
                        "1 and the agreement sentences at least 0 (0: no agreement contrasts).")
    if args.sentences < 4:
        raise UserError(f"--sentences {args.sentences}: give a whole number of dev sentences, at least 4.")
    run_config(args.run_dir)                 # a run directory at all, before anything is made
    out = args.out if args.out is not None else args.run_dir / "heads"
    check_writable(out, "--out", "choose a writable directory", keep=False)
    metrics, averaged = measure_run(args.run_dir, "heads", {"sentences": args.sentences, "contrasts": args.contrasts,
                                                            "beam": args.beam}, args.device, out)
    payload = json.loads((out / "heads.json").read_text(encoding="utf-8"))
    files = [out / "heads.json", *draw_figures(payload["figures"], out, title=f"the heads of {args.run_dir.name}")]
    if args.json:
        print(json.dumps(metrics))
        return 0
    print(f"{args.run_dir}: {payload['sentences']} dev sentences probed ({averaged} checkpoint{'s' * (averaged > 1)} "
          f"averaged), {payload['evaluations']} evaluations in {payload['seconds']:.0f} s")
    print(f"{'relation':<40} {'n':>5} {'best head %':>12} {'offset %':>9} {'gain':>7}")
    for name, label in RELATION_NAMES.items():
        n = int(metrics[f"heads_{name}_n"])
        print(f"{label:<40} {n:>5} {metrics[f'heads_{name}_best']:>12.1f} {metrics[f'heads_{name}_offset']:>9.1f} "
              f"{metrics[f'heads_{name}_gain']:>+7.1f}")
    print(f"encoder heads prunable within {payload['tolerance']:g} BLEU: {metrics['heads_prunable_enc']:.2f}; all "
          "heads: "
          f"{metrics['heads_prunable_all']:.2f}")
    print(f"Spearman rho, relation gain against the harm of masking: {metrics['heads_rho_zero']:+.2f} (uniform "
          f"attention instead: {metrics['heads_rho_uniform']:+.2f})")
    print("wrote " + ", ".join(str(f) for f in files))
    return 0


def _cmd_probe_inference(args) -> int:
    """The inference study's rows measured here, one after another, printed (no MLflow)."""
    from harness.probes.inference import measure, print_results
    from harness.study.kinds import load_study
    rows = [r for r in args.rows.split(",") if r] if args.rows else None
    study = load_study(args.study, args.profile, rows)
    if study.kind != "inference":
        raise UserError(f"{args.study} is a {study.kind} study; probe inference reads an inference study "
                        "(kind: inference, e.g. studies/inference.yaml).")
    results = {t.row: measure(t.probe) for t in study.trials}
    if args.json:
        print(json.dumps(results))
    else:
        print_results(results, str(args.study), study.profile, study.trials[0].probe.new_tokens)
    return 0


def _cmd_probe_cost(args) -> int:
    from harness.probes.cost import main as cost_main
    return cost_main(args.json)


def _add_data(sub) -> None:
    """The `data` commands: synth, prepare."""
    data = sub.add_parser("data", help="make or prepare data").add_subparsers(dest="data_command", required=True)
    synth = data.add_parser("synth", help="write the made-up translation corpus (with gold parse trees)")
    synth.add_argument("--out", required=True, type=Path, help="directory to write")
    synth.add_argument("--pairs", type=int, default=50_000, help="training pairs (1 k to 10 M)")
    synth.add_argument("--dev-pairs", type=int, default=1000, help="dev pairs")
    synth.add_argument("--test-pairs", type=int, default=1000, help="test pairs")
    synth.add_argument("--seed", type=int, default=1, help="the corpus seed (data.seed): which sentences are drawn")
    synth.add_argument("--target", choices=("de", "fr"), default="de",
                       help="the target language: German-like (default) or French-like, the same sources")
    synth.add_argument("--json", action="store_true", help="print the manifest as JSON")
    synth.set_defaults(func=_cmd_data_synth)
    prep = data.add_parser("prepare", help="build train/dev/test from downloaded WMT14, Multi30K or Penn Treebank "
                                           "files")
    prep.add_argument("corpus", help="wmt14-en-de | wmt14-en-fr | multi30k | ptb")
    prep.add_argument("--from", dest="from_dir", required=True, type=Path, help="directory of downloaded files")
    prep.add_argument("--pair", default=None, help="multi30k only: en-de (default) or en-fr")
    prep.add_argument("--form", default=None,
                      help="multi30k only: raw (default: the text as released) or lc.norm.tok (lowercased, "
                           "punctuation normalised, Moses-tokenized, as the dataset's data/task1/tok files)")
    prep.add_argument("--out", required=True, type=Path, help="directory to write (train/dev/test and the BPE input)")
    prep.add_argument("--json", action="store_true", help="print the manifest as JSON")
    prep.set_defaults(func=_cmd_data_prepare)


def _add_train(sub) -> None:
    """`train`: one model, from a preset or a study's row."""
    tr = sub.add_parser("train", help="train one model and evaluate it on the dev set")
    tr.add_argument("--preset", default="cpu_d128", help="paper_base | paper_big | cpu_d128 | modern_base")
    tr.add_argument("--study", default=None, type=Path, help="start from a row of this study file instead of a preset")
    tr.add_argument("--row", default=None, help="with --study: the row (e.g. base, C5)")
    tr.add_argument("--profile", default=None, help="with --study: the profile (default: tiny when it has one)")
    tr.add_argument("--seed", default=0, type=int, help="with --study: the trial's seed (train.seed)")
    tr.add_argument("--threads", default=0, type=int, help="torch threads; 0 (the default) keeps torch's own count "
                    "(a study's trials take their resources.cpu)")
    tr.add_argument("--data", default="synth", help="'synth' (the made-up corpus) or a prepared data directory")
    tr.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a model, train or data setting, e.g. --set n_heads=1 --set train.steps=200")
    tr.add_argument("--out", required=True, type=Path, help="run directory (resumed if it holds checkpoints)")
    tr.add_argument("--json", action="store_true", help="print a final JSON line of metrics")
    tr.add_argument("--quiet", action="store_true", help="no progress lines")
    tr.set_defaults(func=_cmd_train)


def _add_run(sub) -> None:
    """`run`: a study on Ray Tune."""
    run = sub.add_parser("run", help="run a study (a paper table) as a Ray Tune grid, tracked in MLflow")
    run.add_argument("study", type=Path, help="the study (a name such as table3, or a file: studies/table3.yaml)")
    run.add_argument("--profile", default=None, help="paper | tiny | ... (default: tiny when the study has it)")
    run.add_argument("--rows", default="", help="comma-separated rows to run (default: all)")
    run.add_argument("--seeds", default="", help="seeds and ranges, comma-separated: 0,1,2 or 0-9 (default: the "
                     "study's)")
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                     help="override a setting of every row after the profile, e.g. --set data.seed=2 (another "
                          "made-up corpus)")
    run.add_argument("--dry-run", action="store_true", help="print the resolved trials and their cost, run nothing")
    run.add_argument("--tflops", type=float, default=0.0,
                     help="with --dry-run: each trial's time at this sustained training rate per device (TFLOP/s)")
    run.add_argument("--measure", action="store_true",
                     help="with --dry-run: each trial's time from a few updates of its model timed on this machine")
    run.add_argument("--devices", type=int, default=1,
                     help="with --dry-run and a rate: the devices (GPUs) the study runs on, for its wall time")
    run.add_argument("--name", default=None, type=invocation_name,
                     help="name this invocation, e.g. corpus2 for a --set variant of the profile: its report goes to "
                          "reports/[PROFILE/]NAME/, apart from the profile's own, and --resume continues it")
    run.add_argument("--resume", action="store_true", help="continue the latest invocation; finished trials are kept")
    run.add_argument("--address", default=None, help="join this Ray cluster (default: RAY_ADDRESS, else a local Ray)")
    run.add_argument("--runs-dir", default="runs/studies", help="where trial directories and checkpoints go")
    # const: harness.study.runner.SLICES_HERE
    run.add_argument("--slices", nargs="?", const="here", default=None, metavar="DIR",
                     help="run as a slice of the study: skip every trial a slice record in DIR holds (same row, seed "
                          "and configuration hash), and write this invocation's record there as each trial finishes "
                          "(default DIR: reports/[PROFILE/][NAME/]STUDY.slices); `report --record DIR/*.slice.json.gz` "
                          "assembles the slices into one report")
    run.add_argument("--quiet", action="store_true", help="no live view of the study's progress")
    run.add_argument("--verbose", action="store_true", help="let Ray's and MLflow's own banners and INFO lines through")
    run.set_defaults(func=_cmd_run)


def _add_status(sub) -> None:
    """`status`: a study's progress, from any terminal."""
    st = sub.add_parser("status", help="where a study's latest invocation stands: each trial's state, step, dev PPL "
                                       "and best, the patience rule's count, how finished trials ended, the time "
                                       "left and the command that continues it (read from MLflow)")
    st.add_argument("study", nargs="?", default=None,
                    help="the study (a name such as table3, or a file); left out: one line for the latest "
                         "invocation of every study, profile and name in the store")
    st.add_argument("--profile", default=None, help="the profile (the study's default when left out)")
    st.add_argument("--name", default=None, type=invocation_name, help="the invocation of this name (`run --name`)")
    st.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="the --set the study ran with, so that its trials match (resources.* may be left out)")
    st.add_argument("--json", action="store_true", help="print the status as JSON")
    st.set_defaults(func=_cmd_status)


def _add_report(sub) -> None:
    """`report`: reports/ from MLflow, or from the records written beside earlier reports."""
    rep = sub.add_parser("report", help="write reports/ (Markdown, CSV, plots and the record of what they read) "
                                        "from the runs in MLflow")
    rep.add_argument("--study", default=None, help="one study (default: every study in the store)")
    rep.add_argument("--profile", default=None, help="the profile's latest invocation (default: the latest of any)")
    rep.add_argument("--name", default=None, type=invocation_name,
                     help="only the invocations of this name (`run --name`); default: the unnamed and every named one")
    rep.add_argument("--out", default=Path("reports"), type=Path, help="where the reports go")
    rep.add_argument("--replace", action="store_true",
                     help="write over a report another invocation made (without it, such a report is left as it is "
                          "and the command stops, writing nothing)")
    rep.add_argument("--force", action="store_true",
                     help="replace a report even where it rests on more trials or seeds than this invocation "
                          "(implies --replace)")
    rep.add_argument("--record", nargs="+", type=Path, default=None, metavar="FILE",
                     help="regenerate from these records (the STUDY.record.json.gz that report writes beside each "
                          "report, e.g. reports/statements.record.json.gz) instead of the MLflow store; the slices of "
                          "one study, profile and name (`run --slices`: reports/PROFILE/STUDY.slices/*.slice.json.gz) "
                          "assemble into one report, each trial once")
    rep.add_argument("--check", action="store_true",
                     help="regenerate the reports in a temporary folder and compare them with those under --out, "
                          "file by file; writes nothing; exit 1 where any differs (a committed report gone stale)")
    rep.set_defaults(func=_cmd_report)


def _add_probes(sub) -> None:
    """The `probe` commands: flops, scaling, cost, inference, evalb, agreement, heads."""
    probe = sub.add_parser("probe", help="measurements beside training: FLOPs, attention scaling, parsing F1")
    probes = probe.add_subparsers(dest="probe_command", required=True)
    fl = probes.add_parser("flops", help="FLOPs per training step: fvcore, torch's FlopCounterMode, analytic")
    fl.add_argument("--preset", default="paper_base", help="paper_base | paper_big | cpu_d128 | modern_base")
    fl.add_argument("--batch-tokens", type=int, default=25_000, help="target (and source) tokens per step")
    fl.add_argument("--sentence-len", type=int, default=25, help="tokens a sentence, source and target")
    fl.add_argument("--json", action="store_true", help="print the result as JSON")
    fl.set_defaults(func=_cmd_probe_flops)

    sc = probes.add_parser("scaling", help="Table 1 measured: time, memory, sequential ops and path length")
    sc.add_argument("--quick", action="store_true", help="a small grid (about 20 s on a CPU)")
    sc.add_argument("--device", default="auto", help="auto | cpu | cuda")
    sc.add_argument("--json", action="store_true", help="print the result as JSON")
    sc.set_defaults(func=_cmd_probe_scaling)

    co = probes.add_parser("cost", help="Table 2's training cost: the paper's method against counted FLOPs")
    co.add_argument("--json", action="store_true", help="print the result as JSON")
    co.set_defaults(func=_cmd_probe_cost)

    inf = probes.add_parser("inference", help="inference cost by model shape: prefill and decode tokens/s, time to "
                            "first token, peak memory, the KV cache per token against its formula")
    inf.add_argument("--study", type=Path, default=Path("inference"), help="the shapes: an inference study, by its "
                     "name or file (default: inference, studies/inference.yaml)")
    inf.add_argument("--profile", default=None, help="the study's profile (default: tiny)")
    inf.add_argument("--rows", default="", help="comma-separated rows (default: all)")
    inf.add_argument("--json", action="store_true", help="print the result as JSON")
    inf.set_defaults(func=_cmd_probe_inference)

    ev = probes.add_parser("evalb", help="score bracketed trees as EVALB does with COLLINS.prm")
    ev.add_argument("gold", type=Path, help="gold trees: one a line, or Penn Treebank .mrg")
    ev.add_argument("test", type=Path, help="test trees, one a line")
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    ev.set_defaults(func=_cmd_probe_evalb)

    ag = probes.add_parser("agreement", help="long-distance agreement: a finished run scores contrastive pairs "
                           "of its made-up corpus, by distance (§4)")
    ag.add_argument("run_dir", type=Path, help="a finished run's directory (train --out, or a study trial's)")
    ag.add_argument("--sentences", type=int, default=2000, help="contrastive sentences to draw (about 2 pairs each)")
    ag.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ag.add_argument("--json", action="store_true", help="print the result as JSON")
    ag.set_defaults(func=_cmd_probe_agreement)

    me = probes.add_parser("measure", help="any measurement taken on final weights (harness/measure: kv_int8, "
                           "rope_pi, length, agreement, heads, ...) on a finished run, as the run would take it")
    me.add_argument("run_dir", type=Path, help="a finished run's directory (train --out, or a study trial's)")
    me.add_argument("name", help="the measurement's name (`python -m harness settings` lists each with its settings)")
    me.add_argument("--set", dest="sets", action="append", default=[], metavar="FIELD=VALUE",
                    help="one of the measurement's settings, e.g. sentences=200 (repeatable)")
    me.add_argument("--device", default="auto", help="auto | cpu | cuda")
    me.add_argument("--json", action="store_true", help="print the result as JSON")
    me.set_defaults(func=_cmd_probe_measure)

    hd = probes.add_parser("heads", help="the paper's Figures 3-5 measured: head scores against the made-up corpus's "
                           "gold relations, each head masked, pruning curves, attention against causality")
    hd.add_argument("run_dir", type=Path, help="a finished run's directory (train --out, or a study trial's)")
    hd.add_argument("--sentences", type=int, default=500, help="dev sentences to probe (half scored, half for the "
                                                               "curves)")
    hd.add_argument("--agreement-sentences", dest="contrasts", type=int, default=200,
                    help="contrastive sentences for Δ agreement")
    hd.add_argument("--beam", type=int, default=1, help="beam size of the ablations' decodes (1: greedy)")
    hd.add_argument("--out", type=Path, default=None, help="where heads.json and the figures go (default "
                                                           "RUN_DIR/heads)")
    hd.add_argument("--device", default="auto", help="auto | cpu | cuda")
    hd.add_argument("--json", action="store_true", help="print the result as JSON")
    hd.set_defaults(func=_cmd_probe_heads)


def _add_evaluate(sub) -> None:
    """`evaluate`: a finished run's final weights on any prepared split."""
    ev = sub.add_parser("evaluate", help="score a finished run's final (averaged) weights on a prepared data split")
    ev.add_argument("run_dir", type=Path, help="a finished run: a study trial's directory or `train --out`")
    ev.add_argument("--data", required=True, type=Path, help="a prepared data directory (`data prepare ...`)")
    ev.add_argument("--split", default="test", help="test (default), dev, or a named test set such as test_2017_flickr")
    ev.add_argument("--checkpoint", default=None, type=int, metavar="STEP",
                    help="score the run's checkpoint of this step (as kept in checkpoints/) instead of its final "
                         "weights")
    ev.add_argument("--constrained", action="store_true",
                    help="parsing: also decode under the tree constraint (F1 beside the paper's search + repair), "
                         "even where the run did not")
    ev.add_argument("--device", default="auto", help="auto | cpu | cuda")
    ev.add_argument("--no-log", action="store_true", help="print only; do not log to the trial's MLflow run")
    ev.add_argument("--json", action="store_true", help="print the result as JSON")
    ev.set_defaults(func=_cmd_evaluate)


def _add_bench(sub) -> None:
    """`bench`: training steps and decoding timed."""
    be = sub.add_parser("bench", help="time training steps and decoding: the core against torch.nn.Transformer")
    be.add_argument("--preset", default="cpu_d128", help="a preset, or several separated by commas "
                    "(GPU check: cpu_d128,paper_base,paper_big --compile)")
    be.add_argument("--device", default="auto", help="auto | cpu | cuda")
    be.add_argument("--dtype", default="auto", help="fp32 | bf16 | auto (bf16 on CUDA, fp32 on CPU)")
    be.add_argument("--tokens", type=int, default=0, help="target tokens per batch (0: 25000 on GPU, 4096 on CPU)")
    be.add_argument("--sentence-len", type=int, default=25, help="mean sentence length in tokens")
    be.add_argument("--repeats", type=int, default=10, help="timed steps a model, interleaved; the median is reported")
    be.add_argument("--compile", action="store_true", help="also time torch.compile'd models")
    be.add_argument("--compile-mode", default="default", help="torch.compile mode (reduce-overhead: CUDA graphs)")
    be.add_argument("--vary", action="store_true", help="sentence lengths 0.6..1.4 x --sentence-len, padded")
    be.add_argument("--pack", action="store_true", help="also time the core on the same sentences packed")
    be.add_argument("--no-decode", action="store_true", help="skip the decoding benchmarks")
    be.add_argument("--decode-sentences", type=int, default=0,
                    help="sentences decoded at once (0: 256 on GPU, a batch that occupies it; 8 on CPU)")
    be.add_argument("--study", type=Path, default=None,
                    help="time a study row's training step at its own shapes instead (with --row, --profile)")
    be.add_argument("--row", default=None, help="the study row (with --study)")
    be.add_argument("--profile", default=None, help="the study profile (with --study; default: tiny)")
    be.add_argument("--threads", type=int, default=0, help="with --study: torch threads (0: the profile's cpu)")
    be.add_argument("--steps", type=int, default=30, help="with --study: steps timed, after 10 of warm-up")
    be.add_argument("--no-compare", action="store_true",
                    help="with --study: skip the same-shape comparison with torch.nn.Transformer")
    be.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="with --study: override a setting of the row, as `run --set` does (e.g. --set "
                         "train.cpu_amp=true)")
    be.add_argument("--json", action="store_true", help="print the result as JSON")
    be.set_defaults(func=_cmd_bench)


LISTABLE = ("studies", "profiles", "rows", "claims", "settings")


def _study_files() -> list[Path]:
    root = Path(__file__).resolve().parents[1] / "studies"
    return sorted(root.glob("*.yaml")) if root.is_dir() else []


def _study_path(name: str) -> Path:
    """A study file from its path or its name (table3, studies/table3.yaml): the one way every command that takes a
    study reads it, with the same did-you-mean and the same list of studies."""
    from harness.errors import suggest
    path = Path(name)
    if path.is_file():
        return path
    names = {p.stem: p for p in _study_files()}
    if name in names:
        return names[name]
    if path.is_dir():
        raise UserError(f"{name} is a folder; give one study, by its name or its file: {', '.join(names)}.")
    if path.suffix in (".yaml", ".yml") or len(path.parts) > 1:
        raise UserError(f"study file {name} does not exist{suggest(path.stem, list(names))}; the studies: "
                        f"{', '.join(names)}.")
    raise UserError(f"no study {name!r}{suggest(name, list(names))}; the studies: {', '.join(names)}.")


def _resolve_study(args) -> None:
    """A command's study argument (a name or a file, `study` or `--study`) resolved to its file, in place, before
    the command runs: `train --study table3` as `run table3` and `show table3`."""
    given = getattr(args, "study", None)
    if isinstance(given, Path) and not given.is_file():      # a file stays as the user wrote it
        args.study = Path(_shown_path(_study_path(str(given))))


def _cmd_list(args) -> int:
    """What the harness holds, one line each: studies, a study's profiles or rows, claims, --set settings."""

    from harness.study.kinds import load_study
    from harness.study.spec import read_yaml_file
    what = args.what
    if what is None:
        return _list_overview()
    if what in ("profiles", "rows") and not args.study:
        raise UserError(f"`list {what}` names a study: e.g. `python -m harness list {what} table3`.")
    if what == "studies":
        for path in _study_files():
            raw = read_yaml_file(path)
            print(f"{path.stem:<16} kind {raw.get('kind', 'train'):<9} table {raw.get('table') or '-':<8} "
                  f"profiles: {', '.join(raw.get('profiles', {}))}")
    elif what == "profiles":
        raw = read_yaml_file(_study_path(args.study))
        for name in raw.get("profiles") or {}:
            study = load_study(_study_path(args.study), name)
            needs = ", ".join(k for k, v in study.requires.items() if v) or "nothing"
            print(f"{name:<12} {len(study.rows):>3} rows, seeds {','.join(map(str, study.seeds))}, "
                  f"{len(study.trials)} trials; needs {needs}")
    elif what == "rows":
        raw = read_yaml_file(_study_path(args.study))
        study = load_study(_study_path(args.study), args.profile)
        print(f"{study.name}: each row an override of the base as the study file writes it, in the paper's units "
              f"(profile {study.profile} may scale them; `show {study.name} ROW --profile {study.profile}` resolves "
              "one)")
        for row in study.rows:
            print(f"  {row:<14} {json.dumps(raw['rows'].get(row) or {})}")
    elif what == "claims":
        from harness.report.claim_kinds.registry import kind_of
        from harness.report.verdicts import load_claims
        path = _study_path(args.study) if args.study else None     # a study's name or file, as every command takes it
        if path:
            args.study = read_yaml_file(path).get("study", path.stem)
        seeds = _default_seeds([path] if path else _study_files())
        for c in load_claims():
            if args.study and c.study != args.study:
                continue
            expect = kind_of(c.expect).describe(c)
            against = f" vs {json.dumps(c.b)}" if c.b is not None else ""
            n, profile = seeds.get(c.study, (None, ""))
            few = (f"  [{n} seed{'s' * (n != 1)} in profile {profile}: cannot be decided without --seeds 0,1,2]"
                   if n is not None and n < kind_of(c.expect).needs_seeds else "")
            print(f"{c.id:<36} {c.study:<14} {c.metric}: {json.dumps(c.a)}{against} {expect}{few}")
    else:
        _print_settings(args.study)
    return 0


def _default_seeds(paths: list[Path]) -> dict[str, tuple[int, str]]:
    """Each of these studies' seeds in its default profile, by study name: (how many, the profile)."""
    from harness.study.kinds import load_study
    out = {}
    for path in paths:
        try:
            study = load_study(path, None)
        except (UserError, ValueError):
            continue
        out[study.name] = (len(study.seeds), study.profile)
    return out


def _list_overview() -> int:
    """`list` alone: every study with its profiles (the default first), its rows and the ids of its claims."""
    import textwrap

    from harness.report.verdicts import load_claims
    from harness.study.kinds import load_study
    from harness.study.spec import read_yaml_file
    claims = load_claims()
    for path in _study_files():
        raw = read_yaml_file(path)
        name = raw.get("study", path.stem)
        default = load_study(path, None).profile
        profiles = [default] + [p for p in raw.get("profiles") or {} if p != default]
        ids = [c.id for c in claims if c.study == name]
        print(f"{name} ({path.parent.name}/{path.name}; kind {raw.get('kind', 'train')}"
              f"{', the paper' + chr(39) + 's ' + raw['table'] if raw.get('table') else ''})")
        for label, items in ((f"profiles ({len(profiles)}, the default first)", profiles),
                             (f"rows ({len(raw.get('rows') or {})})", list(raw.get("rows") or {})),
                             (f"claims ({len(ids)})", ids or ["none"])):
            print(textwrap.fill(", ".join(items), width=118, initial_indent=f"  {label}: ",
                                subsequent_indent="      "))
    print("\nmore: `list profiles STUDY`, `list rows STUDY [--profile P]`, `list claims [STUDY]`, `settings`, "
          "`show STUDY ROW [--profile P]`")
    return 0


def _print_settings(section: str | None = None) -> None:
    """Every --set key (or one section's) with its type, default and one line of help, by whose setting it is:
    each model family, the training, each measurement, the data."""
    from harness import overrides
    if section is not None and section not in overrides.RUN_SECTIONS:
        raise UserError(f"settings {section!r}: give a section, one of {', '.join(overrides.RUN_SECTIONS)}.")
    owner = None
    for key, kind, default, doc, whose in overrides.catalogue():
        if section and not key.startswith(section + "."):
            continue
        if whose != owner:
            print(f"{'' if owner is None else chr(10)}# {whose}")
            owner = whose
        print(f"{key:<34} {kind:<12} {default:<14} {doc}".rstrip())


def _cmd_settings(args) -> int:
    _print_settings(args.section)
    return 0


def _shown_path(path: Path) -> str:
    """A study file as a command line names it: relative to the working directory where it lies below it."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return str(path)


def _cmd_show(args) -> int:
    """`show STUDY ROW`: the row's resolved settings, each with where it came from."""
    from harness import overrides
    from harness.study.kinds import KINDS
    from harness.study.spec import Selection, read_study_file
    path = _study_path(args.study)
    file = read_study_file(path, KINDS)
    kind = KINDS[file.head["kind"]]
    if kind.explain is None:
        article = "an" if kind.name[:1] in "aeiou" else "a"
        raise UserError(f"{args.study} is {article} {kind.name} study: its rows are probe settings, which "
                        f"`python -m harness run {_shown_path(path)} --dry-run` lists; `show` explains training rows.")
    sets = {sec: v for sec, v in overrides.parse_sets(args.set, overrides.RUN_SECTIONS).items() if v}
    seeds = [args.seed] if args.seed is not None else None
    settings = kind.explain(file, Selection(args.profile, None, seeds, sets), args.row)
    print(f"{file.head['name']} row {args.row}{f', profile {args.profile}' if args.profile else ''}: each setting "
          "and where it came from (preset < base < profile base < row < profile scale < profile < profile row < --set)")
    from harness.data.corpus import DataConfig
    prepared = dict((k, v) for k, v, _ in settings).get("data.name", "synth") != "synth"
    for key, value, source in settings:
        if prepared and key.startswith("data.") and key[5:] in DataConfig.SYNTH_ONLY:
            source += " (the made-up corpus's only: a prepared directory does not read it)"
        print(f"{key:<34} {json.dumps(value):<22} {source}")
    return 0


def _add_list(sub) -> None:
    ls = sub.add_parser("list", help="list the studies, a study's profiles or rows, the claims, or the --set settings")
    ls.add_argument("what", nargs="?", default=None, choices=LISTABLE,
                    help="studies | profiles STUDY | rows STUDY [--profile P] | claims [STUDY] | settings "
                         "[model|train|data|resources]; left out: every study with its profiles, rows and claims")
    ls.add_argument("study", nargs="?", default=None,
                    help="the study (a name such as table3, or a file); for settings, the section")
    ls.add_argument("--profile", default=None, help="with rows: the profile (the study's default when left out)")
    ls.set_defaults(func=_cmd_list)
    st = sub.add_parser("settings", help="every --set key: its type, default and one line of help, for each model "
                                         "family, the training, each measurement and the data")
    st.add_argument("section", nargs="?", default=None, help="one section: model, train, data or resources")
    st.set_defaults(func=_cmd_settings)
    sh = sub.add_parser("show", help="a study row's resolved settings, each with where it came from")
    sh.add_argument("study", help="the study (a name such as table3, or a file)")
    sh.add_argument("row", help="the row, e.g. base or A1")
    sh.add_argument("--profile", default=None, help="the profile (the study's default when left out)")
    sh.add_argument("--seed", type=int, default=None, help="the seed (the profile's first when left out)")
    sh.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="lay a setting over the row, as `run --set` does")
    sh.set_defaults(func=_cmd_show)


class _DefaultsFormatter(argparse.HelpFormatter):
    """Help that shows each option's default, where it has one the help does not already state (None, False and
    empty lists say nothing)."""

    def _get_help_string(self, action):
        text = action.help or ""
        # `is` for None and False: a default of 0 (== False) is a default worth showing
        if ("default" in text.lower() or action.default is None or action.default is False
                or action.default in ([], argparse.SUPPRESS) or not action.option_strings):
            return text
        return text + " (default: %(default)s)"


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every command's help shows each option's default (_DefaultsFormatter)."""
    parser.formatter_class = _DefaultsFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _show_defaults(child)


def build_parser() -> argparse.ArgumentParser:
    import importlib.metadata
    # Installed, the harness is also the `attention-harness` command: the help names whichever was typed.
    prog = "attention-harness" if Path(sys.argv[0]).name == "attention-harness" else "python -m harness"
    parser = argparse.ArgumentParser(prog=prog, description="Regenerate the tables of 'Attention Is All You Need' "
                                     "(`python -m harness` and the installed `attention-harness` are the same).")
    try:
        version = importlib.metadata.version("attention-harness")
    except importlib.metadata.PackageNotFoundError:
        version = "not installed"
    parser.add_argument("--version", action="version", version=f"attention-harness {version}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (_add_data, _add_train, _add_run, _add_status, _add_report, _add_evaluate, _add_probes, _add_bench,
                _add_list):
        add(sub)
    _show_defaults(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    import warnings
    warnings.formatwarning = one_line_warning
    try:
        _resolve_study(args)
        return args.func(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... --dry-run | head`): stop quietly, as a pipeline's tools do, and point
        # stdout at /dev/null so that the interpreter's final flush does not raise again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 128 + signal.SIGPIPE
