"""Data sources, one registry: a source is one module of harness/data/ and one line of SOURCES below.

A source either prepares downloaded files into a data directory (`python -m harness data prepare NAME
--from DIR --out DIR`: train/dev/test files, one sentence a line, and manifest.json), or generates its
corpus from the data settings (`data.name: NAME`, e.g. the made-up corpus). A prepared directory is then
read like any other (`data.name: DIR`, harness/data/corpus.py): the readers do not know where it came from.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from harness.data import multi30k, ptb, synth, wmt


@dataclass(frozen=True)
class Source:
    summary: str
    # downloaded files -> a prepared directory: (from_dir, out_dir, pair) -> manifest; pair where the source has
    # several language pairs (`--pair`), else None
    prepare: Callable[[Path, Path, str | None], dict] | None = None
    pairs: tuple[str, ...] = ()
    # the forms of the text it can be prepared in (`--form`; the first is the default), where it has several;
    # prepare then takes form= and tokenize= (the CLI passes harness/eval/bleu.py's lc_norm_tok)
    forms: tuple[str, ...] = ()
    # the settings -> a generated corpus's directory (cached): (DataConfig) -> Path
    generate: Callable[..., Path] | None = None
    # the one-line summary `data prepare` prints of a manifest
    describe: Callable[[dict], str] = lambda manifest: ""
    # a missing data directory -> the `data prepare` arguments that make it, where this source makes directories
    # of that name and task (its default --out names), else None: (path, task) -> "NAME --from DIR ..."
    makes: Callable[[Path, str], str | None] = lambda path, task: None


def _wmt(pair: str) -> Callable[[Path, str], str | None]:
    return lambda path, task: (f"wmt14-{pair} --from DIR" if task == "translate" and "wmt" in path.name.lower()
                               and pair in path.name else None)


def _multi30k(path: Path, task: str) -> str | None:
    if task != "translate" or "multi30k" not in path.name.lower():
        return None
    pair = next((p for p in multi30k.PAIRS if p in path.name), multi30k.PAIRS[0])
    tok = [f for f in multi30k.FORMS[1:] if path.name.endswith("-tok")]     # data/multi30k-en-de-tok
    return f"multi30k --from DIR --pair {pair}" + (f" --form {tok[0]}" if tok else "")


def _splits(unit: str, key: str) -> Callable[[dict], str]:
    return lambda manifest: ", ".join(f"{s} {v[key]:,}{unit}" for s, v in manifest["splits"].items())


SOURCES = {
    "synth": Source("the made-up corpus, generated with gold trees (harness/data/synth/)",
                    generate=synth.synth_corpus_dir),
    "wmt14-en-de": Source("WMT14 English-German (§5.1)",
                          prepare=lambda src, out, pair: wmt.prepare_wmt14(wmt.EN_DE, src, out), makes=_wmt("en-de")),
    "wmt14-en-fr": Source("WMT14 English-French (§5.1)",
                          prepare=lambda src, out, pair: wmt.prepare_wmt14(wmt.EN_FR, src, out), makes=_wmt("en-fr")),
    "multi30k": Source("Multi30K task 1, en-de or en-fr (real text at laptop scale)",
                       prepare=lambda src, out, pair, **form: multi30k.prepare_multi30k(src, out, pair or "en-de",
                                                                                        **form),
                       pairs=multi30k.PAIRS, forms=multi30k.FORMS, describe=_splits("", "lines"), makes=_multi30k),
    "ptb": Source("Penn Treebank WSJ trees, the full sections or NLTK's sample (Table 4)",
                  prepare=lambda src, out, pair: ptb.prepare_ptb(src, out),
                  describe=_splits(" sentences", "sentences"),
                  makes=lambda path, task: "ptb --from DIR" if task == "parse" else None),
}


def prepare_command(path: Path, task: str) -> str:
    """How to make a missing data directory: the `data prepare` command of the source that makes directories of
    its name and task, or the general form with every source that prepares."""
    for source in SOURCES.values():
        args = source.makes(path, task)
        if args:
            return f"python -m harness data prepare {args} --out {path}"
    return f"python -m harness data prepare {'|'.join(preparable())} --from DIR --out {path}"


def preparable() -> list[str]:
    """The sources `data prepare` takes."""
    return [name for name, s in SOURCES.items() if s.prepare is not None]
