"""qdqopt against ORT on the transformer fixtures: ``python -m benchmarks.transformer_table [NAME ...]``.

:mod:`benchmarks.fidelity` on ``--set transformers`` at tiers S, X and P (tier N is left out by default: random int64
token ids fall outside the vocabularies). Every option of :mod:`benchmarks.fidelity` applies.
"""

from __future__ import annotations

import sys

from benchmarks.fidelity import main

if __name__ == "__main__":
    sys.exit(main(default_set="transformers", default_tiers="S,X,P"))
