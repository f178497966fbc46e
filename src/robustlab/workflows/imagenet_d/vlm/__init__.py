"""Vision-language models on ImageNet-D's two-choice question (issue 10, REFERENCE.md s. 5).

- :mod:`.model`: ``vlm:PATH``, a transformers image-text-to-text folder (LLaVA first).
- :mod:`.questions`: the published question, the distractor rule, where items come from.
- :mod:`.scoring`: the published substring-and-synonym scorer.
- :mod:`.run`: one resumable evaluation stored in the results database.
"""

from .questions import QUESTION, Item, distractor, question
from .scoring import score_answer

__all__ = ["QUESTION", "Item", "distractor", "question", "score_answer"]
