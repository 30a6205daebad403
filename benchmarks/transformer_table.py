"""qdqopt against ORT on the transformer fixtures: ``python -m benchmarks.transformer_table [NAME ...]``.

:mod:`fidelity` (``benchmarks/fidelity.py``) on ``--set transformers`` at tiers S, X and P (tier N is left out by
default: random int64 token ids fall outside the vocabularies). Every option of the fidelity table applies.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fidelity import main

if __name__ == "__main__":
    sys.exit(main(default_set="transformers", default_tiers="S,X,P"))
