"""Reports: MLflow -> reports/<study>.md and .csv, plots, and reports/README.md (an index).

A report reads only what the study runner logged (through harness.tracking, the one module that imports
mlflow) and the paper's numbers (harness/paper); it never imports torch or the model. writers.py holds the
registry of layouts (WRITERS: one per paper table, table1 ... table4) and `write_report` / `report_all`;
results.py, header.py, cells.py, stopping.py, claims_section.py, curves.py, labels.py, sections.py and
files.py the helpers the layouts share, each of one concern; verdicts.py the claims' verdicts. This file imports
nothing, so that importing one of them never runs the others.
"""
