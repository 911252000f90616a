"""The data-source seam (harness/data/sources.py): a source added by one registry entry is named by
`data.name` and read like the built-in ones, with nothing else changed; `data prepare` lists the sources."""

import dataclasses
from pathlib import Path

from harness.cli import main
from harness.data import sources
from harness.data.corpus import DataConfig, load_dataset


def _copy_corpus(cfg: DataConfig) -> Path:
    """A generated toy source: the target is the source reversed."""
    out = Path(cfg.cache_dir) / "reverse"
    out.mkdir(parents=True, exist_ok=True)
    words = [f"w{i}" for i in range(30)]
    for split, n in (("train", 200), ("dev", 10), ("test", 10)):
        rows = [" ".join(words[(i + j) % 30] for j in range(3 + i % 5)) for i in range(n)]
        (out / f"{split}.src").write_text("\n".join(rows) + "\n", encoding="utf-8")
        (out / f"{split}.tgt").write_text("\n".join(" ".join(r.split()[::-1]) for r in rows) + "\n", encoding="utf-8")
    return out


def test_a_generated_source_is_one_registry_entry(monkeypatch, tmp_path):
    monkeypatch.setitem(sources.SOURCES, "reverse", sources.Source("reversed word lists", generate=_copy_corpus))
    data = load_dataset(DataConfig(name="reverse", cache_dir=str(tmp_path)), vocab_size=64)
    assert (len(data.train.data), len(data.dev.data), len(data.test.data)) == (200, 10, 10)
    assert data.train.tgt_text[0] == " ".join(data.train.src_text[0].split()[::-1])


def test_data_prepare_names_every_preparable_source(capsys, tmp_path):
    assert main(["data", "prepare", "nothing", "--from", str(tmp_path), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert all(name in err for name in ("wmt14-en-de", "wmt14-en-fr", "multi30k", "ptb"))
    assert "synth" not in err.split("knows:")[1]            # generated, not prepared: `data synth` writes it
    assert all(dataclasses.is_dataclass(s) for s in sources.SOURCES.values())


def test_each_source_names_the_command_that_makes_a_missing_directory():
    from harness.data.sources import prepare_command
    cmd = lambda name, task="translate": prepare_command(Path(name), task)  # noqa: E731
    assert cmd("data/multi30k-en-de-tok") == ("python -m harness data prepare multi30k --from DIR --pair en-de "
                                              "--form lc.norm.tok --out data/multi30k-en-de-tok")
    assert cmd("data/multi30k-en-fr").endswith("multi30k --from DIR --pair en-fr --out data/multi30k-en-fr")
    assert cmd("data/wmt14-en-fr").endswith("prepare wmt14-en-fr --from DIR --out data/wmt14-en-fr")
    assert cmd("data/ptb-wsj-sample", "parse").endswith("prepare ptb --from DIR --out data/ptb-wsj-sample")
    # a name no source makes: the general form, every source that prepares named
    assert "prepare wmt14-en-de|wmt14-en-fr|multi30k|ptb --from DIR --out data/mine" in cmd("data/mine")
