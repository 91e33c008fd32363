"""Readers for labelled task data: TSV/CSV/JSONL columns, CoNLL, SQuAD, CoNLL-U; numpy out."""
